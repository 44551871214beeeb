package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/redisstate/redistest"
)

// A primary with min-replicas-to-write 1 (docs/clusters.md#failover): with
// its replica connected, btk serves; with the replica gone, the primary
// refuses every write, and every key check writes its windows, so key
// checks, logins and changes answer UNAVAILABLE (never a 200 for a revoked
// key or beyond a limit), /readyz fails and a btk serve does not start;
// once a replica is back, everything serves again by itself.
func TestServeMinReplicasToWrite(t *testing.T) {
	parallelUnlessShort(t, "starts btk serve and redis-server processes")
	// A small lag, as an operator who wants the primary to notice soon
	// would set; the replica's SIGKILL closes its link, so the primary
	// notices at once anyway.
	primary, replica := redistest.Pair(t, "min-replicas-to-write 1", "min-replicas-max-lag 2")
	primary.WaitGoodReplicas(t, 1)
	redisFlag := []string{"--redis", redistest.Patient(primary.URL())}
	p := startServe(t, t.TempDir()+"/btk.db", redisFlag...)
	token := loginAt(t, p.url)
	live := createKeyAt(t, p.url, token, "live", 0)
	during := createKeyAt(t, p.url, token, "during", 0)
	gone := createKeyAt(t, p.url, token, "gone", 0)
	// Day limits: they do not refill during the test, however slow.
	perDay := func(name string, limit int) procKey {
		var created struct {
			CreateApiKey struct {
				PlaintextKey string
				ApiKey       struct{ ID string }
			}
		}
		mustCall(t, p.url, token, `mutation($n:String!,$d:Int){createApiKey(input:{name:$n,rateLimitPerDay:$d}){plaintextKey apiKey{id}}}`,
			map[string]any{"n": name, "d": limit}, &created)
		return procKey{ID: created.CreateApiKey.ApiKey.ID, Plaintext: created.CreateApiKey.PlaintextKey}
	}
	spent, counted := perDay("spent", 2), perDay("counted", 3)

	// With the replica connected: key checks 200, a revoke is answered.
	for _, k := range []procKey{live, during, gone, spent, spent, counted, counted} {
		if a, err := call(p.url, "", k.Plaintext, probeQuery, nil); err != nil || a.status != http.StatusOK {
			t.Fatalf("a key with the replica connected: %+v %v", a, err)
		}
	}
	if a, err := call(p.url, "", spent.Plaintext, probeQuery, nil); err != nil || a.status != http.StatusTooManyRequests {
		t.Fatalf("a third request against 2 a day: %+v %v", a, err)
	}
	mustCall(t, p.url, token, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": gone.ID}, nil)
	if a, err := call(p.url, "", gone.Plaintext, probeQuery, nil); err != nil || a.status != http.StatusUnauthorized {
		t.Fatalf("a revoked key with the replica connected: %+v %v", a, err)
	}

	replica.Kill()
	primary.WaitGoodReplicas(t, 0)

	// Every key check is refused: the valid keys and the spent one answer
	// 503 UNAVAILABLE (their windows' write is refused, so nothing is
	// counted), the revoked key is refused (its record is final: 401).
	for i := range 10 {
		for _, k := range []procKey{live, spent, counted} {
			if a, err := call(p.url, "", k.Plaintext, probeQuery, nil); err != nil || a.status != http.StatusServiceUnavailable || a.code != "UNAVAILABLE" {
				t.Fatalf("request %d with no replica connected: %+v %v", i, a, err)
			}
		}
		if a, err := call(p.url, "", gone.Plaintext, probeQuery, nil); err != nil || (a.status != http.StatusUnauthorized && a.status != http.StatusServiceUnavailable) {
			t.Fatalf("a revoked key, request %d with no replica connected: %+v %v", i, a, err)
		}
	}
	// A change is committed in the database but cannot be told to Redis:
	// answered UNAVAILABLE, to be repeated (docs/clusters.md#shared-state-in-redis).
	if a, err := call(p.url, token, "", `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": during.ID}); err != nil || a.code != "UNAVAILABLE" {
		t.Fatalf("a revoke with no replica connected: %+v %v", a, err)
	}
	if a, err := call(p.url, "", during.Plaintext, probeQuery, nil); err != nil || a.status == http.StatusOK {
		t.Fatalf("a key revoked with no replica connected: %+v %v", a, err)
	}
	// A login counts its attempt in Redis (the password throttle).
	login := `mutation($e:String!,$p:String!){login(email:$e,password:$p){accessToken}}`
	if a, err := call(p.url, "", "", login, map[string]any{"e": procAdminEmail, "p": procAdminPassword}); err != nil || a.code != "UNAVAILABLE" {
		t.Fatalf("a login with no replica connected: %+v %v", a, err)
	}
	// A session needs only the database.
	mustCall(t, p.url, token, `{me{email}}`, nil, nil)
	if code := readyzStatus(t, p.url); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with no replica connected: %d", code)
	}
	// A btk serve that starts now stops at once, naming the refusal.
	q := launchServe(t, t.TempDir()+"/btk.db", redisFlag...)
	select {
	case <-q.Exited():
	case <-time.After(procWait):
		t.Fatal("btk serve did not exit with no replica connected")
	}
	if out := q.Out.String(); q.Err() == nil || !strings.Contains(out, "NOREPLICAS") {
		t.Fatalf("btk serve with no replica connected: %v\n%s", q.Err(), out)
	}

	// The replica back (empty, it syncs again): everything serves again
	// by itself, with no request counted during the outage.
	replica.Restart()
	primary.WaitGoodReplicas(t, 1)
	deadline := time.Now().Add(20 * time.Second)
	for {
		a, err := call(p.url, "", live.Plaintext, probeQuery, nil)
		if err == nil && a.status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no key check served after the replica came back: %+v %v", a, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	readyAgain(t, p.url, deadline)
	if a, err := call(p.url, "", spent.Plaintext, probeQuery, nil); err != nil || a.status != http.StatusTooManyRequests {
		t.Fatalf("a spent key after the replica came back: %+v %v", a, err)
	}
	// Its ten refusals were not counted: one request of three is left.
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		if a, err := call(p.url, "", counted.Plaintext, probeQuery, nil); err != nil || a.status != want {
			t.Fatalf("request %d of a key with 2 of 3 a day used before the outage, after it: %+v %v", i+3, a, err)
		}
	}
	if a, err := call(p.url, "", gone.Plaintext, probeQuery, nil); err != nil || a.status != http.StatusUnauthorized {
		t.Fatalf("a key revoked before the outage, after it: %+v %v", a, err)
	}
	// The revoke repeated is answered, and holds.
	mustCall(t, p.url, token, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": during.ID}, nil)
	if a, err := call(p.url, "", during.Plaintext, probeQuery, nil); err != nil || a.status != http.StatusUnauthorized {
		t.Fatalf("a key revoked again after the replica came back: %+v %v", a, err)
	}
	loginAt(t, p.url)
	startServe(t, t.TempDir()+"/btk.db", redisFlag...) // starts again
}
