package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/sqlshared"
)

// usageRowsPerStatement is how many rows one usage upsert carries (six
// parameters each).
const usageRowsPerStatement = 200

// newFlushCounts records the ids of flushes and returns the counts of those
// it had not recorded before, merged by key and hour (a flush without an id
// always counts).
func newFlushCounts(ctx context.Context, t *sql.Tx, flushes []btk.UsageFlush) ([]btk.UsageCount, error) {
	fresh := flushes[:0:0]
	for _, f := range flushes {
		if f.ID != "" {
			at, err := sqlshared.UnixNano(f.At)
			if err != nil {
				return nil, err
			}
			res, err := t.ExecContext(ctx, `INSERT INTO usage_flushes (id, at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING`, f.ID, at)
			if err != nil {
				return nil, err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				continue // written before: its counts are in the table
			}
		}
		fresh = append(fresh, f)
	}
	return btk.FlushCounts(fresh), nil
}

// addUsage adds counts to the hourly rows and stores the latest clients, in
// the caller's transaction, in the order given (the service sorts by key and
// hour). SQLite has one writer, so the order only matters to PostgreSQL.
func addUsage(ctx context.Context, t *sql.Tx, counts []btk.UsageCount, clients []btk.KeyClient) error {
	err := execChunks(ctx, t, counts, usageRowsPerStatement, addUsageStatement, func(args []any, c btk.UsageCount) ([]any, error) {
		hour, err := sqlshared.UnixNano(c.Start)
		return append(args, c.KeyID, c.WorkspaceID, hour, c.Accepted, c.RateLimited, c.Refused), err
	})
	if err != nil {
		return err
	}
	for _, c := range clients {
		at, err := sqlshared.UnixNano(c.At)
		if err != nil {
			return err
		}
		_, err = t.ExecContext(ctx, `INSERT INTO api_key_clients (api_key_id, at, ip, user_agent) VALUES (?, ?, ?, ?)
			ON CONFLICT (api_key_id) DO UPDATE SET at = excluded.at, ip = excluded.ip, user_agent = excluded.user_agent
			WHERE excluded.at > api_key_clients.at`, c.KeyID, at, c.IP, c.UserAgent)
		if err != nil {
			return err
		}
	}
	return nil
}

// addUsageStatement is the upsert of rows hourly counts, added to those
// stored.
func addUsageStatement(rows int) string {
	// #nosec G202 -- only placeholders are concatenated; every value is a bound argument
	return `INSERT INTO api_key_usage (api_key_id, workspace_id, hour, accepted, rate_limited, refused) VALUES ` +
		strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?), ", rows), ", ") +
		` ON CONFLICT (api_key_id, hour) DO UPDATE SET
			accepted = accepted + excluded.accepted,
			rate_limited = rate_limited + excluded.rate_limited,
			refused = refused + excluded.refused`
}

// execChunks writes rows in the caller's transaction, up to perStatement a
// statement: statement(n) is the statement of n rows, and add appends a
// row's parameters to args (one slice, reused for every statement).
func execChunks[T any](ctx context.Context, t *sql.Tx, rows []T, perStatement int, statement func(n int) string, add func(args []any, row T) ([]any, error)) error {
	var args []any
	for chunk := range slices.Chunk(rows, perStatement) {
		args = args[:0]
		for _, row := range chunk {
			var err error
			if args, err = add(args, row); err != nil {
				return err
			}
		}
		if _, err := t.ExecContext(ctx, statement(len(chunk)), args...); err != nil {
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
	res, err := db.w.ExecContext(ctx, query, b)
	if err != nil {
		return 0, mapErr(op, err)
	}
	n, err := res.RowsAffected()
	return n, mapErr(op, err)
}

// PruneUsage deletes the hours that start before before.
func (db *DB) PruneUsage(ctx context.Context, before time.Time) (int64, error) {
	return db.prune(ctx, "prune usage", `DELETE FROM api_key_usage WHERE hour < ?`, before)
}

// PruneUsageFlushes forgets the flush ids recorded before before.
func (db *DB) PruneUsageFlushes(ctx context.Context, before time.Time) (int64, error) {
	return db.prune(ctx, "prune usage flushes", `DELETE FROM usage_flushes WHERE at < ?`, before)
}

// PruneDeliveries deletes the finished webhook deliveries created before
// before (docs/webhooks.md).
func (db *DB) PruneDeliveries(ctx context.Context, before time.Time) (int64, error) {
	return db.prune(ctx, "prune deliveries", `DELETE FROM webhook_deliveries WHERE status <> 'PENDING' AND created_at < ?`, before)
}

// PruneSessions deletes the sessions that expired before before. It scans
// the table (no index on expires_at): once an hour, over about half a day
// of logins.
func (db *DB) PruneSessions(ctx context.Context, before time.Time) (int64, error) {
	return db.prune(ctx, "prune sessions", `DELETE FROM sessions WHERE expires_at < ?`, before)
}

// The usage reads (docs/usage.md#what-the-reads-cost). SQLite has no
// statistics here (btk runs no ANALYZE), so the queries say which index to
// take. A workspace's series walks the covering index
// api_key_usage_workspace_covering (migration 0011) in hour order, each row
// read from the index alone. A key's own series reads that key's rows
// through the primary key. The top keys read each key of the workspace
// (api_keys, in seq order: CROSS JOIN fixes the order of the loops) and its
// rows of the range through the primary key, one run of rows per key, so the
// sums come out key by key and only they are sorted; through the workspace
// index every row would go through a temporary B-tree to be grouped by key
// (4-5 times slower). The unary + keeps the planner off the workspace index
// where it would walk every key's rows of the range for each key.
// TestUsageQueryPlans checks these plans.
const (
	usageSeriesQuery = `SELECT hour, sum(accepted), sum(rate_limited), sum(refused) FROM api_key_usage
		WHERE workspace_id = ? AND hour >= ? AND hour < ? GROUP BY hour ORDER BY hour`
	keyUsageSeriesQuery = `SELECT hour, sum(accepted), sum(rate_limited), sum(refused) FROM api_key_usage
		WHERE api_key_id = ? AND hour >= ? AND hour < ? AND +workspace_id = ? GROUP BY hour ORDER BY hour`
	topKeysQuery = `SELECT k.id, sum(u.accepted), sum(u.rate_limited), sum(u.refused)
		FROM api_keys k CROSS JOIN api_key_usage u
		WHERE k.workspace_id = ? AND u.api_key_id = k.id AND u.hour >= ? AND u.hour < ? AND +u.workspace_id = k.workspace_id
		GROUP BY k.seq ORDER BY sum(u.accepted) + sum(u.rate_limited) + sum(u.refused) DESC, k.id LIMIT ?`
)

func (t *tx) UsageSeries(ctx context.Context, f btk.UsageFilter) ([]btk.UsageCount, error) {
	since, until, err := sqlshared.UsageRange(f)
	if err != nil {
		return nil, err
	}
	q, args := usageSeriesQuery, []any{f.WorkspaceID, since, until}
	if f.KeyID != "" {
		q, args = keyUsageSeriesQuery, []any{f.KeyID, since, until, f.WorkspaceID}
	}
	return all(ctx, t, "usage series", func(row sqlshared.Row) (btk.UsageCount, error) {
		c := btk.UsageCount{WorkspaceID: f.WorkspaceID, KeyID: f.KeyID}
		var hour int64
		err := row.Scan(&hour, &c.Accepted, &c.RateLimited, &c.Refused)
		c.Start = sqlshared.FromNano(hour)
		return c, err
	}, q, args...)
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
	}, topKeysQuery, f.WorkspaceID, since, until, n)
}

func (t *tx) KeyClient(ctx context.Context, keyID string) (*btk.KeyClient, error) {
	c := btk.KeyClient{KeyID: keyID}
	var at int64
	err := t.tx.QueryRowContext(ctx, `SELECT at, ip, user_agent FROM api_key_clients WHERE api_key_id = ?`, keyID).
		Scan(&at, &c.IP, &c.UserAgent)
	if err != nil {
		return nil, mapErr("key client", err)
	}
	c.At = sqlshared.FromNano(at)
	return &c, nil
}

// idList is ids as one parameter: a JSON array that json_each reads, so
// that a page of 500 ids is one bound value, not 500 placeholders.
func idList(ids []string) (string, error) {
	b, err := json.Marshal(ids)
	return string(b), err
}

// The reads of a page of keys (docs/usage.md#what-the-reads-cost): each key
// of the list is a seek of the primary key, its rows of the range read in
// hour order, summed per period as they come (a day's 24 rows are one row
// of the answer). TestUsageQueryPlans checks the plans.
const (
	keyClientsQuery = `SELECT c.api_key_id, c.at, c.ip, c.user_agent FROM api_key_clients c
		WHERE c.api_key_id IN (SELECT value FROM json_each(?))
		AND EXISTS (SELECT 1 FROM api_keys k WHERE k.id = c.api_key_id AND k.workspace_id = ?)`
	keysUsageSeriesQuery = `SELECT api_key_id, ?2 + (hour - ?2) / ?4 * ?4 AS period,
		sum(accepted), sum(rate_limited), sum(refused) FROM api_key_usage
		WHERE api_key_id IN (SELECT value FROM json_each(?1)) AND hour >= ?2 AND hour < ?3 AND +workspace_id = ?5
		GROUP BY api_key_id, period ORDER BY api_key_id, period`
)

func (t *tx) KeyClients(ctx context.Context, workspaceID string, keyIDs []string) ([]btk.KeyClient, error) {
	if len(keyIDs) == 0 {
		return nil, nil
	}
	ids, err := idList(keyIDs)
	if err != nil {
		return nil, err
	}
	return all(ctx, t, "key clients", sqlshared.ScanKeyClient, keyClientsQuery, ids, workspaceID)
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
	ids, err := idList(keyIDs)
	if err != nil {
		return nil, err
	}
	return all(ctx, t, "keys usage series", func(row sqlshared.Row) (btk.UsageCount, error) {
		c := btk.UsageCount{WorkspaceID: f.WorkspaceID}
		var start int64
		err := row.Scan(&c.KeyID, &start, &c.Accepted, &c.RateLimited, &c.Refused)
		c.Start = sqlshared.FromNano(start)
		return c, err
	}, keysUsageSeriesQuery, ids, since, until, int64(period), f.WorkspaceID)
}
