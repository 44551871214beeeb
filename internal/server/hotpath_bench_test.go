//go:build unix

package server_test

// In-process benchmarks of the request hot path (docs/design.md#budgets):
//
//	go test ./internal/server -run '^$' -bench HotPath -benchmem
//	BTK_BENCH_LARGE=1 go test ./internal/server -run '^$' -bench HotPath -benchmem -timeout 30m
//
// Each size seeds a fresh database once (keys=1000 always; keys=1000000 only
// with BTK_BENCH_LARGE=1) and measures, with requests spread at random over
// min(stored, 10,000) active keys:
//
//	parse+hash     WellFormedKey and SHA-256 of the presented key
//	ratelimit      one two-window decision of the limiter
//	authenticate   Service.AuthenticateKey with a warm key cache: the whole
//	               authentication step (parse, hash, cache, status, limit, usage);
//	               /active=1000 spreads requests over 1,000 keys only
//	middleware     POST /graphql {tenantInfo{id name}} with X-Api-Key through
//	               the real handler into an httptest.ResponseRecorder
//	healthz        GET /healthz through the same handler (the floor)
//	cold-lookup    store Read + APIKeyByHash of a key drawn uniformly among
//	               all stored keys (what a key-cache miss costs)
//
// Besides ns/op each reports cpu-ns/op, the process's CPU time per operation
// (garbage collection included): unlike wall time it does not grow while
// other processes hold the CPUs, so it is the figure to compare on a busy
// machine.
//
// Targets: authenticate (and middleware) at 1M ≤ 1.2× at 1k; cold-lookup at
// 1M ≤ 2× at 1k. bench/README.md has the figures.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/ratelimit"
	"github.com/btk-project/btk/internal/server"
	"github.com/btk-project/btk/internal/store/sqlite"
	"github.com/google/uuid"
	_ "modernc.org/sqlite"
)

const (
	benchActive     = 10_000 // keys that receive traffic
	benchWorkspaces = 100    // stored keys are spread over this many workspaces
	benchProbeBody  = `{"query":"{tenantInfo{id name}}"}`
)

// benchDB is a seeded database: the plaintext of every active key, and the
// hash of every stored key (for cold lookups).
type benchDB struct {
	path   string
	active []string   // plaintexts of the keys traffic is spread over
	hashes [][32]byte // every stored key
}

// seedBenchDB creates a database with n keys over benchWorkspaces workspaces
// in one transaction with one prepared insert and precomputed hashes (a
// million keys take a few seconds). Keys are deterministic.
func seedBenchDB(b *testing.B, dir string, n int) *benchDB {
	b.Helper()
	start := time.Now()
	ctx := context.Background()
	path := filepath.Join(dir, fmt.Sprintf("bench-%d.db", n))
	db, err := sqlite.Open(ctx, path) // creates the schema
	if err != nil {
		b.Fatal(err)
	}
	db.Close()

	// Fast and unsafe while seeding only: no journal, no fsync.
	raw, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+
		"?_pragma=journal_mode(OFF)&_pragma=synchronous(OFF)&_pragma=cache_size(-262144)&_pragma=foreign_keys(OFF)")
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	raw.SetMaxOpenConns(1)

	rng := rand.New(rand.NewChaCha8([32]byte{'b', 't', 'k'}))
	wsIDs := make([]string, benchWorkspaces)
	for i := range wsIDs {
		var u uuid.UUID
		for j := range u {
			u[j] = byte(rng.Uint32())
		}
		u[6] = u[6]&0x0f | 0x40
		u[8] = u[8]&0x3f | 0x80
		wsIDs[i] = fmt.Sprintf("%08x", i) + u.String()[8:] // distinct 8-char prefixes
	}
	bdb := &benchDB{path: path, hashes: make([][32]byte, n)}
	plain := make([]byte, btk.KeyLen)
	var random [32]byte
	now := time.Now().UnixNano()

	tx, err := raw.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback()
	for i, id := range wsIDs {
		if _, err := tx.ExecContext(ctx, `INSERT INTO workspaces (id, name, prefix, plan, public_client_key, created_at)
			VALUES (?, ?, ?, 'SELF_HOSTED', ?, ?)`, id, fmt.Sprintf("bench %d", i), id[:8], btk.NewPublicClientKey(id), now); err != nil {
			b.Fatal(err)
		}
	}
	// The secondary indexes are built once at the end rather than row by
	// row; the UNIQUE ones (id, hash) stay.
	var indexes []string
	rows, err := tx.QueryContext(ctx, `SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'api_keys' AND sql IS NOT NULL`)
	if err != nil {
		b.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var name, sql string
		if err := rows.Scan(&name, &sql); err != nil {
			b.Fatal(err)
		}
		names, indexes = append(names, name), append(indexes, sql)
	}
	rows.Close()
	for _, name := range names {
		if _, err := tx.ExecContext(ctx, `DROP INDEX `+name); err != nil {
			b.Fatal(err)
		}
	}

	// One prepared statement inserting seedBatch rows at a time.
	const seedBatch, cols = 128, 7
	insert := `INSERT INTO api_keys (id, workspace_id, name, hash, display_prefix, hint, created_at) VALUES ` +
		strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?),", seedBatch), ",")
	st, err := tx.PrepareContext(ctx, insert)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	args := make([]any, 0, seedBatch*cols)
	flush := func(st *sql.Stmt) {
		if _, err := st.ExecContext(ctx, args...); err != nil {
			b.Fatal(err)
		}
		args = args[:0]
	}
	// Keys are made first and inserted in the order of their hashes, so that
	// the unique hash index grows at its end instead of at random places
	// (several times faster); key i still belongs to workspace i%100.
	for i := range n {
		ws := wsIDs[i%benchWorkspaces]
		for j := 0; j < len(random); j += 8 {
			v := rng.Uint64()
			for k := range 8 {
				random[j+k] = byte(v >> (8 * k))
			}
		}
		copy(plain, btk.KeyPrefix)
		copy(plain[4:], ws[:8])
		plain[12] = '_'
		base64.RawURLEncoding.Encode(plain[13:], random[:])
		bdb.hashes[i] = sha256.Sum256(plain)
		if i < benchActive {
			bdb.active = append(bdb.active, string(plain))
		}
	}
	byHash := make([]int32, n)
	for i := range byHash {
		byHash[i] = int32(i)
	}
	slices.SortFunc(byHash, func(x, y int32) int { return bytes.Compare(bdb.hashes[x][:], bdb.hashes[y][:]) })
	for row, i := range byHash { // ids ascend with the rows too
		ws := wsIDs[int(i)%benchWorkspaces]
		args = append(args, fmt.Sprintf("%08x-0000-4000-8000-%012x", row, row), ws, fmt.Sprintf("key-%d", row),
			bdb.hashes[i][:], "btk_"+ws[:8], "hint", now)
		if len(args) == seedBatch*cols {
			flush(st)
		}
	}
	if len(args) > 0 { // the rest, one row at a time
		one, err := tx.PrepareContext(ctx, insert[:strings.Index(insert, "),")+1])
		if err != nil {
			b.Fatal(err)
		}
		rest := args
		for k := 0; k < len(rest); k += cols {
			args = rest[k : k+cols]
			flush(one)
		}
		one.Close()
	}
	for _, idx := range indexes {
		if _, err := tx.ExecContext(ctx, idx); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	if _, err := raw.ExecContext(ctx, `PRAGMA journal_mode=WAL`); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d keys in %v", n, time.Since(start).Round(time.Millisecond))
	return bdb
}

// benchServer is the service and handler on a seeded database, as `btk
// serve` runs them (info-level log, real clock, high limits so that nothing
// is refused).
type benchServer struct {
	db  *sqlite.DB
	svc *btk.Service
	h   http.Handler
}

func openBenchServer(b *testing.B, bdb *benchDB) *benchServer {
	b.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, bdb.path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	svc, err := btk.NewService(ctx, db, []byte(strings.Repeat("s", 32)), btk.Config{
		DefaultPerMinute: btk.MaxPerMinute, DefaultPerDay: btk.MaxPerDay,
	})
	if err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return &benchServer{db: db, svc: svc, h: server.New(svc, db, log)}
}

// openScopedBenchServer returns a service on a copy of the database in
// which every key has the scope orders:read (the database itself is held by
// the benchmark's first service), under benchRules(10), whose request rule
// needs that scope; keys are in its key cache.
func openScopedBenchServer(b *testing.B, bdb *benchDB, keys []string) *benchServer {
	b.Helper()
	ctx := context.Background()
	scoped := *bdb
	scoped.path = filepath.Join(b.TempDir(), "scoped.db")
	for _, step := range []struct{ path, sql string }{
		{bdb.path, `VACUUM INTO '` + scoped.path + `'`},
		{scoped.path, `UPDATE api_keys SET scopes = '["orders:read"]'`},
	} {
		raw, err := sql.Open("sqlite", "file:"+(&url.URL{Path: step.path}).EscapedPath())
		if err != nil {
			b.Fatal(err)
		}
		_, err = raw.ExecContext(ctx, step.sql)
		raw.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
	s := openBenchServer(b, &scoped)
	s.svc.SetAccessRules(mustRules(b, benchRules(10)))
	warmKeys(b, s.svc, keys)
	return s
}

// authorizeSerially serves req, a GET /v1/authorize, on h with each key of
// keys in the order ord; each must be accepted, with the scopes given if
// any.
func authorizeSerially(h http.Handler, req *http.Request, keys []string, ord []int, scopes string) func(b *testing.B) {
	mask := len(ord) - 1
	return func(b *testing.B) {
		i := 0
		for b.Loop() {
			req.Header["X-Api-Key"] = []string{keys[ord[i&mask]]}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK || scopes != "" && rec.Header().Get("X-Api-Key-Scopes") != scopes {
				b.Fatalf("HTTP %d %q: %s", rec.Code, rec.Header().Get("X-Api-Key-Scopes"), rec.Body)
			}
			i++
		}
	}
}

// warmKeys authenticates each key once, so that every key is in the key
// cache and the limiter before a benchmark measures.
func warmKeys(b *testing.B, svc *btk.Service, keys []string) {
	b.Helper()
	ctx := context.Background()
	for _, k := range keys {
		if _, _, err := svc.AuthenticateKey(ctx, k); err != nil {
			b.Fatal(err)
		}
	}
}

// authenticateSerially is Service.AuthenticateKey on keys in the order ord.
func authenticateSerially(svc *btk.Service, keys []string, ord []int) func(b *testing.B) {
	mask := len(ord) - 1
	return func(b *testing.B) {
		ctx := context.Background()
		i := 0
		for b.Loop() {
			if _, _, err := svc.AuthenticateKey(ctx, keys[ord[i&mask]]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	}
}

// order is a random sequence of indexes into n items (a power-of-two length
// so that the loop masks instead of dividing).
func order(n int, seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, 1))
	o := make([]int, 1<<16)
	for i := range o {
		o[i] = r.IntN(n)
	}
	return o
}

// probeRequest is a reusable POST /graphql with the key; call reset before
// each use.
type probeRequest struct {
	req  *http.Request
	body *strings.Reader
}

func newProbeRequest() *probeRequest {
	p := &probeRequest{body: strings.NewReader(benchProbeBody)}
	p.req = httptest.NewRequest(http.MethodPost, "/graphql", nil)
	p.req.Header.Set("Content-Type", "application/json")
	return p
}

func (p *probeRequest) reset(key string) *http.Request {
	p.body.Reset(benchProbeBody)
	p.req.Body = io.NopCloser(p.body)
	p.req.ContentLength = int64(len(benchProbeBody))
	p.req.Header.Set("X-Api-Key", key)
	return p.req
}

// cpuTime is the CPU time the process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// probeSerially sends the identity probe through h with keys[ord[i]], one
// request at a time: the "middleware" case of the hot-path and metrics
// benchmarks.
func probeSerially(h http.Handler, keys []string, ord []int) func(b *testing.B) {
	mask := len(ord) - 1
	return func(b *testing.B) {
		p := newProbeRequest()
		i := 0
		for b.Loop() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, p.reset(keys[ord[i&mask]]))
			if rec.Code != http.StatusOK {
				b.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
			}
			i++
		}
	}
}

// probeInParallel is probeSerially from GOMAXPROCS goroutines, each in an
// order of its own.
func probeInParallel(h http.Handler, keys []string) func(b *testing.B) {
	return func(b *testing.B) {
		var seed atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			o := order(len(keys), seed.Add(1)+1)
			mask := len(o) - 1
			p := newProbeRequest()
			i := 0
			for pb.Next() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, p.reset(keys[o[i&mask]]))
				if rec.Code != http.StatusOK {
					b.Errorf("HTTP %d: %s", rec.Code, rec.Body)
					return
				}
				i++
			}
		})
	}
}

// healthzLoop asks h for /healthz: the floor under every request.
func healthzLoop(h http.Handler) func(b *testing.B) {
	return func(b *testing.B) {
		req := httptest.NewRequest(http.MethodGet, "/healthz", nil)
		for b.Loop() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Fatalf("HTTP %d", rec.Code)
			}
		}
	}
}

// measure runs f as the benchmark body and reports cpu-ns/op besides.
func measure(f func(b *testing.B)) func(b *testing.B) {
	return func(b *testing.B) {
		start := cpuTime()
		f(b)
		b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
	}
}

func BenchmarkHotPath(b *testing.B) {
	sizes := []int{1_000}
	if os.Getenv("BTK_BENCH_LARGE") == "1" {
		sizes = append(sizes, 1_000_000)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			bdb := seedBenchDB(b, b.TempDir(), n)
			s := openBenchServer(b, bdb)
			ctx := context.Background()
			keys := bdb.active
			ord := order(len(keys), 1)
			mask := len(ord) - 1

			warmKeys(b, s.svc, keys)

			b.Run("parse+hash", measure(func(b *testing.B) {
				i := 0
				for b.Loop() {
					k := keys[ord[i&mask]]
					if !btk.WellFormedKey(k) {
						b.Fatal("malformed")
					}
					var buf [btk.KeyLen]byte // as AuthenticateKey hashes it
					sha256.Sum256(append(buf[:0], k...))
					i++
				}
			}))

			b.Run("ratelimit", measure(func(b *testing.B) {
				l := ratelimit.New()
				ids := make([]string, len(keys))
				for j := range ids {
					ids[j] = fmt.Sprintf("%08x-0000-4000-8000-%012x", j, j)
				}
				lim := ratelimit.Limits{PerMinute: btk.MaxPerMinute, PerDay: btk.MaxPerDay}
				now := time.Now()
				for _, id := range ids {
					l.Allow(id, lim, now, 0)
				}
				i := 0
				for b.Loop() {
					now = now.Add(time.Microsecond)
					if !l.Allow(ids[ord[i&mask]], lim, now, 0).Allowed {
						b.Fatal("refused")
					}
					i++
				}
			}))

			b.Run("authenticate", measure(authenticateSerially(s.svc, keys, ord)))

			// The same over only 1,000 of the active keys: with the active set
			// fixed, what the number of stored keys costs.
			b.Run("authenticate/active=1000", measure(authenticateSerially(s.svc, keys, order(min(len(keys), 1000), 3))))

			b.Run("authenticate/parallel", measure(func(b *testing.B) {
				var seed atomic.Uint64
				b.RunParallel(func(pb *testing.PB) {
					o := order(len(keys), seed.Add(1)+1)
					i := 0
					for pb.Next() {
						if _, _, err := s.svc.AuthenticateKey(ctx, keys[o[i&mask]]); err != nil {
							b.Error(err)
							return
						}
						i++
					}
				})
			}))

			b.Run("middleware", measure(probeSerially(s.h, keys, ord)))
			b.Run("middleware/parallel", measure(probeInParallel(s.h, keys)))
			b.Run("healthz", measure(healthzLoop(s.h)))

			// GET /v1/authorize with a key (docs/design.md#budgets: 85 % of healthz).
			b.Run("authorize", measure(authorizeSerially(s.h, httptest.NewRequest(http.MethodGet, "/v1/authorize", nil), keys, ord, "")))

			// The same with scoped keys under a 10-rule file, as forward-auth
			// callers send it (X-Forwarded-Method, X-Forwarded-Uri): what
			// bench/hotpath.sh measures with SCOPED=1. A service of its own
			// reads the keys once their scopes are set.
			b.Run("authorize/scoped", func(b *testing.B) {
				scoped := openScopedBenchServer(b, bdb, keys)
				req := httptest.NewRequest(http.MethodGet, "/v1/authorize", nil)
				req.Header.Set("X-Forwarded-Method", "GET")
				req.Header.Set("X-Forwarded-Uri", "/orders/42/lines/7")
				measure(authorizeSerially(scoped.h, req, keys, ord, "orders:read"))(b)
			})

			b.Run("cold-lookup", measure(func(b *testing.B) {
				all := order(len(bdb.hashes), 2)
				i := 0
				for b.Loop() {
					h := bdb.hashes[all[i&mask]]
					err := s.db.Read(ctx, func(tx btk.Tx) error {
						_, err := tx.APIKeyByHash(ctx, h[:])
						return err
					})
					if err != nil {
						b.Fatal(err)
					}
					i++
				}
			}))
		})
	}
}
