package redisstate

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/ratelimit"
	"github.com/btk-project/btk/internal/redisstate/redistest"
	"github.com/redis/go-redis/v9"
)

// A Redis that stops answering (SIGSTOP: it keeps its connections, as a
// hung server or a network that drops packets) while requests keep coming:
// every key check fails (503, never accepted) once it has waited the read
// timeout, whatever came before it, so what an instance holds — checks
// waiting, goroutines — is what arrives within one read timeout, not
// everything since Redis stopped. Once Redis answers again, checks are
// answered and nothing is left behind (docs/clusters.md#when-redis-stalls).
func TestStallFailsClosedWithinTheReadTimeout(t *testing.T) {
	srv := redistest.Standalone(t)
	s := openAt(t, srv.URL()) // read timeout 500 ms
	c := btk.KeyCheck{KeyID: "k", WorkspacePrefix: ws[:8], Limits: ratelimit.Limits{PerMinute: 1 << 30, PerDay: 1 << 30}, Now: time.Now()}
	c.Seen = current(t, s, c)
	base := runtime.NumGoroutine()

	srv.Stop()
	defer srv.Continue()
	const (
		ticks   = 80 // of 50 ms: 4 s, eight read timeouts
		perTick = 50
	)
	var waiting, accepted, failed atomic.Int64
	peakWaiting, peakGoroutines := 0, 0
	var wg sync.WaitGroup
	tick := time.NewTicker(50 * time.Millisecond)
	for range ticks {
		<-tick.C
		for range perTick {
			waiting.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer waiting.Add(-1)
				if _, err := s.Allow(context.Background(), c); err != nil {
					failed.Add(1)
				} else {
					accepted.Add(1)
				}
			}()
		}
		peakWaiting = max(peakWaiting, int(waiting.Load()))
		peakGoroutines = max(peakGoroutines, runtime.NumGoroutine()-base)
	}
	tick.Stop()
	// Still in the stall: every check launched ends, each with an error.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%d checks still waiting 20 s into the stall", waiting.Load())
	}
	t.Logf("peak: %d checks waiting, %d goroutines more than before; %d queued commands; pool %+v",
		peakWaiting, peakGoroutines, queued(s), *s.rdb.PoolStats())
	if n := accepted.Load(); n != 0 {
		t.Fatalf("%d checks accepted while Redis answered nothing", n)
	}
	// Without a bound on each wait, every check launched waits for the
	// batches before its own: nearly all of them at once (4,000).
	if limit := ticks * perTick / 3; peakWaiting > limit || peakGoroutines > limit+50 {
		t.Fatalf("%d checks (%d goroutines) waiting at once of %d launched over eight read timeouts: the waits are not bounded by the read timeout",
			peakWaiting, peakGoroutines, ticks*perTick)
	}

	srv.Continue()
	for deadline := time.Now().Add(20 * time.Second); ; {
		v, err := s.Allow(context.Background(), c)
		if err == nil && v.Allowed {
			break
		}
		if err == nil && v.Stale { // read again, as the service does: the epoch moved in the stall
			c.Seen = v.Current
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after Redis woke up: %+v %v", v, err)
		}
	}
	// The commands left queued run or fail; the goroutines are gone.
	for deadline := time.Now().Add(20 * time.Second); queued(s) > 0 || runtime.NumGoroutine() > base+10; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("20 s after Redis woke up: %d commands queued, %d goroutines (%d before)", queued(s), runtime.NumGoroutine(), base)
		}
	}
}

// Requests keep coming while Redis stalls, faster than the read timeout
// fails them: the checks waiting for Redis stop at the pipeline's bound
// (maxQueued; here a smaller one), and every check past it fails at once
// (503, never accepted) instead of adding to what the instance holds. Once
// Redis answers again, the queue empties and checks are answered
// (docs/clusters.md#when-redis-stalls).
func TestStalledQueueIsBounded(t *testing.T) {
	srv := redistest.Standalone(t)
	const bound = 64
	// A read timeout of 5 s: every check below submits well within it,
	// before the batch in flight fails and frees its places.
	s, err := openQueued(srv.URL()+"?read_timeout=5s", "btktest:", bound)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c := btk.KeyCheck{KeyID: "k", WorkspacePrefix: ws[:8], Limits: ratelimit.Limits{PerMinute: 1 << 30, PerDay: 1 << 30}, Now: time.Now()}
	c.Seen = current(t, s, c)

	srv.Stop()
	defer srv.Continue()
	const n = bound + 500
	accepted, refusedAtOnce, failed := burst(t, s, c, n, func(err error) bool { return errors.Is(err, redis.ErrAutoPipelineQueueFull) })
	t.Logf("%d checks in a stall: %d refused at once, %d failed waiting; %d commands queued", n, refusedAtOnce, failed, queued(s))
	if a := accepted; a != 0 {
		t.Fatalf("%d checks accepted while Redis answered nothing", a)
	}
	// The pipeline keeps its commands until the batch in flight fails
	// (go-redis's read timeout), whatever the checks' deadlines: without
	// the bound every check would have been queued and waited.
	if q := queued(s); q > bound || failed > bound || refusedAtOnce < n-bound {
		t.Fatalf("%d commands queued, %d checks waited, %d refused at once: want at most %d queued and waiting, the rest refused",
			q, failed, refusedAtOnce, bound)
	}

	srv.Continue()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		v, err := s.Allow(context.Background(), c)
		if err == nil && v.Allowed && queued(s) == 0 {
			break
		}
		if err == nil && v.Stale {
			c.Seen = v.Current
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after Redis woke up: %+v %v, %d queued", v, err, queued(s))
		}
	}
}

// queued is the number of commands s's pipeline holds.
func queued(s *State) int {
	if b, ok := s.checks.(*bounded); ok {
		return b.ap.Len()
	}
	return 0
}

// One primary of a Redis Cluster stops answering (SIGSTOP): the checks of
// its workspaces fail (503), and those of the other primaries' workspaces
// go on being answered, none failing — the stalled primary's checks do not
// share a batch, or a wait, with theirs (docs/clusters.md#when-redis-stalls).
// (The node timeout is long enough for the cluster not to declare itself
// down meanwhile. The read timeout is 2 s, not the default 500 ms: a check
// held up by the stalled primary never gets its answer, so it fails at any
// read timeout, while a healthy primary on a loaded two-core CI machine —
// the race detector, three Redis servers, other packages' tests — once
// took longer than 375 ms, the shortest shared deadline, to answer.)
func TestStalledShardLeavesOthersServing(t *testing.T) {
	g := redistest.Cluster(t, "cluster-node-timeout 60000")
	s := openAt(t, g.URL()+"?read_timeout=2s")
	stalled := g.Nodes[0]
	var healthy, sick []btk.KeyCheck
	for i := 0; len(healthy) < 32 || len(sick) < 8; i++ {
		wp := fmt.Sprintf("%08x", i)
		c := btk.KeyCheck{KeyID: "k", WorkspacePrefix: wp, Limits: ratelimit.Limits{PerMinute: 1 << 30, PerDay: 1 << 30}, Now: time.Now()}
		c.Seen = current(t, s, c)
		if g.Owner(t, g.Slot(t, s.revKey(wp))) == stalled {
			sick = append(sick, c)
		} else {
			healthy = append(healthy, c)
		}
	}
	stalled.Stop()
	defer stalled.Continue()
	const want = 3000 // answers on the healthy primaries
	var answered, failed, sickAccepted, sickFailed atomic.Int64
	var lastErr atomic.Value
	var wg sync.WaitGroup
	deadline := time.Now().Add(30 * time.Second)
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; answered.Load() < want && time.Now().Before(deadline); i++ {
				if w < 4 {
					if _, err := s.Allow(context.Background(), sick[i%len(sick)]); err != nil {
						sickFailed.Add(1)
					} else {
						sickAccepted.Add(1)
					}
					continue
				}
				if _, err := s.Allow(context.Background(), healthy[i%len(healthy)]); err != nil {
					failed.Add(1)
					lastErr.Store(err)
				}
				answered.Add(1)
			}
		}()
	}
	wg.Wait()
	t.Logf("healthy primaries: %d checks, %d failed; stalled primary: %d failed", answered.Load(), failed.Load(), sickFailed.Load())
	if n := sickAccepted.Load(); n != 0 {
		t.Fatalf("%d checks accepted on the stalled primary", n)
	}
	if answered.Load() < want || failed.Load() != 0 {
		t.Fatalf("the healthy primaries answered %d checks (want %d), %d of them failed (last: %v): one stalled primary held up the others",
			answered.Load(), want, failed.Load(), lastErr.Load())
	}
}

// TestRedirectedCheckToAStalledPrimary: a key check whose primary answers
// MOVED to a primary that has stalled is sent again through go-redis's
// cluster client, which tries it up to four times, each retried once after
// a read timeout (1.6 s here before the bound). The check's wait is bounded
// by one read timeout from its start, redirect included: it fails then
// (503, never accepted) with the bound's error while the cluster client
// still waits for the primary — not with go-redis's own error once its
// retries are spent — and the command left with the cluster client ends
// once the primary answers again (docs/clusters.md#when-redis-stalls).
func TestRedirectedCheckToAStalledPrimary(t *testing.T) {
	s, c, dst := movedToAStalledPrimary(t)
	const readTimeout = 500 * time.Millisecond
	start := time.Now()
	v, err := s.Allow(context.Background(), c)
	following := s.checks.(*perPrimary).following
	stillWaiting := len(following)
	t.Logf("redirected to a stalled primary: %v after %v, %d redirected commands still with the cluster client", err, time.Since(start), stillWaiting)
	if err == nil {
		t.Fatalf("answered %+v by a stalled primary", v)
	}
	if want := fmt.Sprintf("no answer from Redis within %v", readTimeout); !strings.Contains(err.Error(), want) || stillWaiting != 1 {
		t.Errorf("failed with %q, %d redirected commands still waiting: want %q while the cluster client still waits (1): the check waited for go-redis's retries, not one read timeout",
			err, stillWaiting, want)
	}
	dst.Continue()
	for deadline := time.Now().Add(20 * time.Second); len(following) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("20 s after the primary woke up: %d redirected commands still waiting", len(following))
		}
	}
}

// movedToAStalledPrimary opens an instance on a Redis Cluster of the test's
// own (read timeout 500 ms) and returns a key check whose workspace's slot
// the instance's slot map still gives to a primary that now answers MOVED,
// to dst, which has stalled (SIGSTOP; it answers again when the test ends).
func movedToAStalledPrimary(t *testing.T) (*State, btk.KeyCheck, *redistest.Server) {
	t.Helper()
	g := redistest.Cluster(t, "cluster-node-timeout 60000")
	s := openAt(t, g.URL())
	// A workspace with no keys yet, on another primary than dst: its slot
	// can be given to dst at once.
	dst := g.Nodes[1]
	var c btk.KeyCheck
	var src *redistest.Server
	var slot int
	for i := 0; ; i++ {
		c = btk.KeyCheck{KeyID: "k", WorkspacePrefix: fmt.Sprintf("m%07x", i), Limits: ratelimit.Limits{PerMinute: 1 << 30, PerDay: 1 << 30}, Now: time.Now()}
		slot = g.Slot(t, s.revKey(c.WorkspacePrefix))
		if src = g.Owner(t, slot); src != dst {
			break
		}
	}
	src.Do(t, "CLUSTER", "SETSLOT", slot, "NODE", dst.ID(t))
	dst.Stop()
	t.Cleanup(dst.Continue)
	return s, c, dst
}

// Checks redirected to a stalled primary leave at most maxFollowing (here
// a smaller bound) commands (a goroutine each) with the cluster client once they have
// failed: past it a redirected check fails at once, so a burst of requests
// during a slot move to a hung primary cannot pile up goroutines without
// end. Once the primary answers again nothing is left
// (docs/clusters.md#when-redis-stalls).
func TestRedirectedChecksAreBounded(t *testing.T) {
	s, c, dst := movedToAStalledPrimary(t)
	// A smaller bound than maxFollowing, set before any check: the race
	// detector allows 8,128 goroutines at once, fewer than maxFollowing's
	// commands and the checks beyond them.
	const bound = 256
	s.checks.(*perPrimary).following = make(chan struct{}, bound)
	following := s.checks.(*perPrimary).following
	base := runtime.NumGoroutine()
	const n = bound + 1000
	accepted, refusedAtOnce, failed := burst(t, s, c, n, func(err error) bool {
		return strings.Contains(err.Error(), "redirected commands still waiting")
	})
	left := runtime.NumGoroutine() - base
	t.Logf("%d checks: %d refused at once, %d failed waiting; %d goroutines left, %d redirected commands with the cluster client",
		n, refusedAtOnce, failed, left, len(following))
	if a := accepted; a != 0 {
		t.Fatalf("%d checks accepted by a stalled primary", a)
	}
	// Without the bound, every redirected check leaves its command behind.
	if left > bound+64 {
		t.Fatalf("%d goroutines left behind by %d failed checks: more than the %d redirected commands the bound allows",
			left, n, bound)
	}
	dst.Continue()
	for deadline := time.Now().Add(30 * time.Second); len(following) > 0 || runtime.NumGoroutine() > base+10; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the primary woke up: %d redirected commands, %d goroutines (%d before)", len(following), runtime.NumGoroutine(), base)
		}
	}
}

// burst runs n key checks c on s at once and counts them: accepted, refused
// at once (refused says which errors are), and failed otherwise (waited).
// It fails t if they have not all ended 30 s later.
func burst(t *testing.T, s *State, c btk.KeyCheck, n int, refused func(error) bool) (accepted, refusedAtOnce, failed int64) {
	t.Helper()
	var a, r, f atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			_, err := s.Allow(context.Background(), c)
			switch {
			case err == nil:
				a.Add(1)
			case refused(err):
				r.Add(1)
			default:
				f.Add(1)
			}
		})
	}
	close(start)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d checks: still waiting 30 s after they were sent", n)
	}
	return a.Load(), r.Load(), f.Load()
}
