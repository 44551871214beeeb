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
// whose lease (if any) has run out, oldest first, but none of a webhook
// that would then have more than perHook leased, nor of a workspace that
// would have more than perWorkspace. The arguments are the engine's
// placeholders (now is an int64 of unix nanoseconds).
func ClaimDue(now, perHook, perWorkspace, limit string) string {
	return `WITH leased AS (
			SELECT webhook_id, workspace_id FROM webhook_deliveries
			WHERE status = 'PENDING' AND lease_until > ` + now + `),
		hook_leased AS (SELECT webhook_id, count(*) AS n FROM leased GROUP BY webhook_id),
		ws_leased AS (SELECT workspace_id, count(*) AS n FROM leased GROUP BY workspace_id),
		due AS (
			SELECT d.seq, d.workspace_id, d.next_attempt_at,
				row_number() OVER (PARTITION BY d.webhook_id ORDER BY d.next_attempt_at, d.seq) + coalesce(h.n, 0) AS hook_n
			FROM webhook_deliveries d LEFT JOIN hook_leased h ON h.webhook_id = d.webhook_id
			WHERE d.status = 'PENDING' AND d.next_attempt_at <= ` + now + `
				AND (d.lease_until IS NULL OR d.lease_until <= ` + now + `)),
		fair AS (
			SELECT u.seq, u.next_attempt_at,
				row_number() OVER (PARTITION BY u.workspace_id ORDER BY u.next_attempt_at, u.seq) + coalesce(w.n, 0) AS ws_n
			FROM due u LEFT JOIN ws_leased w ON w.workspace_id = u.workspace_id
			WHERE u.hook_n <= ` + perHook + `)
		SELECT seq FROM fair WHERE ws_n <= ` + perWorkspace + ` ORDER BY next_attempt_at, seq LIMIT ` + limit
}
