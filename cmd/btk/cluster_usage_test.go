package main

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
)

// docs/usage.md: N requests spread over two instances
// (PostgreSQL + Redis) show exactly N in the key's counters; rate-limited
// and refused (revoked key) requests land in their columns; both instances
// stopped (SIGTERM) and one started again lose nothing that was answered
// before the shutdown began.
func TestClusterUsageCounts(t *testing.T) {
	db, flags := sharedCluster(t)
	procs := startCluster(t, 2, db, flags...)
	bases := []string{procs[0].url, procs[1].url}
	token := loginAt(t, bases[0])

	counted := createKeyAt(t, bases[0], token, "counted", 0)
	var lim struct {
		CreateApiKey struct {
			PlaintextKey string
			ApiKey       struct{ ID string }
		}
	}
	mustCall(t, bases[1], token, `mutation{createApiKey(input:{name:"limited",rateLimitPerDay:10}){plaintextKey apiKey{id}}}`, nil, &lim)
	dead := createKeyAt(t, bases[1], token, "dead", 0)
	mustCall(t, bases[0], token, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": dead.ID}, &struct{}{})

	// Concurrent requests over both instances; each answer is tallied.
	send := func(key string, n int) (ok, limited, refused int64) {
		var o, l, r, other atomic.Int64
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i := range n {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				a, err := call(bases[i%2], "", key, probeQuery, nil)
				switch {
				case err != nil:
					other.Add(1)
				case a.status == http.StatusOK:
					o.Add(1)
				case a.status == http.StatusTooManyRequests:
					l.Add(1)
				case a.status == http.StatusUnauthorized:
					r.Add(1)
				default:
					other.Add(1)
				}
			})
		}
		wg.Wait()
		if other.Load() > 0 {
			t.Fatalf("%d unexpected answers", other.Load())
		}
		return o.Load(), l.Load(), r.Load()
	}
	const N = 300
	if ok, _, _ := send(counted.Plaintext, N); ok != N {
		t.Fatalf("%d of %d accepted", ok, N)
	}
	limOK, limLimited, _ := send(lim.CreateApiKey.PlaintextKey, 30)
	if limOK != 10 || limLimited != 20 {
		t.Fatalf("limited key: %d accepted, %d rate-limited; want 10 and 20", limOK, limLimited)
	}
	if _, _, refused := send(dead.Plaintext, 7); refused != 7 {
		t.Fatalf("revoked key: %d refused", refused)
	}

	// Both stop (the shutdown flush), one starts again on the same database.
	for _, p := range procs {
		if err := p.stop(); err != nil {
			t.Fatalf("stop: %v\n%s", err, p.Out.String())
		}
	}
	again := startServe(t, db, flags...)
	token = loginAt(t, again.url)
	total := func(id string) (acc, limited, refused int) {
		var out struct {
			ApiKey struct {
				Usage []struct{ Accepted, RateLimited, Refused int }
			}
		}
		mustCall(t, again.url, token, `query($id:ID!){apiKey(id:$id){usage(granularity:HOUR){accepted rateLimited refused}}}`, map[string]any{"id": id}, &out)
		for _, p := range out.ApiKey.Usage {
			acc, limited, refused = acc+p.Accepted, limited+p.RateLimited, refused+p.Refused
		}
		return
	}
	for _, c := range []struct {
		name              string
		id                string
		acc, lim, refused int
	}{
		{"counted", counted.ID, N, 0, 0},
		{"limited", lim.CreateApiKey.ApiKey.ID, 10, 20, 0},
		{"dead", dead.ID, 0, 0, 7},
	} {
		a, l, r := total(c.id)
		if a != c.acc || l != c.lim || r != c.refused {
			t.Errorf("%s: accepted %d, rate-limited %d, refused %d; want %d, %d, %d", c.name, a, l, r, c.acc, c.lim, c.refused)
		}
	}
}
