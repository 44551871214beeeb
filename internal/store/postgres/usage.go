package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/sqlshared"
)

// newFlushCounts records the ids of flushes and returns the counts of those
// it had not recorded before, merged by key and hour (a flush without an id
// always counts). Inserting an id that another transaction holds
// uncommitted waits for it: a flush sent again while its first commit is
// still in flight is counted once whichever way that commit ends.
func newFlushCounts(ctx context.Context, t pgx.Tx, flushes []btk.UsageFlush) ([]btk.UsageCount, error) {
	ids, ats := make([]string, 0, len(flushes)), make([]int64, 0, len(flushes))
	for _, f := range flushes {
		if f.ID == "" {
			continue
		}
		at, err := sqlshared.UnixNano(f.At)
		if err != nil {
			return nil, err
		}
		ids, ats = append(ids, f.ID), append(ats, at)
	}
	recorded := map[string]bool{}
	if len(ids) > 0 {
		rows, err := t.Query(ctx, `INSERT INTO usage_flushes (id, at) SELECT * FROM unnest($1::text[], $2::bigint[])
			ON CONFLICT (id) DO NOTHING RETURNING id`, ids, ats)
		if err != nil {
			return nil, err
		}
		added, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, err
		}
		for _, id := range added {
			recorded[id] = true
		}
	}
	fresh := flushes[:0:0]
	for _, f := range flushes {
		if f.ID == "" || recorded[f.ID] {
			fresh = append(fresh, f)
			delete(recorded, f.ID) // an id twice in the batch counts once
		}
	}
	return btk.FlushCounts(fresh), nil
}

// addUsage adds counts to the hourly rows (INSERT … ON CONFLICT DO UPDATE
// SET accepted = accepted + excluded.accepted) and stores the latest
// clients, in the caller's transaction, rows taken in the order given.
func addUsage(ctx context.Context, t pgx.Tx, counts []btk.UsageCount, clients []btk.KeyClient) error {
	if len(counts) > 0 {
		n := len(counts)
		keys, workspaces := make([]string, n), make([]string, n)
		hours, acc, lim, ref := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		for i, c := range counts {
			h, err := sqlshared.UnixNano(c.Start)
			if err != nil {
				return err
			}
			keys[i], workspaces[i], hours[i] = c.KeyID, c.WorkspaceID, h
			acc[i], lim[i], ref[i] = c.Accepted, c.RateLimited, c.Refused
		}
		_, err := t.Exec(ctx, `INSERT INTO api_key_usage AS u (api_key_id, workspace_id, hour, accepted, rate_limited, refused)
			SELECT k, w, h, a, l, r FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[]) WITH ORDINALITY AS v(k, w, h, a, l, r, i)
			ORDER BY i
			ON CONFLICT (api_key_id, hour) DO UPDATE SET
				accepted = u.accepted + excluded.accepted,
				rate_limited = u.rate_limited + excluded.rate_limited,
				refused = u.refused + excluded.refused`,
			keys, workspaces, hours, acc, lim, ref)
		if err != nil {
			return err
		}
	}
	if len(clients) > 0 {
		n := len(clients)
		keys, ats, ips, uas := make([]string, n), make([]int64, n), make([]string, n), make([]string, n)
		for i, c := range clients {
			at, err := sqlshared.UnixNano(c.At)
			if err != nil {
				return err
			}
			keys[i], ats[i], ips[i], uas[i] = c.KeyID, at, c.IP, c.UserAgent
		}
		_, err := t.Exec(ctx, `INSERT INTO api_key_clients AS c (api_key_id, at, ip, user_agent)
			SELECT k, a, p, u FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[]) WITH ORDINALITY AS v(k, a, p, u, i)
			ORDER BY i
			ON CONFLICT (api_key_id) DO UPDATE SET at = excluded.at, ip = excluded.ip, user_agent = excluded.user_agent
			WHERE excluded.at > c.at`, keys, ats, ips, uas)
		if err != nil {
			return err
		}
	}
	return nil
}

// prune runs op's DELETE of the rows before before (its one parameter)
// and returns how many it deleted.
func (db *DB) prune(ctx context.Context, op, query string, before time.Time) (int64, error) {
	b, err := sqlshared.UnixNano(before)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, TxTimeout) // as every transaction (tx.go)
	defer cancel()
	tag, err := db.pool.Exec(ctx, query, b)
	if err != nil {
		return 0, mapErr(op, err)
	}
	return tag.RowsAffected(), nil
}

// PruneUsage deletes the hours that start before before; several instances
// doing it at once delete each row once.
func (db *DB) PruneUsage(ctx context.Context, before time.Time) (int64, error) {
	return db.prune(ctx, "prune usage", `DELETE FROM api_key_usage WHERE hour < $1`, before)
}

// PruneUsageFlushes forgets the flush ids recorded before before.
func (db *DB) PruneUsageFlushes(ctx context.Context, before time.Time) (int64, error) {
	return db.prune(ctx, "prune usage flushes", `DELETE FROM usage_flushes WHERE at < $1`, before)
}

// PruneDeliveries deletes the finished webhook deliveries created before
// before (docs/webhooks.md); several instances doing it at once delete each
// row once.
func (db *DB) PruneDeliveries(ctx context.Context, before time.Time) (int64, error) {
	return db.prune(ctx, "prune deliveries", `DELETE FROM webhook_deliveries WHERE status <> 'PENDING' AND created_at < $1`, before)
}

// PruneSessions deletes the sessions that expired before before; several
// instances doing it at once delete each row once. It scans the table (no
// index on expires_at): once an hour, over about half a day of logins.
func (db *DB) PruneSessions(ctx context.Context, before time.Time) (int64, error) {
	return db.prune(ctx, "prune sessions", `DELETE FROM sessions WHERE expires_at < $1`, before)
}

func (t *tx) UsageSeries(ctx context.Context, f btk.UsageFilter) ([]btk.UsageCount, error) {
	since, until, err := sqlshared.UsageRange(f)
	if err != nil {
		return nil, err
	}
	q := `SELECT hour, sum(accepted)::bigint, sum(rate_limited)::bigint, sum(refused)::bigint FROM api_key_usage
		WHERE workspace_id = $1 AND hour >= $2 AND hour < $3`
	args := []any{f.WorkspaceID, since, until}
	if f.KeyID != "" {
		q += ` AND api_key_id = $4`
		args = append(args, f.KeyID)
	}
	return all(ctx, t, "usage series", func(row sqlshared.Row) (btk.UsageCount, error) {
		c := btk.UsageCount{WorkspaceID: f.WorkspaceID, KeyID: f.KeyID}
		var hour int64
		err := row.Scan(&hour, &c.Accepted, &c.RateLimited, &c.Refused)
		c.Start = sqlshared.FromNano(hour)
		return c, err
	}, q+` GROUP BY hour ORDER BY hour`, args...)
}

func (t *tx) TopKeys(ctx context.Context, f btk.UsageFilter, n int) ([]btk.UsageCount, error) {
	since, until, err := sqlshared.UsageRange(f)
	if err != nil {
		return nil, err
	}
	return all(ctx, t, "top keys", func(row sqlshared.Row) (btk.UsageCount, error) {
		c := btk.UsageCount{WorkspaceID: f.WorkspaceID}
		err := row.Scan(&c.KeyID, &c.Accepted, &c.RateLimited, &c.Refused)
		return c, err
	}, `SELECT api_key_id, sum(accepted)::bigint, sum(rate_limited)::bigint, sum(refused)::bigint
		FROM api_key_usage WHERE workspace_id = $1 AND hour >= $2 AND hour < $3
		GROUP BY api_key_id ORDER BY sum(accepted) + sum(rate_limited) + sum(refused) DESC, api_key_id LIMIT $4`,
		f.WorkspaceID, since, until, n)
}

func (t *tx) KeyClient(ctx context.Context, keyID string) (*btk.KeyClient, error) {
	c := btk.KeyClient{KeyID: keyID}
	var at int64
	err := t.tx.QueryRow(ctx, `SELECT at, ip, user_agent FROM api_key_clients WHERE api_key_id = $1`, keyID).
		Scan(&at, &c.IP, &c.UserAgent)
	if err != nil {
		return nil, mapErr("key client", err)
	}
	c.At = sqlshared.FromNano(at)
	return &c, nil
}

// The reads of a page of keys (docs/usage.md#what-the-reads-cost): each key
// of the array is a seek of the primary key, its rows of the range summed
// per period (a day's 24 rows are one row of the answer).
const (
	keyClientsQuery = `SELECT c.api_key_id, c.at, c.ip, c.user_agent
		FROM api_key_clients c JOIN api_keys k ON k.id = c.api_key_id
		WHERE c.api_key_id = ANY($1::text[]) AND k.workspace_id = $2`
	keysUsageSeriesQuery = `SELECT api_key_id, $2 + (hour - $2) / $4 * $4 AS period,
		sum(accepted)::bigint, sum(rate_limited)::bigint, sum(refused)::bigint FROM api_key_usage
		WHERE api_key_id = ANY($1::text[]) AND hour >= $2 AND hour < $3 AND workspace_id = $5
		GROUP BY api_key_id, period ORDER BY api_key_id, period`
)

func (t *tx) KeyClients(ctx context.Context, workspaceID string, keyIDs []string) ([]btk.KeyClient, error) {
	if len(keyIDs) == 0 {
		return nil, nil
	}
	return all(ctx, t, "key clients", sqlshared.ScanKeyClient, keyClientsQuery, keyIDs, workspaceID)
}

func (t *tx) KeyUsageSeries(ctx context.Context, f btk.UsageFilter, keyIDs []string, period time.Duration) ([]btk.UsageCount, error) {
	if len(keyIDs) == 0 {
		return nil, nil
	}
	since, until, err := sqlshared.UsageRange(f)
	if err != nil {
		return nil, err
	}
	if period <= 0 {
		return nil, fmt.Errorf("usage period %v", period)
	}
	return all(ctx, t, "keys usage series", func(row sqlshared.Row) (btk.UsageCount, error) {
		c := btk.UsageCount{WorkspaceID: f.WorkspaceID}
		var start int64
		err := row.Scan(&c.KeyID, &start, &c.Accepted, &c.RateLimited, &c.Refused)
		c.Start = sqlshared.FromNano(start)
		return c, err
	}, keysUsageSeriesQuery, keyIDs, since, until, int64(period), f.WorkspaceID)
}
