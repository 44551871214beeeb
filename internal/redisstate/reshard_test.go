package redisstate

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/ratelimit"
	"github.com/btk-project/btk/internal/redisstate/redistest"
)

// load is key checks of one workspace run without pause by two instances
// while a test changes the Redis underneath. It records what a user would
// see: requests accepted per key, checks decided under a revision that a
// change answered before the check began had replaced (a revoked key
// accepted), and errors (503).
type load struct {
	t    *testing.T
	inst []*State
	lims []ratelimit.Limits // key i has lims[i]

	done     atomic.Int64 // checks answered, whatever the answer
	errs     atomic.Int64
	accepted []atomic.Int64

	mu      sync.Mutex
	changes [][2]time.Time // the changes answered (began, answered), each before the next began
	stale   []string       // violations
	lastErr error
}

// seen is a revision as a worker learned it: when its stale answer came.
type seen struct {
	rev btk.Revision
	at  time.Time
}

func (l *load) run(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			known := make([]seen, len(l.lims))
			for i := 0; ctx.Err() == nil; i++ {
				k := (w + i) % len(l.lims)
				l.check(ctx, l.inst[w%len(l.inst)], k, &known[k])
			}
		}()
	}
	wg.Wait()
}

func (l *load) check(ctx context.Context, s *State, k int, known *seen) {
	c := btk.KeyCheck{KeyID: fmt.Sprintf("k%d", k), WorkspacePrefix: ws[:8], Limits: l.lims[k], Now: time.Now(), Seen: known.rev}
	began := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	v, err := s.Allow(cctx, c)
	cancel()
	if ctx.Err() != nil {
		return // the test's end, not Redis
	}
	l.done.Add(1)
	switch {
	case err != nil:
		l.errs.Add(1)
		l.mu.Lock()
		l.lastErr = err
		l.mu.Unlock()
	case v.Stale:
		*known = seen{v.Current, time.Now()}
	default:
		if v.Allowed {
			l.accepted[k].Add(1)
		}
		l.mu.Lock()
		for _, ch := range l.changes {
			if ch[0].After(known.at) && ch[1].Before(began) {
				l.stale = append(l.stale, fmt.Sprintf("key %d decided (allowed=%v) under a revision learned at %v, before a change began (%v) and was answered (%v), before the check began at %v",
					k, v.Allowed, known.at.Format(time.StampMicro), ch[0].Format(time.StampMicro), ch[1].Format(time.StampMicro), began.Format(time.StampMicro)))
				break
			}
		}
		l.mu.Unlock()
	}
}

// progress waits (at most 20 s) until n more checks were answered.
func (l *load) progress(n int64) {
	l.t.Helper()
	from := l.done.Load()
	for deadline := time.Now().Add(20 * time.Second); l.done.Load() < from+n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			l.t.Fatalf("%d checks answered in 20 s, want %d", l.done.Load()-from, n)
		}
	}
}

// change is a revoke answered: Changed must succeed, and from its answer on
// no check may pass under a revision learned before it began.
func (l *load) change(s *State, stage string) {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	began := time.Now()
	if err := s.Changed(ctx, ws); err != nil {
		l.t.Errorf("%s: a revoke answered %v (UNAVAILABLE), while the cluster serves the workspace", stage, err)
		return
	}
	l.mu.Lock()
	l.changes = append(l.changes, [2]time.Time{began, time.Now()})
	l.mu.Unlock()
}

// A busy workspace's hash slot moves between two primaries, as redis-cli
// --cluster reshard moves it (SETSLOT IMPORTING and MIGRATING, MIGRATE of
// each key, SETSLOT NODE on every node), while two instances check its
// keys without pause and a third revokes at every step: no key is accepted
// beyond its limit, none under a revision a revoke answered before had
// replaced, every revoke is answered (it follows ASK and MOVED to the
// primary holding the token), the checks that cannot be served mid-move
// fail (503, never accepted), and every check answers again once the slot
// has moved (docs/clusters.md#resharding-a-redis-cluster).
func TestReshardUnderLoad(t *testing.T) {
	g := redistest.Cluster(t)
	a, b, admin := openAt(t, g.URL()), openAt(t, g.URL()), openAt(t, g.URL())
	slot := g.Slot(t, a.revKey(ws[:8]))
	src := g.Owner(t, slot)
	dst := g.Nodes[0]
	if dst == src {
		dst = g.Nodes[1]
	}
	// Keys 0-3 meet their day limit within the first checks: windows lost or
	// restarted in the move would let them pass again. Keys 4-7 are accepted
	// throughout: a stale revision would show.
	l := &load{t: t, inst: []*State{a, b}, accepted: make([]atomic.Int64, 8)}
	for i := range 8 {
		lim := ratelimit.Limits{PerMinute: 1 << 20, PerDay: 40}
		if i >= 4 {
			lim.PerDay = 1 << 30
		}
		l.lims = append(l.lims, lim)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); l.run(ctx, 8) }()
	defer func() { stop(); wg.Wait() }()

	l.progress(400)
	l.change(admin, "before the move")
	l.progress(100)
	dst.Do(t, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.ID(t))
	src.Do(t, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.ID(t))
	l.progress(100)
	l.change(admin, "slot open")
	keys, err := src.Client().ClusterGetKeysInSlot(context.Background(), slot, 100).Result()
	if err != nil || len(keys) != 9 {
		t.Fatalf("keys in the slot: %v %v", keys, err)
	}
	for i, key := range keys {
		src.Do(t, "MIGRATE", "127.0.0.1", dst.Port, key, 0, 5000)
		l.progress(10) // checks of keys on either side fail TRYAGAIN (and are retried)
		l.change(admin, fmt.Sprintf("%d of %d keys moved", i+1, len(keys)))
	}
	l.progress(10)
	for _, n := range []*redistest.Server{dst, src} {
		n.Do(t, "CLUSTER", "SETSLOT", slot, "NODE", dst.ID(t))
	}
	l.change(admin, "slot moved") // before any node but the two knows
	for _, n := range g.Nodes {
		if n != src && n != dst {
			n.Do(t, "CLUSTER", "SETSLOT", slot, "NODE", dst.ID(t))
		}
	}
	l.change(admin, "slot moved everywhere")
	// Every check answers again: 200 in a row without an error.
	for deadline := time.Now().Add(20 * time.Second); ; {
		errs := l.errs.Load()
		l.progress(200)
		if l.errs.Load() == errs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("checks still fail 20 s after the move: %v", l.lastErr)
		}
	}
	l.change(admin, "after the move")
	l.progress(200)
	stop()
	wg.Wait()

	for i := range 4 {
		if n := l.accepted[i].Load(); n > int64(l.lims[i].PerDay) {
			t.Errorf("key %d: %d requests accepted, over its day limit %d", i, n, l.lims[i].PerDay)
		}
	}
	for _, v := range l.stale {
		t.Error(v)
	}
	t.Logf("%d checks, %d failed (503), last error: %v", l.done.Load(), l.errs.Load(), l.lastErr)
}
