package postgres

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/sqlshared"
)

// TxTimeout bounds each transaction (Read, Write, RecordUsage), the wait for
// a pooled connection included, unless the caller's deadline is earlier: a
// PostgreSQL that stops answering on a connection already open (a black-hole
// network) otherwise holds the request until the client gives up, and every
// request after it queues for the pool (docs/clusters.md#postgresql). Long
// enough for the largest legitimate read (a year of a workspace's usage,
// about 2 s; docs/usage.md).
const TxTimeout = 10 * time.Second

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
// Times among args are stored as StoreTimes says.
func (t *tx) exec(ctx context.Context, op string, mustChange bool, query string, args ...any) (int64, error) {
	if err := sqlshared.StoreTimes(args); err != nil {
		return 0, err
	}
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

// args numbers the parameters of a query built piece by piece.
type args []any

func (a *args) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// all scans every row query selects.
func all[T any](ctx context.Context, t *tx, op string, scan func(sqlshared.Row) (T, error), query string, args ...any) ([]T, error) {
	rows, err := t.tx.Query(ctx, query, args...)
	if err != nil {
		return nil, mapErr(op, err)
	}
	defer rows.Close()
	out, err := sqlshared.Collect(rows, scan)
	return out, mapErr(op, err)
}

// list pages newest first through the rows query selects (its WHERE clause
// last, its first column the seq).
func list[T any](ctx context.Context, t *tx, op string, tag byte, p btk.Page, query string, a args,
	scan func(sqlshared.Row) (T, int64, error)) ([]T, string, error) {
	after, err := sqlshared.AfterSeq(tag, p.After)
	if err != nil {
		return nil, "", err
	}
	n := sqlshared.PageSize(p.First)
	query += ` AND seq < ` + a.add(after) + ` ORDER BY seq DESC LIMIT ` + a.add(n+1)
	rows, err := t.tx.Query(ctx, query, a...)
	if err != nil {
		return nil, "", mapErr(op, err)
	}
	defer rows.Close()
	items, cursor, err := sqlshared.CollectPage(rows, tag, n, scan)
	return items, cursor, mapErr(op, err)
}

func fromOptNano(n *int64) *time.Time {
	if n == nil {
		return nil
	}
	t := sqlshared.FromNano(*n)
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
