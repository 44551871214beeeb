// Package postgres is the PostgreSQL implementation of btk.Store (pgx,
// pgxpool).
//
// Concurrency: write transactions run at READ COMMITTED and take row locks
// where a rule reads and then writes, so that every rule holds as it does on
// SQLite's single writer:
//   - a row read by id in a write transaction (key, workspace, account,
//     session) is read FOR UPDATE: two rotations or revocations of one key
//     queue, and the second sees the first's revocation;
//   - unique active key names rest on the partial unique index alone (a
//     second insert waits for the first transaction, then fails);
//   - revoke-all revokes, then locks the workspace row (which every key insert
//     holds a share lock on through its foreign key) and revokes again, so a
//     key created or rotated concurrently is either revoked too or created
//     after revoke-all has committed;
//   - Empty and Setting in a write transaction take a transaction advisory
//     lock first, so instances started together bootstrap once and agree on
//     one generated server secret.
//
// Read transactions are READ ONLY at REPEATABLE READ: one consistent snapshot.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"net"
	neturl "net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/sqlshared"
)

var _ btk.Store = (*DB)(nil)

//go:embed migrations/*.sql
var migrations embed.FS

// Options tune Open.
type Options struct {
	// Shared is true when the instances share their state through Redis: any
	// number of them may use the database. Otherwise Open refuses a database
	// another btk process holds, as the SQLite file lock does.
	Shared bool
	// MaxConns bounds the pool; 0 means pgxpool's default (max(4, CPUs)).
	MaxConns int32
	// Maintenance opens the database for a short command that caches
	// nothing (btk account reset-password): it takes no instance lock, so
	// it runs beside any instances, lone or sharing state.
	Maintenance bool
}

// DB is a btk.Store on one PostgreSQL database (the schema of the URL's
// search_path), safe for concurrent use.
type DB struct {
	pool   *pgxpool.Pool
	schema string
	shared bool
	// instance holds the session advisory lock that says a btk process uses
	// this schema, for the life of the DB; Ping takes it again if the
	// connection was lost (a PostgreSQL restart).
	instanceMu sync.Mutex
	instance   *pgx.Conn
	closed     bool
	connConfig *pgx.ConnConfig
	// held says the instance lock is in place; taken counts the times it
	// was taken. A lone instance that lost it (its session ended) may have
	// been replaced by another meanwhile: it refuses changes while it is
	// lost, and the service drops what it cached when taken moves
	// (InstanceHold; docs/clusters.md#postgresql).
	held      atomic.Bool
	taken     atomic.Uint64
	locking   bool // holds an instance lock (not Maintenance); set by Open
	stopWatch chan struct{}
	watched   sync.WaitGroup
}

// lockCheckInterval is how often the instance lock's connection is checked
// alive: a lost lock is noticed within it, and taken back as soon as it is
// free again.
const lockCheckInterval = 100 * time.Millisecond

// IsURL reports whether db names a PostgreSQL database rather than a file.
func IsURL(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// CheckURL says whether raw parses as the URL Open takes (connect_timeout a
// number, sslmode known, the sslcert and sslkey files readable), and if not
// why, in words that never quote it: pgx's error quotes the URL with only
// its password hidden (an sslpassword shows), and a URL that does not
// parse has no part that can safely be called the password.
func CheckURL(raw string) error {
	if _, err := neturl.Parse(raw); err != nil {
		return errors.New("the PostgreSQL URL is not a valid URL (percent-encode any / ? # @ : or % in the password)")
	}
	_, err := pgxpool.ParseConfig(raw)
	if err == nil {
		return nil
	}
	if pce, ok := errors.AsType[*pgconn.ParseConfigError](err); ok {
		c := *pce
		c.ConnString = "" // its reason alone: "invalid connect_timeout (strconv...)"
		return fmt.Errorf("the PostgreSQL URL is not valid: %s", strings.TrimPrefix(c.Error(), "cannot parse ``: "))
	}
	// pgxpool's own settings (pool_max_conns=x): its errors name the setting.
	return fmt.Errorf("the PostgreSQL URL is not valid: %w", err)
}

// Open connects to the database at url (postgres://…), takes the instance
// lock and applies any pending migration under a migration lock, so instances
// started together migrate once.
func Open(ctx context.Context, url string, opts Options) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store: %w", CheckURL(url))
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	// A dead server must not hang requests: connecting gives up after a few
	// seconds, and a broken pooled connection is dropped and redialled.
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > 5*time.Second {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	cfg.HealthCheckPeriod = 10 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, mapErr("open", err)
	}
	db := &DB{pool: pool, shared: opts.Shared, connConfig: cfg.ConnConfig}
	var schema *string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		pool.Close()
		return nil, mapErr("open", err)
	}
	if schema == nil {
		pool.Close()
		return nil, errors.New("store: no schema of the search_path exists")
	}
	db.schema = *schema

	if !opts.Maintenance {
		if err := db.lockInstance(ctx); err != nil {
			pool.Close()
			return nil, err
		}
		db.locking, db.stopWatch = true, make(chan struct{})
		db.watched.Add(1)
		go db.watchInstanceLock(db.stopWatch) // #nosec G118 -- the watch lives as long as the DB (until Close), not as Open's context
	}
	if err := db.migrate(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// lockKey is the advisory lock key of purpose in this schema: advisory locks
// are database-wide, and each schema is its own btk database.
func (db *DB) lockKey(purpose string) int64 {
	h := fnv.New64a()
	_, _ = io.WriteString(h, "btk\x00"+db.schema+"\x00"+purpose)
	return int64(h.Sum64()) // #nosec G115 -- the hash's bits as an advisory-lock key: wrapping is intended
}

// ErrInUse is returned by Open when another btk process holds the database
// in a way this one cannot share.
var ErrInUse = errors.New("store: the PostgreSQL database is in use by another btk serve; several instances need shared state: give every instance --redis (BTK_REDIS)")

// lockInstance takes the instance lock on a connection of its own, outside
// the pool, held until Close: exclusively for a lone instance (each caches
// keys and counts rate limits in memory, so a second one would keep accepting
// what the first revoked), shared by instances that keep that state in Redis.
func (db *DB) lockInstance(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, db.connConfig.Copy())
	if err != nil {
		return mapErr("lock", err)
	}
	fn := "pg_try_advisory_lock"
	if db.shared {
		fn = "pg_try_advisory_lock_shared"
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT `+fn+`($1)`, db.lockKey("instance")).Scan(&ok); err != nil {
		_ = conn.Close(context.Background())
		return mapErr("lock", err)
	}
	if !ok {
		_ = conn.Close(context.Background())
		if db.shared {
			return errors.New("store: the PostgreSQL database is in use by a btk serve started without --redis; stop it, or give it --redis too")
		}
		return ErrInUse
	}
	db.instance = conn
	db.taken.Add(1)
	db.held.Store(true)
	return nil
}

// watchInstanceLock checks the instance lock every lockCheckInterval until
// Close, so that a lost lock stops a lone instance's key checks and changes
// without waiting for /readyz to be asked.
func (db *DB) watchInstanceLock(stop <-chan struct{}) {
	defer db.watched.Done()
	t := time.NewTicker(lockCheckInterval)
	defer t.Stop()
	var retry time.Time // after a failed taking: not before then
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			if now.Before(retry) {
				continue
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if db.checkInstanceLock(ctx) != nil {
			// Each taking dials a connection (a backend forked): while
			// another instance holds the lock or PostgreSQL is down, once
			// a second is enough.
			retry = time.Now().Add(lockRetakeInterval)
		}
		cancel()
	}
}

// lockRetakeInterval spaces the attempts to take a lost lock back.
const lockRetakeInterval = time.Second

// checkInstanceLock finds the instance lock's connection alive, or closes
// it (the lock went with its session) and takes the lock again; it fails
// while another instance holds the lock or PostgreSQL cannot be reached.
func (db *DB) checkInstanceLock(ctx context.Context) error {
	db.instanceMu.Lock()
	defer db.instanceMu.Unlock()
	if db.closed {
		return errors.New("store: closed")
	}
	if db.instance != nil {
		if !db.instance.IsClosed() && db.instance.Ping(ctx) == nil {
			return nil
		}
		db.held.Store(false)
		_ = db.instance.Close(context.Background()) // found dead: replaced below
		db.instance = nil
	}
	return db.lockInstance(ctx)
}

// InstanceHold reports whether this lone instance holds its exclusive lock
// on the database, and how many times it took it (btk.InstanceHold).
// Instances that share their state in Redis are told of every change there:
// for them the lock only keeps a lone instance out, and their hold is
// always reported held.
func (db *DB) InstanceHold() (taken uint64, held bool) {
	if db.shared || !db.locking {
		return 1, true
	}
	return db.taken.Load(), db.held.Load()
}

// errLockLost refuses the changes of a lone instance that lost its lock.
var errLockLost = fmt.Errorf("store: %w: this instance lost its lock on the PostgreSQL database (its session ended) and has not taken it back", btk.ErrUnavailable)

// migrate applies the embedded migrations not yet recorded in
// schema_migrations, each in its own transaction, under a session advisory
// lock: instances started together wait for the first one's migrations and
// then find nothing left to apply.
func (db *DB) migrate(ctx context.Context) error {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return mapErr("migrate", err)
	}
	defer conn.Release()
	key := db.lockKey("migrate")
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		return mapErr("migrate", err)
	}
	defer conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, key)

	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at BIGINT NOT NULL
	)`); err != nil {
		return mapErr("migrate", err)
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
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var applied bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, version).Scan(&applied); err != nil || applied {
				return err
			}
			if _, err := tx.Exec(ctx, string(script)); err != nil {
				return err
			}
			if version == 7 { // the audit chain of the rows already there
				if err := chainExisting(ctx, tx); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
				version, base, time.Now().UnixNano())
			return err
		})
		if err != nil {
			return mapErr("migrate "+base, err)
		}
	}
	var newest *int
	if err := conn.QueryRow(ctx, `SELECT max(version) FROM schema_migrations`).Scan(&newest); err != nil {
		return mapErr("migrate", err)
	}
	if newest != nil && *newest > latest {
		return fmt.Errorf("store: database schema version %d is newer than this binary (%d)", *newest, latest)
	}
	return nil
}

// Read runs fn in a READ ONLY, REPEATABLE READ transaction: one snapshot.
func (db *DB) Read(ctx context.Context, fn func(btk.Tx) error) error {
	return db.run(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, false, fn)
}

// Write runs fn in a READ COMMITTED transaction; see the package comment for
// the locks that keep the rules.
func (db *DB) Write(ctx context.Context, fn func(btk.Tx) error) error {
	if _, held := db.InstanceHold(); !held {
		// Another lone instance may hold the database now: a change made
		// here would never reach what it cached.
		return errLockLost
	}
	return db.run(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, true, fn)
}

func (db *DB) run(ctx context.Context, opts pgx.TxOptions, write bool, fn func(btk.Tx) error) error {
	ctx, cancel := context.WithTimeout(ctx, TxTimeout)
	defer cancel()
	var fnErr error
	err := pgx.BeginTxFunc(ctx, db.pool, opts, func(t pgx.Tx) error {
		fnErr = fn(&tx{tx: t, db: db, write: write})
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

// RecordUsage writes a batch of usage in one transaction. last_used_at and
// the day state (a theoretical arrival time) only move forward: batches may
// be flushed out of order, and by several instances. The hourly counts are
// added to what is stored (each instance adds what it counted) for each
// flush whose id is new, by key and hour, so concurrent flushes take row
// locks in the same order and cannot deadlock on them. A commit whose
// answer was lost is reported as btk.ErrCommitUnknown.
func (db *DB) RecordUsage(ctx context.Context, usage []btk.KeyUsage, flushes []btk.UsageFlush, clients []btk.KeyClient) error {
	if len(usage) == 0 && len(flushes) == 0 && len(clients) == 0 {
		return nil
	}
	ids := make([]string, len(usage))
	ats := make([]int64, len(usage))
	days := make([]int64, len(usage))
	for i, u := range usage {
		at, err := sqlshared.UnixNano(u.LastUsedAt)
		if err != nil {
			return err
		}
		ids[i], ats[i], days[i] = u.KeyID, at, u.DayState
	}
	ctx, cancel := context.WithTimeout(ctx, TxTimeout)
	defer cancel()
	t, err := db.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return mapErr("record usage", err)
	}
	if err := recordUsage(ctx, t, ids, ats, days, flushes, clients); err != nil {
		_ = t.Rollback(ctx) // the error returned is the statement's
		return mapErr("record usage", err)
	}
	if err := t.Commit(ctx); err != nil {
		var answered *pgconn.PgError
		if errors.As(err, &answered) { // the server refused the commit: nothing was written
			return mapErr("record usage", err)
		}
		return fmt.Errorf("%w (%w)", mapErr("record usage", err), btk.ErrCommitUnknown)
	}
	return nil
}

// recordUsage is RecordUsage's transaction: the new flushes' counts, the
// clients, then last_used_at and the day state.
func recordUsage(ctx context.Context, t pgx.Tx, ids []string, ats, days []int64, flushes []btk.UsageFlush, clients []btk.KeyClient) error {
	counts, err := newFlushCounts(ctx, t, flushes)
	if err != nil {
		return err
	}
	if err := addUsage(ctx, t, counts, clients); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	// The rows are locked first, in id order (the locking CTE is
	// materialised, and LockRows sits above the sort): instances flushing
	// overlapping batches at once wait for each other instead of taking the
	// rows in the join's order and deadlocking (docs/security.md#what-a-client-can-make-the-server-hold).
	_, err = t.Exec(ctx, `WITH locked AS MATERIALIZED (
			SELECT id FROM api_keys WHERE id = ANY($1::text[]) ORDER BY id FOR NO KEY UPDATE
		)
		UPDATE api_keys k SET
		last_used_at = CASE WHEN k.last_used_at IS NULL OR k.last_used_at < u.at THEN u.at ELSE k.last_used_at END,
		day_state = GREATEST(k.day_state, u.day)
		FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS u(id, at, day), locked l
		WHERE k.id = u.id AND l.id = u.id`, ids, ats, days)
	return err
}

// Ping runs a query on a pooled connection. It also checks the instance
// lock: when its connection was lost, the lock went with it, and Ping takes
// it again or fails (another instance took it meanwhile), so that /readyz
// takes this instance out of a load balancer.
func (db *DB) Ping(ctx context.Context) error {
	var one int
	if err := db.pool.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
		return mapErr("ping", err)
	}
	if !db.locking {
		return nil
	}
	return db.checkInstanceLock(ctx)
}

// Close closes the pool and releases the instance lock.
func (db *DB) Close() error {
	db.instanceMu.Lock()
	stop := db.stopWatch
	db.stopWatch = nil
	db.instanceMu.Unlock()
	if stop != nil {
		close(stop)
		db.watched.Wait()
	}
	db.pool.Close()
	db.instanceMu.Lock()
	defer db.instanceMu.Unlock()
	db.closed = true
	if db.instance != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// Released before the connection closes: a backend ends after its
		// client has gone, so without this an instance restarted at once
		// could find its own lock still held.
		_, _ = db.instance.Exec(ctx, `SELECT pg_advisory_unlock_all()`) // the backend's end releases it too, a moment later
		err := db.instance.Close(ctx)
		db.instance = nil
		if err != nil {
			return fmt.Errorf("store: close: %w", err)
		}
	}
	return nil
}

// uniqueErrs maps the unique constraints and indexes whose violation is the
// caller's doing to the domain error. Any other violation is a bug.
var uniqueErrs = map[string]error{
	"api_keys_active_name": btk.ErrNameTaken,
	"accounts_email":       btk.ErrEmailTaken,
	"workspaces_prefix":    btk.ErrPrefixTaken,
}

// mapErr is the one place database errors become domain errors: no row is
// ErrNotFound, a known unique violation its domain error, text PostgreSQL
// cannot hold btk.ErrBadText (BAD_USER_INPUT), a server that cannot be
// reached wraps btk.ErrUnavailable (UNAVAILABLE to the caller), anything
// else is wrapped with the operation (and stays internal).
func mapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return btk.ErrNotFound
	}
	var be *btk.Error
	if errors.As(err, &be) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		if e, ok := uniqueErrs[pe.ConstraintName]; ok {
			return e
		}
	}
	if errors.As(err, &pe) && (pe.Code == "22021" || pe.Code == "22P05") {
		// Text PostgreSQL cannot hold (a NUL, invalid UTF-8) that an entry
		// point let through: the caller's input, not a bug of the server.
		return btk.ErrBadText
	}
	if unreachable(err) {
		return fmt.Errorf("store: %s: %w: %w", op, btk.ErrUnavailable, err)
	}
	return fmt.Errorf("store: %s: %w", op, err)
}

// unreachable reports whether err says the server could not be reached or
// went away, rather than refusing a statement.
func unreachable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// 08: connection exception; 57P01-03: shutdown, crash, starting up;
		// 53300: too many connections.
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" ||
			pe.Code == "57P03" || pe.Code == "53300"
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.Timeout(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "conn closed")
}
