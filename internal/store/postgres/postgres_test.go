package postgres_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/postgres"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
	"github.com/btk-project/btk/internal/store/storetest"
)

var ctx = context.Background()

func open(t testing.TB, url string, opts postgres.Options) *postgres.DB {
	t.Helper()
	db, err := postgres.Open(ctx, url, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

// The conformance suite, each test on a schema of its own.
func TestConformance(t *testing.T) {
	pgtest.URL(t) // skips without BTK_TEST_POSTGRES
	storetest.Run(t, func(t *testing.T) btk.Store {
		return open(t, pgtest.URL(t), postgres.Options{MaxConns: 8})
	})
}

func TestIsURL(t *testing.T) {
	for db, want := range map[string]bool{
		"postgres://u@h/db": true, "postgresql://h/db": true, "./btk.db": false,
		"/var/lib/btk/btk.db": false, "postgres.db": false,
	} {
		if got := postgres.IsURL(db); got != want {
			t.Errorf("IsURL(%q) = %v", db, got)
		}
	}
}

// Instances started together on an empty schema migrate once: each waits
// for the migration lock, and the later ones find nothing to apply.
func TestMigrationsOnceWhenStartedTogether(t *testing.T) {
	url := pgtest.URL(t)
	const n = 4
	dbs := make([]*postgres.DB, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { dbs[i], errs[i] = postgres.Open(ctx, url, postgres.Options{Shared: true, MaxConns: 2}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		defer dbs[i].Close()
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var rows, distinct int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT version) FROM schema_migrations`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != distinct || rows == 0 {
		t.Fatalf("schema_migrations: %d rows, %d versions", rows, distinct)
	}
	// Reopening applies nothing either.
	open(t, url, postgres.Options{Shared: true}).Close()
	var again int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&again); err != nil || again != rows {
		t.Fatalf("after a reopen: %d rows, %v", again, err)
	}
}

// Without shared state, one process per database: a second Open refuses and
// names --redis; once the first closes, the database is free again. Shared
// and lone instances exclude each other.
func TestInstanceLock(t *testing.T) {
	url := pgtest.URL(t)
	first, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = postgres.Open(ctx, url, postgres.Options{})
	if !errors.Is(err, postgres.ErrInUse) || !strings.Contains(err.Error(), "--redis") {
		t.Fatalf("second Open: %v, want ErrInUse naming --redis", err)
	}
	if _, err := postgres.Open(ctx, url, postgres.Options{Shared: true}); err == nil || !strings.Contains(err.Error(), "--redis") {
		t.Fatalf("shared Open next to a lone instance: %v", err)
	}
	// A maintenance command (btk account reset-password) opens beside it.
	maint, err := postgres.Open(ctx, url, postgres.Options{Maintenance: true})
	if err != nil {
		t.Fatalf("maintenance Open next to a lone instance: %v", err)
	}
	maint.Close()
	// Another schema is another database.
	other := open(t, pgtest.URL(t), postgres.Options{})
	_ = other
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	a := open(t, url, postgres.Options{Shared: true})
	open(t, url, postgres.Options{Shared: true})
	if _, err := postgres.Open(ctx, url, postgres.Options{}); !errors.Is(err, postgres.ErrInUse) {
		t.Fatalf("lone Open next to shared instances: %v", err)
	}
	a.Close()
}

// A write survives closing and reopening the store.
func TestSurvivesCloseAndOpen(t *testing.T) {
	url := pgtest.URL(t)
	db, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ws := storetest.NewWorkspace(t, db)
	k := storetest.CreateKey(t, db, storetest.Key(ws, "ci"))
	db.Close()
	db = open(t, url, postgres.Options{})
	err = db.Read(ctx, func(tx btk.Tx) error {
		_, err := tx.APIKeyByHash(ctx, k.Hash)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A database upgraded from migration 0010 keeps its usage rows: 0011 only
// swaps the workspace index of api_key_usage for the covering one, and the
// reads find every row through it.
func TestMigrationKeepsUsageRows(t *testing.T) {
	url := pgtest.URL(t)
	db, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	seeded := storetest.SeedUsage(t, db)
	db.Close()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Back to 0010's schema: its index, and no record of 0011.
	if _, err := conn.Exec(ctx, `DROP INDEX api_key_usage_workspace_covering;
		CREATE INDEX api_key_usage_workspace ON api_key_usage (workspace_id, hour);
		DELETE FROM schema_migrations WHERE version = 11`); err != nil {
		t.Fatal(err)
	}
	db = open(t, url, postgres.Options{})
	var rows int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM api_key_usage`).Scan(&rows); err != nil || rows != seeded.Rows() {
		t.Fatalf("%d usage rows after the upgrade (%v), want %d", rows, err, seeded.Rows())
	}
	var indexes string
	if err := conn.QueryRow(ctx, `SELECT string_agg(indexname, ' ' ORDER BY indexname) FROM pg_indexes
		WHERE schemaname = current_schema() AND tablename = 'api_key_usage'`).Scan(&indexes); err != nil {
		t.Fatal(err)
	}
	if want := "api_key_usage_hour api_key_usage_pkey api_key_usage_workspace_covering"; indexes != want {
		t.Fatalf("indexes %s, want %s", indexes, want)
	}
	seeded.Check(t, db)
}

func TestBadURLIsNotQuoted(t *testing.T) {
	_, err := postgres.Open(ctx, "postgres://user:s3cret@host:notaport/db", postgres.Options{})
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("err = %v; want an error that does not quote the password", err)
	}
}

// A server that cannot be reached is UNAVAILABLE, not INTERNAL.
func TestUnreachableIsUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = postgres.Open(c, "postgres://btk@"+addr+"/btk?sslmode=disable&connect_timeout=2", postgres.Options{})
	if !errors.Is(err, btk.ErrUnavailable) || btk.ErrorCode(err) != btk.CodeUnavailable {
		t.Fatalf("Open on a closed port: %v, want ErrUnavailable", err)
	}
}

// Text PostgreSQL cannot hold (SQLSTATE 22021: a NUL, invalid UTF-8) is the
// caller's input, whichever entry point lets it reach a statement:
// BAD_USER_INPUT, never INTERNAL. The domain refuses it before a lookup
// (TestUnstorableInputIsTheCallers); this is the store's own answer.
func TestUnstorableTextIsBadInput(t *testing.T) {
	db := open(t, pgtest.URL(t), postgres.Options{})
	for _, s := range []string{"a\x00b@example.com", "\xff@example.com"} {
		err := db.Read(ctx, func(tx btk.Tx) error {
			_, err := tx.AccountByEmail(ctx, s)
			return err
		})
		if err != btk.ErrBadText || btk.ErrorCode(err) != btk.CodeBadUserInput {
			t.Errorf("AccountByEmail(%q): %v, want ErrBadText", s, err)
		}
	}
}

// The server ending a session (a restart, pg_terminate_backend) fails the
// statement in flight as UNAVAILABLE; the pool then reconnects by itself.
func TestTerminatedBackendIsUnavailable(t *testing.T) {
	url := pgtest.URL(t)
	app := "btk_terminated_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	db := open(t, url+"&application_name="+app, postgres.Options{MaxConns: 1})
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	err = db.Write(ctx, func(tx btk.Tx) error {
		if err := tx.SetSetting(ctx, "k", "v"); err != nil {
			return err
		}
		// This transaction's backend: the only one of the application
		// that is inside a transaction (the instance lock's is not).
		var pid int
		if err := admin.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle in transaction'`, app).Scan(&pid); err != nil {
			return err
		}
		if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
			return err
		}
		_, err := tx.Setting(ctx, "k")
		return err
	})
	if !errors.Is(err, btk.ErrUnavailable) || btk.ErrorCode(err) != btk.CodeUnavailable {
		t.Fatalf("statement on a terminated backend: %v, want ErrUnavailable", err)
	}
	// The pool drops the dead connection and serves the next request.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := db.Ping(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery after the backend was terminated: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Instances started together on an empty database (with shared state, so
// all may run) bootstrap once and agree on the generated server secret: a
// session made on one is valid on the others.
func TestBootstrapOnceWhenStartedTogether(t *testing.T) {
	url := pgtest.URL(t)
	const n = 3
	svcs := make([]*btk.Service, n)
	boots := make([]btk.BootstrapResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			db, err := postgres.Open(ctx, url, postgres.Options{Shared: true, MaxConns: 2})
			if err != nil {
				errs[i] = err
				return
			}
			t.Cleanup(func() { db.Close() })
			if svcs[i], err = btk.NewService(ctx, db, nil, btk.Config{}); err != nil {
				errs[i] = err
				return
			}
			boots[i], errs[i] = svcs[i].Bootstrap(ctx, "admin@example.com", "correct-horse-battery")
		})
	}
	wg.Wait()
	created := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("instance %d: %v", i, errs[i])
		}
		if boots[i].Created {
			created++
		}
	}
	if created != 1 {
		t.Fatalf("%d instances bootstrapped, want 1", created)
	}
	info, err := svcs[0].Login(ctx, "admin@example.com", "correct-horse-battery", "")
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range svcs {
		if _, err := s.ResolveSession(ctx, info.Token); err != nil {
			t.Errorf("instance %d refuses a session made on instance 0: %v", i, err)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var accounts, workspaces int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM accounts), (SELECT count(*) FROM workspaces)`).Scan(&accounts, &workspaces); err != nil {
		t.Fatal(err)
	}
	if accounts != 1 || workspaces != 1 {
		t.Fatalf("%d accounts and %d workspaces after three bootstraps, want 1 and 1", accounts, workspaces)
	}
}

// A lone instance whose lock's session ends (a PostgreSQL restart) notices
// it by itself, refuses changes while another instance holds the lock,
// and takes it back once it is free, counting the taking
// (docs/clusters.md#postgresql).
func TestInstanceLockTakenAgainAfterConnectionLoss(t *testing.T) {
	url := pgtest.URL(t)
	app := "btk_lock_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	endSessions := func() {
		t.Helper()
		if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, app); err != nil {
			t.Fatal(err)
		}
	}
	// waitHold waits for db's hold to be held (or lost) with a count of
	// takings above after, and returns the count.
	waitHold := func(db *postgres.DB, held bool, after uint64) uint64 {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, h := db.InstanceHold()
			if h == held && n > after {
				return n
			}
			if time.Now().After(deadline) {
				t.Fatalf("InstanceHold = %d, %v; want held %v after %d takings", n, h, held, after)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	a := open(t, url+"&application_name="+app, postgres.Options{})
	first := waitHold(a, true, 0)

	// Ended alone: taken back by itself.
	endSessions()
	waitHold(a, true, first)

	// Ended while the lock's connection can only come back as a's
	// application name, which the test keeps ending: another lone instance
	// takes the lock meanwhile.
	var b *postgres.DB
	deadline := time.Now().Add(10 * time.Second)
	for b == nil {
		endSessions()
		b, err = postgres.Open(ctx, url, postgres.Options{})
		if err != nil && time.Now().After(deadline) {
			t.Fatalf("Open after the first instance lost its lock: %v", err)
		}
	}
	lost := waitHold(a, false, 0)
	if err := a.Ping(ctx); err == nil {
		t.Fatal("Ping succeeds while another instance holds the lock")
	}
	if err := a.Write(ctx, func(btk.Tx) error { return nil }); !errors.Is(err, btk.ErrUnavailable) {
		t.Fatalf("a change without the lock: %v, want ErrUnavailable", err)
	}
	b.Close()
	waitHold(a, true, lost)
	if err := a.Ping(ctx); err != nil {
		t.Fatalf("Ping once the lock is taken back: %v", err)
	}
	if _, err := postgres.Open(ctx, url, postgres.Options{}); !errors.Is(err, postgres.ErrInUse) {
		t.Fatalf("Open while the first instance holds the lock again: %v", err)
	}
}

func TestPoolStats(t *testing.T) {
	db := open(t, pgtest.URL(t), postgres.Options{MaxConns: 3})
	if err := db.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	st, ok := db.PoolStats()["postgres"]
	if !ok || st.MaxOpenConnections != 3 || st.OpenConnections < 1 || st.InUse != 0 {
		t.Fatalf("PoolStats = %+v", db.PoolStats())
	}
}
