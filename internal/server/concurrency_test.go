package server_test

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/btk-project/btk/internal/btk"
)

// 16 concurrent creates of one name: exactly one succeeds, the others get
// NAME_TAKEN, one key has the name, and one pair of audit rows is written.
func TestConcurrentCreateSameName(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	results := concurrently(e, 16, owner, `mutation{createApiKey(input:{name:"same"}){plaintextKey apiKey{id}}}`, nil)

	var won []int
	for i, r := range results {
		switch {
		case r.Status != http.StatusOK:
			t.Errorf("request %d: HTTP %d %+v", i, r.Status, r.Errors)
		case r.Code() == "":
			won = append(won, i)
		case r.Code() != "NAME_TAKEN":
			t.Errorf("request %d: code %q %+v, want NAME_TAKEN", i, r.Code(), r.Errors)
		}
	}
	if len(won) != 1 {
		t.Fatalf("%d creates succeeded (%v), want exactly 1", len(won), won)
	}
	var created struct {
		CreateApiKey struct {
			PlaintextKey string
			ApiKey       struct{ ID string }
		}
	}
	results[won[0]].decode(t, &created)

	var list struct {
		ApiKeys struct{ Nodes []struct{ ID, Name string } }
	}
	e.must(owner, `{apiKeys(includeRevoked:true,first:500){nodes{id name}}}`, nil, &list)
	if len(list.ApiKeys.Nodes) != 1 || list.ApiKeys.Nodes[0].ID != created.CreateApiKey.ApiKey.ID || list.ApiKeys.Nodes[0].Name != "same" {
		t.Fatalf("keys after the race: %+v, want only %s", list.ApiKeys.Nodes, created.CreateApiKey.ApiKey.ID)
	}
	if s := e.probeStatus(created.CreateApiKey.PlaintextKey); s != http.StatusOK {
		t.Fatalf("the winning key: HTTP %d", s)
	}
	assertAudit(t, e, owner, []string{"CREATED"}, []string{"api_key.created"})
}

// createUnlimitedKey creates a key whose own limits are far above what the
// hammering tests send, so the frozen test clock never makes it 429.
func createUnlimitedKey(e *env, owner cred, name string) newKey {
	e.t.Helper()
	return e.createKeyWith(owner, name, "rateLimitPerMinute:1000000,rateLimitPerDay:100000000")
}

// hammerResult is one probe sent while a change was under way.
type hammerResult struct {
	worker int
	key    int // index in the keys hammered
	// afterAnswer: the change had answered before this request was sent.
	afterAnswer bool
	// beforeChange: the answer arrived before the change was sent.
	beforeChange bool
	status       int
	message      string
}

// hammer makes 8 goroutines send the identity probe with keys (round robin)
// and, once each has had warm answers, runs change. It stops once each
// goroutine has sent settle requests after change returned. No clock is
// involved: each request records the two flags around it.
func hammer(t *testing.T, e *env, keys []string, change func()) []hammerResult {
	t.Helper()
	const workers, warm, settle = 8, 5, 5
	var sent, answered atomic.Bool
	var warmed, settled sync.WaitGroup
	warmed.Add(workers)
	settled.Add(workers)
	stop := make(chan struct{})
	per := make([][]hammerResult, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			ki := w % len(keys)
			key := keys[ki]
			var nWarm, nSettle int
			for {
				select {
				case <-stop:
					return
				default:
				}
				res := hammerResult{worker: w, key: ki, afterAnswer: answered.Load()}
				r := e.do(cred{Key: key}, probe, nil)
				res.beforeChange = !sent.Load()
				res.status = r.Status
				if len(r.Errors) > 0 {
					res.message = r.Errors[0].Message
				}
				per[w] = append(per[w], res)
				if res.beforeChange {
					if nWarm++; nWarm == warm {
						warmed.Done()
					}
				}
				if res.afterAnswer {
					if nSettle++; nSettle == settle {
						settled.Done()
					}
				}
			}
		})
	}
	warmed.Wait()
	sent.Store(true)
	change()
	answered.Store(true)
	settled.Wait()
	close(stop)
	wg.Wait()

	var all []hammerResult
	for _, rs := range per {
		all = append(all, rs...)
	}
	return all
}

// checkHammer asserts that every request answered before the change started
// was accepted, every request sent after the change answered was refused as
// revoked, and those in between got one or the other. Keys listed in
// untouched are not revoked by the change: all their requests must succeed.
func checkHammer(t *testing.T, results []hammerResult, untouched ...int) {
	t.Helper()
	var before, during, after int
	for _, r := range results {
		revoked := r.status == http.StatusUnauthorized && r.message == "API key is revoked or expired"
		switch {
		case slices.Contains(untouched, r.key):
			if r.status != http.StatusOK {
				t.Errorf("worker %d: a key the change does not touch got HTTP %d %q", r.worker, r.status, r.message)
			}
		case r.beforeChange:
			before++
			if r.status != http.StatusOK {
				t.Errorf("worker %d: a request answered before the change got HTTP %d %q", r.worker, r.status, r.message)
			}
		case r.afterAnswer:
			after++
			if !revoked {
				t.Errorf("worker %d: a request sent after the change answered got HTTP %d %q; want 401 revoked", r.worker, r.status, r.message)
			}
		default:
			during++
			if r.status != http.StatusOK && !revoked {
				t.Errorf("worker %d: a request in flight during the change got HTTP %d %q", r.worker, r.status, r.message)
			}
		}
	}
	if min := (8 - 8/2*len(untouched)) * 5; before < min || after < min {
		t.Fatalf("%d requests before, %d during, %d after the change: too few to judge", before, during, after)
	}
	t.Logf("%d requests before, %d during, %d after the change", before, during, after)
}

// docs/design.md#key-lifecycle: revocation takes effect on the very next
// request, whatever caches exist, also under concurrent traffic with the key.
func TestRevokeUnderLoad(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	for round := range 3 {
		k := createUnlimitedKey(e, owner, fmt.Sprintf("hammered-%d", round))
		results := hammer(t, e, []string{k.Plaintext}, func() {
			e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": k.ID}, &struct{}{})
		})
		checkHammer(t, results)
	}
}

// docs/design.md#rotation: when a rotation answers, the old key is already revoked.
func TestRotateUnderLoad(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	k := createUnlimitedKey(e, owner, "rotated")
	elevated := e.elevated(owner, adminPassword)
	var out struct{ RotateApiKey struct{ PlaintextKey string } }
	results := hammer(t, e, []string{k.Plaintext}, func() {
		e.must(elevated, `mutation($id:ID!){rotateApiKey(id:$id){plaintextKey}}`, map[string]any{"id": k.ID}, &out)
	})
	checkHammer(t, results)
	if s := e.probeStatus(out.RotateApiKey.PlaintextKey); s != http.StatusOK {
		t.Fatalf("the replacement key: HTTP %d", s)
	}
}

// docs/design.md#key-lifecycle: revokeAllApiKeys takes effect on the very next request of every key.
func TestRevokeAllUnderLoad(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	a, b := createUnlimitedKey(e, owner, "a"), createUnlimitedKey(e, owner, "b")
	results := hammer(t, e, []string{a.Plaintext, b.Plaintext}, func() {
		e.must(owner, `mutation{revokeAllApiKeys{revokedCount}}`, nil, &struct{}{})
	})
	checkHammer(t, results)
}

// The same with a key cache of one entry and a second key in the traffic:
// every request misses the cache and reads the database, so reads that
// started before the revocation committed race with it; none may put the
// revoked key back into the cache.
func TestRevokeUnderLoadColdCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *btk.Config) { c.KeyCacheSize = 1 })
	owner := e.admin()
	for round := range 3 {
		target := createUnlimitedKey(e, owner, fmt.Sprintf("target-%d", round))
		churn := createUnlimitedKey(e, owner, fmt.Sprintf("churn-%d", round))
		results := hammer(t, e, []string{target.Plaintext, churn.Plaintext}, func() {
			e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": target.ID}, &struct{}{})
		})
		checkHammer(t, results, 1)
	}
}

// concurrently sends the same request n times at once.
func concurrently(e *env, n int, c cred, query string, vars map[string]any) []response {
	results := make([]response, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i] = e.do(c, query, vars)
		})
	}
	close(start)
	wg.Wait()
	return results
}

// 8 concurrent rotations of one key: one wins, the others see it revoked;
// one replacement exists and one ROTATED pair of audit rows.
func TestConcurrentRotateSameKey(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	k := e.createKey(owner, "contended")
	results := concurrently(e, 8, e.elevated(owner, adminPassword), `mutation($id:ID!){rotateApiKey(id:$id){plaintextKey apiKey{id}}}`, map[string]any{"id": k.ID})
	var won []response
	for i, r := range results {
		switch r.Code() {
		case "":
			won = append(won, r)
		case "KEY_REVOKED":
		default:
			t.Errorf("rotation %d: HTTP %d %q %+v, want success or KEY_REVOKED", i, r.Status, r.Code(), r.Errors)
		}
	}
	if len(won) != 1 {
		t.Fatalf("%d rotations succeeded, want 1", len(won))
	}
	var out struct{ RotateApiKey struct{ PlaintextKey string } }
	won[0].decode(t, &out)
	if s := e.probeStatus(out.RotateApiKey.PlaintextKey); s != http.StatusOK {
		t.Fatalf("the replacement: HTTP %d", s)
	}
	if s := e.probeStatus(k.Plaintext); s != http.StatusUnauthorized {
		t.Fatalf("the rotated key: HTTP %d", s)
	}
	if ids := e.allIDs(owner, "apiKeys", "includeRevoked:true,"); len(ids) != 2 {
		t.Fatalf("%d keys after the race, want the old and one replacement", len(ids))
	}
	assertAudit(t, e, owner, []string{"CREATED", "ROTATED"}, []string{"api_key.created", "api_key.rotated"})
}

// 8 concurrent revocations of one key all answer the revoked key; one pair of
// audit rows is written.
func TestConcurrentRevokeSameKey(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	k := e.createKey(owner, "contended")
	for i, r := range concurrently(e, 8, owner, `mutation($id:ID!){revokeApiKey(id:$id){id status}}`, map[string]any{"id": k.ID}) {
		var out struct{ RevokeApiKey struct{ ID, Status string } }
		r.decode(t, &out)
		if out.RevokeApiKey.ID != k.ID || out.RevokeApiKey.Status != "REVOKED" {
			t.Errorf("revocation %d: %+v", i, out)
		}
	}
	assertAudit(t, e, owner, []string{"CREATED", "REVOKED"}, []string{"api_key.created", "api_key.revoked"})
}
