package redisstate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/ratelimit"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// current returns the revision to present for a workspace prefix, as an
// instance learns it from its first (stale) answer.
func current(t *testing.T, s *State, c btk.KeyCheck) btk.Revision {
	t.Helper()
	v, err := s.Allow(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Stale {
		t.Fatalf("a zero revision was accepted: %+v", v)
	}
	return v.Current
}

// The script answers exactly what the in-memory limiter answers, decision
// for decision, headers included: the same sequences of requests (bursts,
// refills, limit changes, clock steps back, stored day states, limits out of
// range) are fed to both.
func TestScriptMatchesLimiter(t *testing.T) {
	url := testURL(t)
	s := open(t, url, testPrefix(t, url))
	var now time.Time
	s.now = func() time.Time { return now }
	ctx := context.Background()

	limits := []ratelimit.Limits{
		{PerMinute: 1, PerDay: 1 << 30}, {PerMinute: 7, PerDay: 1 << 30}, {PerMinute: 600, PerDay: 100000},
		{PerMinute: 250007, PerDay: 1 << 30}, {PerMinute: 1 << 30, PerDay: 1}, {PerMinute: 1 << 30, PerDay: 7},
		{PerMinute: 5, PerDay: 9}, {PerMinute: 3, PerDay: 100000}, {PerMinute: 0, PerDay: -4},
		{PerMinute: 1 << 50, PerDay: 1 << 45},
	}
	steps := []time.Duration{0, 0, 0, time.Nanosecond, time.Millisecond, 99 * time.Millisecond,
		time.Second, 7 * time.Second, time.Minute, time.Hour, -time.Second, -2 * time.Minute, 25 * time.Hour}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 12 {
		mem := ratelimit.New()
		now = t0.Add(time.Duration(round) * 48 * time.Hour)
		lim := limits[round%len(limits)]
		keyID := fmt.Sprintf("k%d", round)
		var dayState int64
		if round%3 == 2 {
			dayState = now.Add(time.Duration(rng.IntN(30)) * time.Hour).UnixNano() // some from the future
		}
		c := btk.KeyCheck{KeyID: keyID, WorkspacePrefix: "0123abcd", DayState: dayState}
		c.Seen = current(t, s, c)
		var lastDay int64 // the limiter's day state at its latest accepted request
		for i := range 400 {
			if rng.IntN(50) == 0 {
				lim = limits[rng.IntN(len(limits))]
			}
			now = now.Add(steps[rng.IntN(len(steps))] + time.Duration(rng.IntN(1000)))
			c.Limits, c.Now = lim, now
			want := mem.Allow(keyID, lim, now, dayState)
			got, err := s.Allow(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			if got.Stale || got.Decision != want {
				t.Fatalf("round %d request %d (%+v at %v): script %+v, limiter %+v", round, i, lim, now.Sub(t0), got, want)
			}
			if st := mem.Dirty(); want.Allowed {
				lastDay = st[len(st)-1].DayState
			}
		}
		// The day state reported for the database is the limiter's at the
		// latest accepted request (FlushUsage persists no other).
		if st := s.Dirty(); len(st) != 1 || st[0].DayState != lastDay {
			t.Fatalf("round %d: day state %+v, limiter %d", round, st, lastDay)
		}
	}
}

// N concurrent requests for one key, spread over three instances (each its
// own connection pool) against a limit L, accept exactly L; a refusal by
// the minute window consumes nothing of the day window.
func TestScriptExactUnderConcurrency(t *testing.T) {
	url := testURL(t)
	prefix := testPrefix(t, url)
	// One fixed clock for all: with the server's, a slow run (-race) would
	// see the minute window refill during the burst.
	now := time.Now()
	var inst [3]*State
	for i := range inst {
		inst[i] = open(t, url, prefix)
		inst[i].UseClock(func() time.Time { return now })
	}
	const L, N = 50, 600
	c := btk.KeyCheck{KeyID: "key", WorkspacePrefix: "0123abcd", Limits: ratelimit.Limits{PerMinute: L, PerDay: 1000}, Now: time.Now()}
	var seen [3]btk.Revision // each instance's own epoch
	for i := range inst {
		seen[i] = current(t, inst[i], c)
	}
	var accepted, refused atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, N)
	for i := range N {
		wg.Go(func() {
			c := c
			c.Seen = seen[i%3]
			v, err := inst[i%3].Allow(context.Background(), c)
			switch {
			case err != nil:
				errs <- err
			case v.Stale:
				errs <- fmt.Errorf("stale: %+v", v)
			case v.Allowed:
				accepted.Add(1)
			default:
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if accepted.Load() != L || refused.Load() != N-L {
		t.Fatalf("accepted %d, refused %d of %d against %d", accepted.Load(), refused.Load(), N, L)
	}
	// The day window counted only the accepted ones.
	c.Limits.PerMinute = 1 << 30
	now = now.Add(time.Second) // the minute window is spent: its TAT is one minute ahead
	c.Seen = seen[1]
	v, err := inst[1].Allow(context.Background(), c)
	if err != nil || !v.Allowed || v.Limit != 1000 || v.Remaining != 1000-L-1 {
		t.Fatalf("after the burst: %+v, %v (want day remaining %d)", v, err, 1000-L-1)
	}
}

// A change on one instance makes the next check of every other instance
// stale, whatever it cached; so does the loss of Redis's data (a token
// missing is made anew), and nothing is counted for a stale check.
func TestRevisionAndEpoch(t *testing.T) {
	a, b := instances(t)
	ctx := context.Background()
	c := btk.KeyCheck{KeyID: "key", WorkspacePrefix: ws[:8], Limits: ratelimit.Limits{PerMinute: 2, PerDay: 10}, Now: time.Now()}
	c.Seen = current(t, b, c)
	if v, err := b.Allow(ctx, c); err != nil || !v.Allowed || v.Remaining != 1 {
		t.Fatalf("first request: %+v %v", v, err)
	}
	if err := a.Changed(ctx, ws); err != nil {
		t.Fatal(err)
	}
	v, err := b.Allow(ctx, c)
	if err != nil || !v.Stale || v.Current.Epoch != c.Seen.Epoch || v.Current.Token == c.Seen.Token {
		t.Fatalf("after a change elsewhere: %+v %v (seen %+v)", v, err, c.Seen)
	}
	c.Seen = v.Current
	if v, err := b.Allow(ctx, c); err != nil || !v.Allowed || v.Remaining != 0 {
		t.Fatalf("the stale check counted: %+v %v", v, err)
	}
	// Redis loses everything: the token is made again, unlike the one seen.
	if err := wipe(ctx, a); err != nil {
		t.Fatal(err)
	}
	v, err = b.Allow(ctx, c)
	if err != nil || !v.Stale || v.Current.Epoch != c.Seen.Epoch || v.Current.Token == "" || v.Current.Token == c.Seen.Token {
		t.Fatalf("after the loss: %+v %v (seen %+v)", v, err, c.Seen)
	}
	// Another instance finds the token the first one made.
	if v2, err := a.Allow(ctx, c); err != nil || !v2.Stale || v2.Current.Token != v.Current.Token {
		t.Fatalf("second instance after the loss: %+v %v, want %+v", v2, err, v.Current)
	}
	// The revision alone is lost (evicted; a replica that never had it):
	// a record read under the old token must be read again, never pass.
	c.Seen = v.Current
	if v, err := b.Allow(ctx, c); err != nil || v.Stale {
		t.Fatalf("with the current revision: %+v %v", v, err)
	}
	if err := a.rdb.Del(ctx, a.revKey(ws[:8])).Err(); err != nil {
		t.Fatal(err)
	}
	v, err = b.Allow(ctx, c)
	if err != nil || !v.Stale || v.Current.Epoch != c.Seen.Epoch || v.Current.Token == "" || v.Current.Token == c.Seen.Token {
		t.Fatalf("after the revision was lost: %+v %v (seen %+v)", v, err, c.Seen)
	}
}

// Current answers the revision a key check would find — made when missing,
// moved by a change elsewhere — and counts nothing.
func TestCurrentCountsNothing(t *testing.T) {
	a, b := instances(t)
	ctx := context.Background()
	rev := func(s *State) btk.Revision {
		t.Helper()
		r, err := s.Current(ctx, ws[:8])
		if err != nil || r.Token == "" {
			t.Fatalf("Current: %+v %v", r, err)
		}
		return r
	}
	r := rev(b) // the token is made
	if r2 := rev(b); r2 != r {
		t.Fatalf("Current moved with nothing changed: %+v, then %+v", r, r2)
	}
	c := btk.KeyCheck{KeyID: "key", WorkspacePrefix: ws[:8], Limits: ratelimit.Limits{PerMinute: 1, PerDay: 10}, Now: time.Now(), Seen: r}
	for range 10 {
		rev(b)
	}
	if v, err := b.Allow(ctx, c); err != nil || v.Stale || !v.Allowed {
		t.Fatalf("a check under Current's revision, after 10 more: %+v %v (want the one request a minute allowed)", v, err)
	}
	if err := a.Changed(ctx, ws); err != nil {
		t.Fatal(err)
	}
	if r2 := rev(b); r2.Token == r.Token || r2.Epoch != r.Epoch {
		t.Fatalf("Current after a change elsewhere: %+v, was %+v", r2, r)
	}
}

// Password attempts are counted once for all instances.
func TestThrottleShared(t *testing.T) {
	sa, sb := instances(t)
	a, b := sa.Throttle(), sb.Throttle()
	lim := ratelimit.Limits{PerMinute: 3, PerDay: 100}
	var got []bool
	for i := range 5 {
		th := a
		if i%2 == 1 {
			th = b
		}
		d, err := th.Allow(context.Background(), "account:someone@example.com", lim, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Allowed)
		// 3 a minute: a refused attempt is told to wait up to 20 s.
		if !d.Allowed && (d.RetryAfter <= 0 || d.RetryAfter > 20*time.Second) {
			t.Fatalf("refused attempt %d: retry after %v, want in (0, 20s]", i, d.RetryAfter)
		}
	}
	if fmt.Sprint(got) != "[true true true false false]" {
		t.Fatalf("attempts over two instances: %v", got)
	}
	if err := b.Forget(context.Background(), "account:someone@example.com"); err != nil {
		t.Fatal(err)
	}
	if d, err := a.Allow(context.Background(), "account:someone@example.com", lim, time.Now()); err != nil || !d.Allowed {
		t.Fatalf("after Forget on the other instance: %v %v", d, err)
	}
}

// Redis unreachable: an error (the service answers 503), never a decision.
func TestUnreachable(t *testing.T) {
	s, err := Open("redis://127.0.0.1:1/0", "x:")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := s.Allow(ctx, btk.KeyCheck{KeyID: "k", WorkspacePrefix: "01234567", Limits: ratelimit.Limits{PerMinute: 1, PerDay: 1}})
	if err == nil {
		t.Fatalf("decision without Redis: %+v", v)
	}
	if s.Ping(ctx) == nil {
		t.Fatal("ping answered")
	}
}

// A key's windows expire from Redis once both are full again (plus a
// second), on the server's clock: a used key costs memory for at most a day.
func TestWindowsExpireWhenFull(t *testing.T) {
	url := testURL(t)
	s := open(t, url, testPrefix(t, url))
	ctx := context.Background()
	c := btk.KeyCheck{KeyID: "key", WorkspacePrefix: "0123abcd", Limits: ratelimit.Limits{PerMinute: 60, PerDay: 1 << 30}, Now: time.Now()}
	c.Seen = current(t, s, c)
	for i := range 30 {
		if v, err := s.Allow(ctx, c); err != nil || !v.Allowed {
			t.Fatalf("request %d: %+v, %v", i, v, err)
		}
	}
	// 30 requests at one a second fill the minute window 30 s ahead.
	_, rl, _ := s.checkStrings(c.WorkspacePrefix, c.KeyID, 0, 0, 0)
	ttl, err := s.rdb.PTTL(ctx, rl).Result()
	if err != nil || ttl <= 25*time.Second || ttl > 31*time.Second {
		t.Fatalf("the windows expire in %v (%v), want 30 s + 1 s less the test's own time", ttl, err)
	}
}
