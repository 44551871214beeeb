package postgres

import (
	"context"
	"encoding/base64"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/btk-project/btk/internal/btk"
)

// tx implements btk.Tx on one pgx transaction.
type tx struct {
	tx    pgx.Tx
	db    *DB
	write bool
}

// forUpdate is appended to a lookup by id: in a write transaction the row
// stays locked until commit, so a rule that reads it and then writes sees no
// concurrent change in between.
func (t *tx) forUpdate() string {
	if t.write {
		return ` FOR UPDATE`
	}
	return ""
}

// lockSettings serialises, across instances, the write transactions that
// check for the absence of rows before creating them (bootstrap, the
// generated server secret): there is no row to lock yet.
func (t *tx) lockSettings(ctx context.Context) error {
	if !t.write {
		return nil
	}
	_, err := t.tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, t.db.lockKey("settings"))
	return mapErr("lock", err)
}

// exec runs a write statement and returns how many rows it changed; with
// mustChange, changing none means the row does not exist (ErrNotFound).
func (t *tx) exec(ctx context.Context, op string, mustChange bool, query string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, query, args...)
	if err != nil {
		return 0, mapErr(op, err)
	}
	n := tag.RowsAffected()
	if mustChange && n == 0 {
		return 0, btk.ErrNotFound
	}
	return n, nil
}

// Cursors are base64url of a table tag and the seq of the last row handed
// out (the same form as the SQLite store's); the tag keeps a key cursor from
// being replayed on an audit list.
func cursor(tag byte, seq int64) string {
	return base64.RawURLEncoding.EncodeToString(strconv.AppendInt([]byte{tag}, seq, 10))
}

// afterSeq decodes a cursor of tag into the seq rows must be below.
func afterSeq(tag byte, c string) (int64, error) {
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

// args numbers the parameters of a query built piece by piece.
type args []any

func (a *args) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// list pages newest first through the rows query selects (its WHERE clause
// last, its first column the seq): it fetches one row more than asked to
// know whether another page follows.
func list[T any](ctx context.Context, t *tx, op string, tag byte, p btk.Page, query string, a args,
	scan func(pgx.Row) (T, int64, error)) ([]T, string, error) {
	after, err := afterSeq(tag, p.After)
	if err != nil {
		return nil, "", err
	}
	n := pageSize(p.First)
	query += ` AND seq < ` + a.add(after) + ` ORDER BY seq DESC LIMIT ` + a.add(n+1)
	rows, err := t.tx.Query(ctx, query, a...)
	if err != nil {
		return nil, "", mapErr(op, err)
	}
	defer rows.Close()
	var (
		items []T
		seqs  []int64
	)
	for rows.Next() {
		it, seq, err := scan(rows)
		if err != nil {
			return nil, "", mapErr(op, err)
		}
		items, seqs = append(items, it), append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, "", mapErr(op, err)
	}
	if len(items) <= n {
		return items, "", nil
	}
	return items[:n], cursor(tag, seqs[n-1]), nil
}

// pageSize is the number of rows to return; the caller already clamps it.
func pageSize(first int) int {
	if first <= 0 {
		return btk.DefaultPageSize
	}
	return min(first, btk.MaxPageSize)
}

// Times are stored as BIGINT unix nanoseconds, which only covers the years
// 1678 to 2262; a time outside is refused rather than silently wrapped.
var (
	minTime = time.Unix(0, -1<<63)
	maxTime = time.Unix(0, 1<<63-1)
)

var errTimeRange = &btk.Error{Code: btk.CodeBadUserInput, Message: "time must be between the years 1678 and 2262"}

func unixNano(t time.Time) (int64, error) {
	if t.IsZero() {
		return 0, errors.New("store: zero time") // a bug of the caller, not user input
	}
	if t.Before(minTime) || t.After(maxTime) {
		return 0, errTimeRange
	}
	return t.UnixNano(), nil
}

// optTime is the column value of an optional time.
func optTime(t *time.Time) (*int64, error) {
	if t == nil {
		return nil, nil
	}
	n, err := unixNano(*t)
	return &n, err
}

func fromNano(n int64) time.Time { return time.Unix(0, n).UTC() }

func fromOptNano(n *int64) *time.Time {
	if n == nil {
		return nil
	}
	t := fromNano(*n)
	return &t
}

// optStr stores "" as NULL (optional ids).
func optStr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func optInt(p *int) *int64 {
	if p == nil {
		return nil
	}
	n := int64(*p)
	return &n
}

func fromOptInt(n *int64) *int {
	if n == nil {
		return nil
	}
	i := int(*n)
	return &i
}
