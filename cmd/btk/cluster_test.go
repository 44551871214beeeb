package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/btk-project/btk/internal/redisstate/redistest"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
)

// The cluster tests run three real `btk serve` processes on one PostgreSQL
// schema and one Redis key prefix (docs/clusters.md). They need BTK_TEST_POSTGRES
// and BTK_TEST_REDIS.

var clusterClient = &http.Client{Timeout: 10 * time.Second}

func redisURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("BTK_TEST_REDIS")
	if u == "" {
		t.Skip("BTK_TEST_REDIS is not set (a redis:// URL): skipping the cluster test")
	}
	return u
}

// sharedRedis returns the --redis and --redis-prefix flags of a cluster on
// BTK_TEST_REDIS under a key prefix of the test's own, deleted at its end, so
// that tests running at once never see each other's state.
func sharedRedis(t *testing.T) []string {
	t.Helper()
	rurl := redisURL(t)
	prefix := redistest.Prefix()
	t.Cleanup(func() { wipeRedis(rurl, prefix) })
	return []string{"--redis", redistest.Patient(rurl), "--redis-prefix", prefix}
}

// sharedCluster is the opening of a cluster test on the shared Redis: it runs
// alongside the other such tests unless -short, and returns a PostgreSQL
// database of its own and the Redis flags (sharedRedis).
func sharedCluster(t *testing.T) (db string, redisFlags []string) {
	t.Helper()
	parallelUnlessShort(t, "starts btk serve processes")
	redisFlags = sharedRedis(t)
	return pgtest.URL(t), redisFlags
}

// startCluster starts n instances at once on db and waits for all.
func startCluster(t *testing.T, n int, db string, flags ...string) []*serveProcess {
	t.Helper()
	procs := make([]*serveProcess, n)
	for i := range procs {
		procs[i] = launchServe(t, db, flags...)
	}
	for _, p := range procs {
		p.waitReady()
	}
	return procs
}

// answer is what a request-level call returned.
type answer struct {
	status int
	code   string // first error's extensions.code
	data   json.RawMessage
}

// call posts a GraphQL request; it is safe in any goroutine.
func call(base, bearer, key, query string, vars map[string]any, header ...string) (answer, error) {
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, err := http.NewRequest(http.MethodPost, base+"/graphql", bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := clusterClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	var out struct {
		Data   json.RawMessage
		Errors []struct{ Extensions struct{ Code string } }
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return answer{}, fmt.Errorf("HTTP %d, body not JSON: %w", res.StatusCode, err)
	}
	a := answer{status: res.StatusCode, data: out.Data}
	if len(out.Errors) > 0 {
		a.code = out.Errors[0].Extensions.Code
	}
	return a, nil
}

// mustCall runs a call that must succeed without errors and decodes data.
func mustCall(t *testing.T, base, bearer, query string, vars map[string]any, v any, header ...string) {
	t.Helper()
	a, err := call(base, bearer, "", query, vars, header...)
	if err != nil || a.status != http.StatusOK || a.code != "" {
		t.Fatalf("%s on %s: %+v %v", query, base, a, err)
	}
	if v != nil {
		if err := json.Unmarshal(a.data, v); err != nil {
			t.Fatal(err)
		}
	}
}

func loginAt(t *testing.T, base string) string {
	t.Helper()
	var out struct{ Login struct{ AccessToken string } }
	mustCall(t, base, "", `mutation($e:String!,$p:String!){login(email:$e,password:$p){accessToken}}`,
		map[string]any{"e": procAdminEmail, "p": procAdminPassword}, &out)
	return out.Login.AccessToken
}

func createKeyAt(t *testing.T, base, token, name string, perMinute int) procKey {
	t.Helper()
	var out struct {
		CreateApiKey struct {
			PlaintextKey string
			ApiKey       struct{ ID string }
		}
	}
	vars := map[string]any{"n": name, "m": nil}
	if perMinute > 0 {
		vars["m"] = perMinute
	}
	mustCall(t, base, token, `mutation($n:String!,$m:Int){createApiKey(input:{name:$n,rateLimitPerMinute:$m}){plaintextKey apiKey{id}}}`, vars, &out)
	return procKey{ID: out.CreateApiKey.ApiKey.ID, Plaintext: out.CreateApiKey.PlaintextKey}
}

const probeQuery = `{tenantInfo{id}}`

// load sends key requests to every instance until stop is closed, and
// counts answers other than 200, 401 and 429 (a dead instance's refusals
// are counted apart by the caller's choice of bases).
type load struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	sent    atomic.Int64
	unusual atomic.Int64
	last    atomic.Value // string: the last unusual answer

	mu       sync.Mutex
	inflight map[string]int // requests under way, by instance
}

func startLoad(bases func() []string, key *atomic.Value, workers int) *load {
	l := &load{stop: make(chan struct{}), inflight: map[string]int{}}
	for w := range workers {
		l.wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				// Picked and counted under one lock: once a base is
				// dropped from bases, drained sees every request to it.
				l.mu.Lock()
				bs := bases()
				base := bs[i%len(bs)]
				l.inflight[base]++
				l.mu.Unlock()
				a, err := call(base, "", key.Load().(string), probeQuery, nil)
				l.mu.Lock()
				l.inflight[base]--
				l.mu.Unlock()
				l.sent.Add(1)
				if err != nil || (a.status != 200 && a.status != 401 && a.status != 429) {
					l.unusual.Add(1)
					l.last.Store(fmt.Sprintf("%+v %v", a, err))
				}
			}
		})
	}
	return l
}

// drained waits (bounded) until no request to base is under way, once the
// load no longer picks base.
func (l *load) drained(t *testing.T, base string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		l.mu.Lock()
		n := l.inflight[base]
		l.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests to %s still under way after 10 s", n, base)
		}
	}
}

func (l *load) end() {
	close(l.stop)
	l.wg.Wait()
}

func TestCluster(t *testing.T) {
	db, redisFlags := sharedCluster(t)
	clusterGuarantees(t, db, redisFlags...)
}

// Every guarantee of one node, with the shared state on a primary followed
// through Sentinel (a primary, a replica and three sentinels of the test's
// own).
func TestClusterOnSentinel(t *testing.T) {
	parallelUnlessShort(t, "starts btk serve, redis-server and redis-sentinel processes")
	g := redistest.Sentinels(t)
	bases, token := clusterGuarantees(t, pgtest.URL(t), "--redis", redistest.Patient(g.URL()))
	// Fail closed: no primary to be had.
	k := createKeyAt(t, bases[0], token, "closed", 0)
	g.Primary.Kill()
	g.Replica.Kill()
	failsClosed(t, bases, k)
}

// Every guarantee of one node, with the shared state on a three-master
// Redis Cluster of the test's own.
func TestClusterOnRedisCluster(t *testing.T) {
	parallelUnlessShort(t, "starts btk serve and redis-server processes")
	g := redistest.Cluster(t)
	bases, token := clusterGuarantees(t, pgtest.URL(t), "--redis", redistest.Patient(g.URL()))
	// Fail closed: the shard of the workspace is down (the one whose
	// primary answers for the workspace's hash tag, not MOVED).
	k := createKeyAt(t, bases[0], token, "closed", 0)
	tag := "{" + k.Plaintext[len("btk_"):len("btk_")+8] + "}"
	var owner *redistest.Server
	for _, n := range g.Nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := n.Client().Get(ctx, "btk:"+tag+":rev").Err()
		cancel()
		if err == nil || err == redis.Nil {
			owner = n
		}
	}
	if owner == nil {
		t.Fatalf("no node holds %s", tag)
	}
	owner.Kill()
	failsClosed(t, bases, k)
}

// accepted checks that base accepts the key cred (a new or rotated key, with
// limits no probe reaches). A 503 UNAVAILABLE is asked again, within
// procWait: on a loaded machine a Redis answer can take longer than btk's
// 500 ms I/O timeout, and failing closed then is the product working, not
// what the calling test is about. Any other answer fails at once.
func accepted(t *testing.T, base, cred, what string) {
	t.Helper()
	deadline := time.Now().Add(procWait)
	for {
		a, err := call(base, "", cred, probeQuery, nil)
		if err == nil && a.status == http.StatusOK {
			return
		}
		if err != nil || a.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("%s on %s: %+v %v", what, base, a, err)
		}
		t.Logf("%s on %s: 503 %s, asked again", what, base, a.code)
		time.Sleep(50 * time.Millisecond)
	}
}

// failsClosed checks that every instance refuses k with 503 UNAVAILABLE (two
// requests each) and fails /readyz.
func failsClosed(t *testing.T, bases []string, k procKey) {
	t.Helper()
	failsClosedOver(t, bases, k, 2*len(bases))
}

// failsClosedOver is failsClosed with n requests spread over the instances.
func failsClosedOver(t *testing.T, bases []string, k procKey, n int) {
	t.Helper()
	for i := range n {
		a, err := call(bases[i%len(bases)], "", k.Plaintext, probeQuery, nil)
		if err != nil || a.status != http.StatusServiceUnavailable || a.code != "UNAVAILABLE" {
			t.Fatalf("request %d with the shared state down: %+v %v", i, a, err)
		}
	}
	for _, b := range bases {
		if code := readyzStatus(t, b); code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz of %s with the shared state down: %d", b, code)
		}
	}
}

// clusterGuarantees runs three instances on db with flags and checks
// every guarantee of the cluster contract (docs/clusters.md).
func clusterGuarantees(t *testing.T, db string, flags ...string) (live []string, token string) {
	// Three instances started at once on an empty database.
	procs := startCluster(t, 3, db, flags...)
	bases := []string{procs[0].url, procs[1].url, procs[2].url}

	t.Run("bootstrap once", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var accounts, workspaces, defaults, migrations, files int
		if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM accounts), (SELECT count(*) FROM workspaces),
			(SELECT count(*) FROM workspaces WHERE name = 'Default'), (SELECT count(*) FROM schema_migrations)`).
			Scan(&accounts, &workspaces, &defaults, &migrations); err != nil {
			t.Fatal(err)
		}
		names, _ := filepath.Glob("../../internal/store/postgres/migrations/*.sql")
		files = len(names)
		if accounts != 1 || workspaces != 1 || defaults != 1 || migrations != files || files == 0 {
			t.Fatalf("after three started at once: %d accounts, %d workspaces (%d Default), %d migrations applied of %d",
				accounts, workspaces, defaults, migrations, files)
		}
		created := 0
		for _, p := range procs {
			created += strings.Count(p.Out.String(), "bootstrapped an empty database")
		}
		if created != 1 {
			t.Fatalf("%d instances say they bootstrapped", created)
		}
	})

	token = loginAt(t, bases[0])

	t.Run("exact limit across instances", func(t *testing.T) {
		// The day window: it refills one request every 36 minutes, so a slow
		// run (-race) cannot see it refill during the burst.
		const L, N = 40, 400
		var created struct{ CreateApiKey struct{ PlaintextKey string } }
		mustCall(t, bases[1], token, `mutation($d:Int){createApiKey(input:{name:"exact",rateLimitPerDay:$d}){plaintextKey}}`,
			map[string]any{"d": L}, &created)
		k := procKey{Plaintext: created.CreateApiKey.PlaintextKey}
		var ok, limited, other atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range N {
			wg.Go(func() {
				<-start
				a, err := call(bases[i%3], "", k.Plaintext, probeQuery, nil)
				switch {
				case err != nil:
					other.Add(1)
				case a.status == 200:
					ok.Add(1)
				case a.status == 429 && a.code == "RATE_LIMITED":
					limited.Add(1)
				default:
					other.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if ok.Load() != L || limited.Load() != N-L || other.Load() != 0 {
			t.Fatalf("%d requests over three instances against %d/day: %d accepted, %d limited, %d other",
				N, L, ok.Load(), limited.Load(), other.Load())
		}
	})

	t.Run("16 creates of one name", func(t *testing.T) {
		var wins, taken, other atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 16 {
			wg.Go(func() {
				<-start
				a, err := call(bases[i%3], token, "", `mutation{createApiKey(input:{name:"race"}){apiKey{id}}}`, nil)
				switch {
				case err == nil && a.status == 200 && a.code == "":
					wins.Add(1)
				case err == nil && a.code == "NAME_TAKEN":
					taken.Add(1)
				default:
					other.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if wins.Load() != 1 || taken.Load() != 15 {
			t.Fatalf("16 creates of one name: %d succeeded, %d NAME_TAKEN, %d other", wins.Load(), taken.Load(), other.Load())
		}
	})

	t.Run("revocation under load", func(t *testing.T) {
		defer func() {
			if t.Failed() {
				t.Logf("the instances' last warnings:\n%s", warnings(procs))
			}
		}()
		var elev struct{ Elevate struct{ Token string } }
		mustCall(t, bases[0], token, `mutation($p:String!){elevate(password:$p){token}}`, map[string]any{"p": procAdminPassword}, &elev)
		var loadKey atomic.Value
		loadKey.Store(createKeyAt(t, bases[0], token, "load", 0).Plaintext)
		l := startLoad(func() []string { return bases }, &loadKey, 2)
		defer l.end()

		session := token
		ops := []string{"revoke", "rotate", "revoke-all"}
		for round := range 100 {
			on := round % 3
			op := ops[round%3]
			if round%12 == 11 {
				op = "logout"
			}
			var cred, bearer string
			if op == "logout" {
				// A fresh session on another instance, used on all three.
				bearer = loginAt(t, bases[(on+1)%3])
				for _, b := range bases {
					mustCall(t, b, bearer, `{me{email}}`, nil, nil)
				}
				mustCall(t, bases[on], bearer, `mutation{logout}`, nil, nil)
				for i, b := range bases {
					if i == on {
						continue
					}
					a, err := call(b, bearer, "", `{me{email}}`, nil)
					if err != nil || a.status != http.StatusUnauthorized {
						t.Fatalf("round %d: a session logged out on instance %d answered on %d: %+v %v", round, on, i, a, err)
					}
				}
				continue
			}
			k := createKeyAt(t, bases[(on+1)%3], session, fmt.Sprintf("r%d", round), 0)
			cred = k.Plaintext
			for _, b := range bases { // cached and verified everywhere
				accepted(t, b, cred, fmt.Sprintf("round %d: a new key", round))
			}
			switch op {
			case "revoke":
				mustCall(t, bases[on], session, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": k.ID}, nil)
			case "rotate":
				var rot struct{ RotateApiKey struct{ PlaintextKey string } }
				mustCall(t, bases[on], session, `mutation($id:ID!){rotateApiKey(id:$id){plaintextKey}}`, map[string]any{"id": k.ID}, &rot,
					"X-Elevation", elev.Elevate.Token)
				for _, b := range bases {
					accepted(t, b, rot.RotateApiKey.PlaintextKey, fmt.Sprintf("round %d: the new key of a rotation on %d", round, on))
				}
			case "revoke-all":
				mustCall(t, bases[on], session, `mutation{revokeAllApiKeys{revokedCount}}`, nil, nil)
			}
			for i, b := range bases {
				if i == on {
					continue
				}
				a, err := call(b, "", cred, probeQuery, nil)
				if err != nil || a.status != http.StatusUnauthorized {
					t.Fatalf("round %d: %s answered on instance %d, then the old key on %d: %+v %v", round, op, on, i, a, err)
				}
			}
			if op == "revoke-all" {
				loadKey.Store(createKeyAt(t, bases[on], session, fmt.Sprintf("load%d", round), 0).Plaintext)
			}
		}
		l.end()
		l.stop = make(chan struct{}) // the deferred end is a no-op now
		if l.unusual.Load() != 0 || l.sent.Load() == 0 {
			t.Fatalf("load: %d requests, %d unusual answers (last %v)", l.sent.Load(), l.unusual.Load(), l.last.Load())
		}
		t.Logf("load meanwhile: %d requests", l.sent.Load())
	})

	t.Run("shared throttles", func(t *testing.T) {
		// An account's attempts from one address: five a minute, counted
		// once for all instances (docs/security.md#password-throttles).
		login := `mutation($e:String!,$p:String!){login(email:$e,password:$p){accessToken}}`
		vars := map[string]any{"e": "nobody-" + redistest.Prefix()[8:20] + "@example.com", "p": "wrong password"}
		for i := range 5 {
			if a, err := call(bases[i%3], "", "", login, vars); err != nil || a.code == "RATE_LIMITED" || a.code == "" {
				t.Fatalf("attempt %d: %+v %v", i+1, a, err)
			}
		}
		for i, b := range bases {
			if a, err := call(b, "", "", login, vars); err != nil || a.code != "RATE_LIMITED" {
				t.Fatalf("a sixth attempt on instance %d: %+v %v", i, a, err)
			}
		}
	})

	t.Run("kill -9 under load", func(t *testing.T) {
		var loadKey atomic.Value
		loadKey.Store(createKeyAt(t, bases[0], token, "survivor", 0).Plaintext)
		var mu sync.Mutex
		live := []string{bases[0], bases[1], bases[2]}
		l := startLoad(func() []string { mu.Lock(); defer mu.Unlock(); return live }, &loadKey, 4)
		time.Sleep(200 * time.Millisecond)
		mu.Lock()
		live = live[:2] // the load stops using the third before it dies
		mu.Unlock()
		l.drained(t, bases[2])
		procs[2].kill()
		// The others keep answering: the load goes on (bounded wait).
		before := l.sent.Load()
		for deadline := time.Now().Add(10 * time.Second); l.sent.Load() < before+50; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the other instances stopped answering: %d requests in 10 s", l.sent.Load()-before)
			}
		}
		// It restarts and rejoins: same database, same shared state.
		p := startServe(t, db, flags...)
		mu.Lock()
		live = append(live, p.url)
		mu.Unlock()
		time.Sleep(200 * time.Millisecond)
		l.end()
		if l.unusual.Load() != 0 {
			t.Fatalf("load: %d requests, %d unusual answers (last %v)", l.sent.Load(), l.unusual.Load(), l.last.Load())
		}
		// The rejoined instance shares the limits: a key spent elsewhere is
		// spent there.
		k := createKeyAt(t, bases[0], token, "spent", 2)
		for _, b := range []string{bases[0], bases[1]} {
			if a, err := call(b, "", k.Plaintext, probeQuery, nil); err != nil || a.status != 200 {
				t.Fatalf("%+v %v", a, err)
			}
		}
		if a, err := call(p.url, "", k.Plaintext, probeQuery, nil); err != nil || a.status != http.StatusTooManyRequests {
			t.Fatalf("the rejoined instance, a key spent on the others: %+v %v", a, err)
		}
	})
	return bases[:2], token // the third was killed (its successor ended with the subtest)
}

// warnings returns the last warnings the processes logged (why a request
// was answered UNAVAILABLE).
func warnings(procs []*serveProcess) string {
	var out []string
	for _, p := range procs {
		for _, line := range strings.Split(p.Out.String(), "\n") {
			if strings.Contains(line, "WARN") || strings.Contains(line, "ERROR") {
				out = append(out, line)
			}
		}
	}
	if len(out) > 10 {
		out = out[len(out)-10:]
	}
	return strings.Join(out, "\n")
}

// readyAgain waits, until deadline, for base's /readyz to answer 200 by
// itself after the shared state came back: its connections redial at their
// own pace, so the wait is bounded but not immediate.
func readyAgain(t *testing.T, base string, deadline time.Time) {
	t.Helper()
	for {
		code := readyzStatus(t, base)
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz of %s after recovery: %d", base, code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readyzStatus is the status base's /readyz answers.
func readyzStatus(t *testing.T, base string) int {
	t.Helper()
	res, err := clusterClient.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// wipeRedis deletes the keys under prefix.
func wipeRedis(url, prefix string) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
}
