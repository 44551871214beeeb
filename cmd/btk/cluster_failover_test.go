package main

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/redisstate/redistest"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
)

// A Sentinel failover under load (docs/clusters.md#failover): keys
// revoked on three instances, the primary killed right after the last
// revoke answered, the sentinels promote the replica. No revoked key is
// ever accepted again on any instance — during the failover or after — and
// the instances serve again by themselves. An instance pointed at the old
// primary alone (redis://, no Sentinel) fails closed once it is back as a
// replica: its key checks answer 503 and its /readyz fails.
func TestClusterSentinelFailover(t *testing.T) {
	skipIfShort(t, "starts btk serve, redis-server and redis-sentinel processes")
	g := redistest.Sentinels(t)
	db := pgtest.URL(t)
	procs := startCluster(t, 3, db, "--redis", g.URL())
	bases := []string{procs[0].url, procs[1].url, procs[2].url}
	// The fourth follows the primary's own address, not the sentinels.
	direct := startServe(t, db, "--redis", g.Primary.URL())
	token := loginAt(t, bases[0])

	var victims []procKey
	for i := range 6 {
		victims = append(victims, createKeyAt(t, bases[i%3], token, fmt.Sprintf("victim%d", i), 0))
	}
	var loadKey atomic.Value
	loadKey.Store(createKeyAt(t, bases[0], token, "load", 0).Plaintext)
	for _, b := range append(bases, direct.url) { // cached and verified everywhere
		for _, k := range victims {
			accepted(t, b, k.Plaintext, "a new key")
		}
	}
	l := startLoad(func() []string { return bases }, &loadKey, 2)
	defer l.end()

	// Every key revoked so far is probed on every instance, without pause,
	// until the end: one 200 is a revocation lost.
	var revoked atomic.Int64
	var leaked atomic.Int64
	var leak atomic.Value
	stop := make(chan struct{})
	var probes sync.WaitGroup
	for w := range 3 {
		probes.Go(func() {
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := int(revoked.Load())
				if n == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				k := victims[i%n]
				a, err := call(bases[i%3], "", k.Plaintext, probeQuery, nil)
				if err == nil && a.status == 200 {
					leaked.Add(1)
					leak.Store(fmt.Sprintf("%s on %s", k.ID, bases[i%3]))
				}
			}
		})
	}
	defer func() { close(stop); probes.Wait() }()

	for i, k := range victims {
		mustCall(t, bases[i%3], token, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": k.ID}, nil)
		revoked.Store(int64(i + 1))
	}
	g.Primary.Kill() // right after the last revoke answered
	g.WaitPromoted(t)

	// Every instance serves again by itself (bounded).
	deadline := time.Now().Add(30 * time.Second)
	for _, b := range bases {
		for {
			a, err := call(b, "", loadKey.Load().(string), probeQuery, nil)
			if err == nil && a.status == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s does not serve after the failover: %+v %v", b, a, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, b := range bases {
		for _, k := range victims {
			if a, err := call(b, "", k.Plaintext, probeQuery, nil); err != nil || a.status != http.StatusUnauthorized {
				t.Fatalf("a key revoked before the failover, on %s after it: %+v %v", b, a, err)
			}
		}
		readyAgain(t, b, deadline)
	}
	// A revoke after the failover holds too.
	late := createKeyAt(t, bases[1], token, "late", 0)
	for _, b := range bases {
		accepted(t, b, late.Plaintext, "a new key after the failover")
	}
	mustCall(t, bases[2], token, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": late.ID}, nil)
	for _, b := range bases {
		if a, err := call(b, "", late.Plaintext, probeQuery, nil); err != nil || a.status != http.StatusUnauthorized {
			t.Fatalf("a key revoked after the failover, on %s: %+v %v", b, a, err)
		}
	}

	// The old primary comes back (empty: no persistence) and the sentinels
	// make it a replica of the new one.
	g.Primary.Restart()
	g.Primary.WaitRole(t, "slave")
	for _, k := range []procKey{victims[0], {Plaintext: loadKey.Load().(string)}} {
		if a, err := call(direct.url, "", k.Plaintext, probeQuery, nil); err != nil || a.status != http.StatusServiceUnavailable || a.code != "UNAVAILABLE" {
			t.Fatalf("an instance on the old primary, back as a replica: %+v %v", a, err)
		}
	}
	if code := readyzStatus(t, direct.url); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz of an instance on the old primary, back as a replica: %d", code)
	}

	close(stop)
	probes.Wait()
	stop = make(chan struct{}) // the deferred close is of a fresh channel
	if n := leaked.Load(); n > 0 {
		t.Fatalf("%d requests with revoked keys answered 200 (last: %v)", n, leak.Load())
	}
	l.end()
	l.stop = make(chan struct{})
	t.Logf("load meanwhile: %d requests, %d answered other than 200/401/429 (fail closed during the failover)", l.sent.Load(), l.unusual.Load())
}
