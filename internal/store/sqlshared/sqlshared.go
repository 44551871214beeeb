// Package sqlshared holds what the SQL stores (SQLite, PostgreSQL) encode the
// same way, so that both hand out the same cursors and refuse the same times.
package sqlshared

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// Cursor is base64url of a table tag and the seq of the last row handed out;
// the tag keeps a key cursor from being replayed on an audit list.
func Cursor(tag byte, seq int64) string {
	return base64.RawURLEncoding.EncodeToString(strconv.AppendInt([]byte{tag}, seq, 10))
}

// AfterSeq decodes a cursor of tag into the seq rows must be below.
func AfterSeq(tag byte, c string) (int64, error) {
	if c == "" {
		return math.MaxInt64, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) < 2 || b[0] != tag {
		return 0, btk.ErrBadCursor
	}
	seq, err := strconv.ParseInt(string(b[1:]), 10, 64)
	if err != nil || seq <= 0 || strconv.FormatInt(seq, 10) != string(b[1:]) {
		return 0, btk.ErrBadCursor
	}
	return seq, nil
}

// Row is one row of either driver (database/sql's Row and Rows, pgx's):
// all that a store's scan function reads.
type Row interface{ Scan(dest ...any) error }

// Rows is a result set of either driver, as far as reading it goes; the
// caller closes it (the drivers' Close methods differ).
type Rows interface {
	Row
	Next() bool
	Err() error
}

// Collect scans every row of rows.
func Collect[T any](rows Rows, scan func(Row) (T, error)) ([]T, error) {
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// CollectPage scans the rows of a page query, which selects newest first
// one row more than the n asked for (PageSize) to know whether another page
// follows: it returns the first n and, if more followed, the cursor after
// the last of them. scan returns a row and its seq.
func CollectPage[T any](rows Rows, tag byte, n int, scan func(Row) (T, int64, error)) ([]T, string, error) {
	var seqs []int64
	items, err := Collect(rows, func(r Row) (T, error) {
		it, seq, err := scan(r)
		seqs = append(seqs, seq)
		return it, err
	})
	if err != nil || len(items) <= n {
		return items, "", err
	}
	return items[:n], Cursor(tag, seqs[n-1]), nil
}

// WithoutSeq is a page scan function (CollectPage) for Collect.
func WithoutSeq[T any](scan func(Row) (T, int64, error)) func(Row) (T, error) {
	return func(r Row) (T, error) {
		v, _, err := scan(r)
		return v, err
	}
}

// PageSize is the number of rows to return; the caller already clamps it.
func PageSize(first int) int {
	if first <= 0 {
		return btk.DefaultPageSize
	}
	return min(first, btk.MaxPageSize)
}

// UnixNano is the stored form of t: integer unix nanoseconds, which cover
// only the years 1678 to 2262; a time outside is refused rather than
// silently wrapped.
func UnixNano(t time.Time) (int64, error) {
	if t.IsZero() {
		return 0, errors.New("store: zero time") // a bug of the caller, not user input
	}
	if !btk.StoredTime(t) {
		return 0, btk.ErrTimeRange
	}
	return t.UnixNano(), nil
}

// StoreTimes puts the times among a statement's arguments in their stored
// form, in place: a time.Time as UnixNano, a *time.Time as that or NULL.
func StoreTimes(args []any) error {
	for i, a := range args {
		var t time.Time
		switch v := a.(type) {
		case time.Time:
			t = v
		case *time.Time:
			if v == nil {
				args[i] = nil
				continue
			}
			t = *v
		default:
			continue
		}
		n, err := UnixNano(t)
		if err != nil {
			return err
		}
		args[i] = n
	}
	return nil
}

// UsageRange is the stored form of a usage filter's [Since, Until), the
// hours both engines' usage queries read.
func UsageRange(f btk.UsageFilter) (since, until int64, err error) {
	if since, err = UnixNano(f.Since); err != nil {
		return 0, 0, err
	}
	until, err = UnixNano(f.Until)
	return since, until, err
}

// FromNano is the time of a stored value, in UTC.
func FromNano(n int64) time.Time { return time.Unix(0, n).UTC() }

// KeyLists are a key's scopes and allowed CIDRs as the JSON arrays their
// columns hold.
func KeyLists(k *btk.APIKey) (scopes, cidrs string, err error) {
	if scopes, err = jsonList(k.Scopes); err != nil {
		return "", "", err
	}
	cidrs, err = jsonList(k.AllowedCIDRs)
	return scopes, cidrs, err
}

func jsonList(l []string) (string, error) {
	if len(l) == 0 {
		return "[]", nil
	}
	b, err := json.Marshal(l)
	return string(b), err
}

// ClaimDue is the query (both engines) of the webhook deliveries a claim
// round may take (docs/webhooks.md#delivery): the pending ones due at now
// whose lease (if any) has run out, within the caps (btk.DeliveryCaps, in
// the query's order: perHook, perFailingHook, perWorkspace,
// failingPerWorkspace) counted with the deliveries already leased, in
// turns. A webhook is failing while its failing_since is set.
//
// The turns: within a webhook, oldest due first; within a workspace, each
// webhook's next delivery before any webhook's one after it, and among
// those the webhook whose latest attempt ended longest ago first, so a
// failing webhook's backlog never holds a healthy webhook's deliveries or
// another's due retry back; across workspaces, the one with the fewest in
// flight first. The failing webhooks' cap is applied before the
// workspace's, so that their candidates beyond it take no place under the
// workspace's cap.
//
// What it reads does not grow with a backlog (docs/webhooks.md#the-backlog-bound):
// the webhooks that have one (webhooks.pending > 0), for each of them its
// first hookLimit due deliveries through the index on (webhook_id,
// next_attempt_at) of the pending ones (the scan passes over the few it
// has leased), and the leased deliveries through the index of leases; the
// turns are then taken among those few rows. hookLimit is the smaller of
// the per-webhook cap and limit: a webhook's later deliveries could not be
// taken in this round. (Window functions over every due delivery cost a
// claim 75-95 ms with 12,000 pending, and SQLite's writer waited for it.)
// lateral takes each webhook's rows with LATERAL (PostgreSQL); SQLite has
// none and takes them with a correlated IN, the webhooks the outer loop.
//
// The arguments are the engine's placeholders (now is an int64 of unix
// nanoseconds); the caps in a CASE are cast, as PostgreSQL would type them
// text there.
func ClaimDue(now, perHook, perFailingHook, perWorkspace, failingPerWorkspace, hookLimit, limit string, lateral bool) string {
	first := func(cols string) string {
		return `SELECT ` + cols + ` FROM webhook_deliveries x
				WHERE x.webhook_id = w.id AND x.status = 'PENDING' AND x.next_attempt_at <= ` + now + `
					AND (x.lease_until IS NULL OR x.lease_until <= ` + now + `)
				ORDER BY x.next_attempt_at, x.seq LIMIT ` + hookLimit
	}
	candidates := `FROM webhooks w CROSS JOIN LATERAL (` + first("x.seq, x.next_attempt_at") + `) nd
				LEFT JOIN hook_leased h ON h.webhook_id = w.id
			WHERE w.pending > 0`
	if !lateral {
		candidates = `FROM webhooks w CROSS JOIN webhook_deliveries nd
				LEFT JOIN hook_leased h ON h.webhook_id = w.id
			WHERE w.pending > 0 AND nd.seq IN (` + first("x.seq") + `)`
	}
	return `WITH leased AS MATERIALIZED (
			SELECT d.webhook_id, d.workspace_id, CASE WHEN w.failing_since IS NULL THEN 0 ELSE 1 END AS failing
			FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
			WHERE d.lease_until > ` + now + ` AND d.status = 'PENDING'),
		hook_leased AS (SELECT webhook_id, count(*) AS n FROM leased GROUP BY webhook_id),
		ws_leased AS (SELECT workspace_id, count(*) AS n, sum(failing) AS failing_n FROM leased GROUP BY workspace_id),
		due AS (
			SELECT nd.seq, w.workspace_id, nd.next_attempt_at, w.last_attempt_at,
				CASE WHEN w.failing_since IS NULL THEN 0 ELSE 1 END AS failing,
				row_number() OVER (PARTITION BY w.id ORDER BY nd.next_attempt_at, nd.seq) + coalesce(h.n, 0) AS hook_n
			` + candidates + `),
		capped AS (
			SELECT u.seq, u.workspace_id, u.next_attempt_at, u.last_attempt_at, u.failing, u.hook_n,
				row_number() OVER (PARTITION BY u.workspace_id, u.failing
					ORDER BY u.hook_n, u.last_attempt_at, u.next_attempt_at, u.seq) AS class_n
			FROM due u
			WHERE u.hook_n <= CASE WHEN u.failing = 1 THEN CAST(` + perFailingHook + ` AS BIGINT) ELSE CAST(` + perHook + ` AS BIGINT) END),
		fair AS (
			SELECT c.seq, c.next_attempt_at,
				row_number() OVER (PARTITION BY c.workspace_id
					ORDER BY c.hook_n, c.last_attempt_at, c.next_attempt_at, c.seq) + coalesce(w.n, 0) AS ws_n
			FROM capped c LEFT JOIN ws_leased w ON w.workspace_id = c.workspace_id
			WHERE c.failing = 0 OR c.class_n + coalesce(w.failing_n, 0) <= ` + failingPerWorkspace + `)
		SELECT seq FROM fair WHERE ws_n <= ` + perWorkspace + ` ORDER BY ws_n, next_attempt_at, seq LIMIT ` + limit
}

// ClaimHookLimit is ClaimDue's hookLimit for a round of at most limit
// deliveries under caps: the most that one webhook could get.
func ClaimHookLimit(limit int, caps btk.DeliveryCaps) int {
	n := limit
	if caps.PerWebhook > 0 {
		n = min(n, caps.PerWebhook)
	}
	return max(n, 0)
}

// ScanKeyClient scans a row of key_id, at, ip, user_agent: the last client
// of a key, as both stores' KeyClients select it.
func ScanKeyClient(row Row) (btk.KeyClient, error) {
	var c btk.KeyClient
	var at int64
	err := row.Scan(&c.KeyID, &at, &c.IP, &c.UserAgent)
	c.At = FromNano(at)
	return c, err
}
