// Package sqlite is the SQLite implementation of btk.Store.
//
// One writer connection runs every write transaction as BEGIN IMMEDIATE, so
// writers queue in the pool instead of failing on a lock upgrade; a small pool
// of query_only readers serves reads concurrently thanks to WAL.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/sqlshared"
)

var _ btk.Store = (*DB)(nil)

//go:embed migrations/*.sql
var migrations embed.FS

// DB is a btk.Store on one SQLite database file, safe for concurrent use.
type DB struct {
	w, r *sql.DB
	// byHashR and byHashW are the prepared hot-path lookup, one per pool;
	// database/sql keeps one compiled statement per connection.
	byHashR, byHashW *sql.Stmt
	usage            *sql.Stmt
	// lock keeps other processes off the database (see lockFile).
	lock *os.File
}

// pragmas apply to every pooled connection (the driver runs them at connect).
// synchronous=FULL: a committed revocation survives power loss, not just a
// crash. mmap_size (1 GiB of address space, about two million keys) lets the
// readers share the OS page cache for the key table and the hash index instead
// of each copying pages into its own cache, so cold lookups stay cheap as the
// table grows; cache_size (per connection) covers what lies beyond the map.
var pragmas = []string{
	"busy_timeout(5000)",
	"journal_mode(WAL)",
	"synchronous(FULL)",
	"foreign_keys(ON)",
	"cache_size(-16384)",
	"mmap_size(1073741824)",
	"temp_store(MEMORY)",
}

// Open opens (creating if missing) the database file at path and applies any
// pending migration.
func Open(ctx context.Context, path string) (*DB, error) {
	return open(ctx, path, false)
}

// OpenBeside opens an existing database for a short maintenance write
// (btk account reset-password) also while a btk serve holds it: then
// without its lock and without migrating (the schema must be this binary's
// own). SQLite serialises the writers; what such a write changes (a
// password, sessions) is read from the database on every request, never
// from the server's caches. Without a server it is Open.
func OpenBeside(ctx context.Context, path string) (*DB, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	return open(ctx, path, true)
}

func open(ctx context.Context, path string, beside bool) (*DB, error) {
	// The file holds password hashes and the server secret: create it private.
	// SQLite gives the -wal and -shm files the same mode.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600) // #nosec G304 -- the database file the operator named (--db)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	_ = f.Close()
	lock, err := lockFile(path)
	held := err == nil
	if err != nil && !beside {
		return nil, err
	}
	closeLock := func() {
		if held {
			_ = lock.Close()
		}
	}
	w, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		closeLock()
		return nil, fmt.Errorf("store: open: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	db := &DB{w: w}
	if held {
		db.lock = lock
		err = migrate(ctx, w)
	} else {
		err = schemaCurrent(ctx, w)
	}
	if err != nil {
		_ = w.Close()
		closeLock()
		return nil, err
	}

	n := min(max(runtime.GOMAXPROCS(0), 4), 8)
	r, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		_ = w.Close()
		closeLock()
		return nil, fmt.Errorf("store: open: %w", err)
	}
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n) // keep connections, and their prepared statements, warm
	r.SetConnMaxLifetime(0)
	r.SetConnMaxIdleTime(0)
	db.r = r

	if db.byHashR, err = r.PrepareContext(ctx, selectKey+` WHERE hash = ?`); err == nil {
		if db.byHashW, err = w.PrepareContext(ctx, selectKey+` WHERE hash = ?`); err == nil {
			db.usage, err = w.PrepareContext(ctx, updateUsage)
		}
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: prepare: %w", err)
	}
	return db, nil
}

func dsn(path string, readOnly bool) string {
	q := url.Values{}
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	if readOnly {
		q.Add("_pragma", "query_only(ON)")
	} else {
		q.Set("_txlock", "immediate")
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// migrate applies the embedded migrations not yet recorded in
// schema_migrations, each in its own transaction.
func migrate(ctx context.Context, w *sql.DB) error {
	if _, err := w.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	sort.Strings(names)
	latest := 0
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		num, _, _ := strings.Cut(base, "_")
		version, err := strconv.Atoi(num)
		if err != nil || version <= latest {
			return fmt.Errorf("store: migrate: bad migration name %q", base)
		}
		latest = version
		script, err := migrations.ReadFile(name)
		if err != nil {
			return fmt.Errorf("store: migrate: %w", err)
		}
		err = inTx(ctx, w, func(tx *sql.Tx) error {
			var applied int
			// Checked inside the (immediate) transaction, so two processes
			// opening the same new file cannot both apply a migration.
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, version).Scan(&applied); err != nil || applied > 0 {
				return err
			}
			if _, err := tx.ExecContext(ctx, string(script)); err != nil {
				return err
			}
			if version == 7 { // the audit chain of the rows already there
				if err := chainExisting(ctx, tx); err != nil {
					return err
				}
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				version, base, time.Now().UnixNano())
			return err
		})
		if err != nil {
			return fmt.Errorf("store: migrate %s: %w", base, err)
		}
	}
	var newest sql.NullInt64
	if err := w.QueryRowContext(ctx, `SELECT max(version) FROM schema_migrations`).Scan(&newest); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	if int(newest.Int64) > latest {
		return fmt.Errorf("store: database schema version %d is newer than this binary (%d)", newest.Int64, latest)
	}
	return nil
}

// schemaCurrent checks that the database's schema is the newest this binary
// knows, for a process that must not migrate (OpenBeside).
func schemaCurrent(ctx context.Context, w *sql.DB) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil || len(names) == 0 {
		return fmt.Errorf("store: no migrations: %v", err)
	}
	sort.Strings(names)
	latest, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(names[len(names)-1], "migrations/"), "_", 2)[0])
	var newest sql.NullInt64
	if err := w.QueryRowContext(ctx, `SELECT max(version) FROM schema_migrations`).Scan(&newest); err != nil {
		return fmt.Errorf("store: schema version: %w", err)
	}
	if int(newest.Int64) != latest {
		return fmt.Errorf("store: the database's schema is version %d, this binary's %d: run the btk version the server runs", newest.Int64, latest)
	}
	return nil
}

// inTx runs fn in a transaction of db and commits when fn returns nil. The
// deferred Rollback also releases the connection if fn panics, which matters
// for the single writer connection.
func inTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// Read runs fn in a read transaction on a reader connection: a consistent
// snapshot that never waits for the writer. Writes through it fail.
func (db *DB) Read(ctx context.Context, fn func(btk.Tx) error) error {
	return db.run(ctx, db.r, db.byHashR, fn)
}

// Write runs fn in a BEGIN IMMEDIATE transaction on the writer connection.
func (db *DB) Write(ctx context.Context, fn func(btk.Tx) error) error {
	return db.run(ctx, db.w, db.byHashW, fn)
}

func (db *DB) run(ctx context.Context, pool *sql.DB, byHash *sql.Stmt, fn func(btk.Tx) error) error {
	var fnErr error
	err := inTx(ctx, pool, func(t *sql.Tx) error {
		fnErr = fn(&tx{tx: t, byHash: byHash})
		return fnErr
	})
	switch {
	case err == nil:
		return nil
	case fnErr != nil:
		return fnErr // the caller's own error, unwrapped
	}
	return mapErr("transaction", err)
}

// updateUsage moves last_used_at forward only: batches may be flushed out of
// order, and a key must never look less recently used than it was. The day
// state (a theoretical arrival time) only moves forward too: instances
// sharing a database flush their views of one key in any order, and the
// latest is the largest.
const updateUsage = `UPDATE api_keys SET
	last_used_at = CASE WHEN last_used_at IS NULL OR last_used_at < ?1 THEN ?1 ELSE last_used_at END,
	day_state = MAX(day_state, ?2)
	WHERE id = ?3`

// usageBatchRows is how many keys one batched usage UPDATE carries (three
// parameters each, well under SQLite's limit of 32,766).
const usageBatchRows = 500

// updateUsageBatch is updateUsage for many keys in one statement: the
// per-statement cost of the driver is paid once per batch, not per key.
func updateUsageBatch(rows int) string {
	var b strings.Builder
	b.WriteString(`UPDATE api_keys SET
	last_used_at = CASE WHEN api_keys.last_used_at IS NULL OR api_keys.last_used_at < v.column2 THEN v.column2 ELSE api_keys.last_used_at END,
	day_state = MAX(api_keys.day_state, v.column3)
	FROM (VALUES `)
	for i := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?)")
	}
	b.WriteString(`) AS v WHERE api_keys.id = v.column1`)
	return b.String()
}

// RecordUsage writes a batch of usage in one transaction (one fsync), in
// statements of up to usageBatchRows keys; a batch of one uses the prepared
// single-key statement. The counts of a flush are added only when its id is
// new. A failed commit is reported as btk.ErrCommitUnknown: after an I/O
// error SQLite cannot say whether the commit reached the file.
func (db *DB) RecordUsage(ctx context.Context, usage []btk.KeyUsage, flushes []btk.UsageFlush, clients []btk.KeyClient) error {
	if len(usage) == 0 && len(flushes) == 0 && len(clients) == 0 {
		return nil
	}
	t, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return mapErr("record usage", err)
	}
	defer t.Rollback() // after a commit it does nothing
	if err := db.recordUsage(ctx, t, usage, flushes, clients); err != nil {
		return mapErr("record usage", err)
	}
	if err := t.Commit(); err != nil {
		return fmt.Errorf("%w (%w)", mapErr("record usage", err), btk.ErrCommitUnknown)
	}
	return nil
}

// recordUsage is RecordUsage's transaction.
func (db *DB) recordUsage(ctx context.Context, t *sql.Tx, usage []btk.KeyUsage, flushes []btk.UsageFlush, clients []btk.KeyClient) error {
	counts, err := newFlushCounts(ctx, t, flushes)
	if err != nil {
		return err
	}
	if err := addUsage(ctx, t, counts, clients); err != nil {
		return err
	}
	if len(usage) == 0 {
		return nil
	}
	if len(usage) == 1 {
		u := usage[0]
		at, err := sqlshared.UnixNano(u.LastUsedAt)
		if err != nil {
			return err
		}
		_, err = t.StmtContext(ctx, db.usage).ExecContext(ctx, at, u.DayState, u.KeyID)
		return err
	}
	return execChunks(ctx, t, usage, usageBatchRows, updateUsageBatch, func(args []any, u btk.KeyUsage) ([]any, error) {
		at, err := sqlshared.UnixNano(u.LastUsedAt)
		return append(args, u.KeyID, at, u.DayState), err
	})
}

// Ping runs a query on a reader connection.
func (db *DB) Ping(ctx context.Context) error {
	var one int
	if err := db.r.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return fmt.Errorf("store: ping: %w", err)
	}
	return nil
}

// Close closes both pools. The writer goes last: closing the last connection
// checkpoints the WAL into the database file.
func (db *DB) Close() error {
	var errs []error
	for _, s := range []*sql.Stmt{db.byHashR, db.byHashW, db.usage} {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	if db.r != nil {
		errs = append(errs, db.r.Close())
	}
	errs = append(errs, db.w.Close())
	if db.lock != nil {
		errs = append(errs, db.lock.Close())
		db.lock = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("store: close: %w", err)
	}
	return nil
}

// tx implements btk.Tx on one database/sql transaction.
type tx struct {
	tx     *sql.Tx
	byHash *sql.Stmt
}

// uniqueErrs maps the columns SQLite names in a UNIQUE constraint failure to
// the domain error. Any other constraint failure is a bug, not user input.
var uniqueErrs = map[string]error{
	"api_keys.workspace_id, api_keys.name": btk.ErrNameTaken,
	"accounts.email":                       btk.ErrEmailTaken,
	"workspaces.prefix":                    btk.ErrPrefixTaken,
}

// busyCodes are the primary result codes of a database that is busy (a
// lock held elsewhere) or cannot write for now (a full disk, which frees
// up) rather than broken: UNAVAILABLE, which clients retry.
var busyCodes = map[int]bool{sqlite3.SQLITE_BUSY: true, sqlite3.SQLITE_LOCKED: true, sqlite3.SQLITE_INTERRUPT: true, sqlite3.SQLITE_FULL: true}

// mapErr is the one place database errors become domain errors: no row is
// ErrNotFound, a known UNIQUE violation its domain error, anything else is
// wrapped with the operation (and stays internal: it is not a *btk.Error).
func mapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return btk.ErrNotFound
	}
	var be *btk.Error
	if errors.As(err, &be) {
		return err
	}
	var se *sqlite.Error
	if errors.As(err, &se) && busyCodes[se.Code()&0xff] {
		// Another writer held the database past busy_timeout, or the wait
		// was interrupted (the request's deadline): retry, not a bug.
		return fmt.Errorf("store: %s: %w: %w", op, btk.ErrUnavailable, err)
	}
	if errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
		// The message ends "...constraint failed: t.c1, t.c2 (2067)".
		msg := se.Error()
		if i := strings.LastIndex(msg, "constraint failed: "); i >= 0 {
			cols, _, _ := strings.Cut(msg[i+len("constraint failed: "):], " (")
			if e, ok := uniqueErrs[cols]; ok {
				return e
			}
		}
	}
	return fmt.Errorf("store: %s: %w", op, err)
}

// exec runs a write statement and returns how many rows it changed; with
// mustChange, changing none means the row does not exist (ErrNotFound).
// Times among args are stored as StoreTimes says.
func (t *tx) exec(ctx context.Context, op string, mustChange bool, query string, args ...any) (int64, error) {
	if err := sqlshared.StoreTimes(args); err != nil {
		return 0, err
	}
	res, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, mapErr(op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, mapErr(op, err)
	}
	if mustChange && n == 0 {
		return 0, btk.ErrNotFound
	}
	return n, nil
}

// all scans every row query selects.
func all[T any](ctx context.Context, t *tx, op string, scan func(sqlshared.Row) (T, error), query string, args ...any) ([]T, error) {
	rows, err := t.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, mapErr(op, err)
	}
	defer rows.Close()
	out, err := sqlshared.Collect(rows, scan)
	return out, mapErr(op, err)
}

// list pages newest first through the rows query selects (its WHERE clause
// last, its first column the seq).
func list[T any](ctx context.Context, t *tx, op string, tag byte, p btk.Page, query string, args []any,
	scan func(sqlshared.Row) (T, int64, error)) ([]T, string, error) {
	after, err := sqlshared.AfterSeq(tag, p.After)
	if err != nil {
		return nil, "", err
	}
	n := sqlshared.PageSize(p.First)
	rows, err := t.tx.QueryContext(ctx, query+` AND seq < ? ORDER BY seq DESC LIMIT ?`, append(args, after, n+1)...)
	if err != nil {
		return nil, "", mapErr(op, err)
	}
	defer rows.Close()
	items, cursor, err := sqlshared.CollectPage(rows, tag, n, scan)
	return items, cursor, mapErr(op, err)
}

func fromOptNano(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := sqlshared.FromNano(n.Int64)
	return &t
}

// optStr stores "" as NULL (optional ids).
func optStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func optInt(p *int) any {
	if p == nil {
		return nil
	}
	return int64(*p)
}

func fromOptInt(n sql.NullInt64) *int {
	if !n.Valid {
		return nil
	}
	i := int(n.Int64)
	return &i
}
