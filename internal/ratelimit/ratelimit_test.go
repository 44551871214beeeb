package ratelimit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	minute = time.Minute
	day    = 24 * time.Hour
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// burst sends requests at now until the first rejection (or max accepted)
// and returns how many were accepted and the rejecting decision.
func burst(t *testing.T, l *Limiter, key string, lim Limits, now time.Time, max int) (int, Decision) {
	t.Helper()
	var d Decision
	for n := 0; ; n++ {
		if n == max {
			return n, d
		}
		if d = l.Allow(key, lim, now, 0); !d.Allowed {
			return n, d
		}
	}
}

// peek returns what each window would accept at now, without changing state.
func (l *Limiter) peek(key string, lim Limits, now time.Time) (minRem, dayRem int64, ok bool) {
	s := l.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[key]
	if e == nil {
		return 0, 0, false
	}
	t := now.UnixNano()
	m, d := e.min, e.day
	m.prepare(t, minutePeriod, clampLimit(lim.PerMinute))
	d.prepare(t, dayPeriod, clampLimit(lim.PerDay))
	return m.remaining(t, minutePeriod), d.remaining(t, dayPeriod), true
}

// ceilDiv returns ceil(period/limit) as a duration.
func ceilDiv(period time.Duration, limit int) time.Duration {
	return (period + time.Duration(limit) - 1) / time.Duration(limit)
}

// windowCases exercise one window at a time; the other one is wide open.
var windowCases = []struct {
	name   string
	lim    Limits
	limit  int
	period time.Duration
}{
	{"minute/1", Limits{1, 1 << 30}, 1, minute},
	{"minute/7", Limits{7, 1 << 30}, 7, minute},
	{"minute/60", Limits{60, 1 << 30}, 60, minute},
	{"minute/600", Limits{600, 1 << 30}, 600, minute},
	// 60s/250007 is not a whole number of ns and 250007² > 60e9: a limiter
	// that rounded the emission interval to whole ns would accept more.
	{"minute/250007", Limits{250007, 1 << 30}, 250007, minute},
	{"day/1", Limits{1 << 30, 1}, 1, day},
	{"day/7", Limits{1 << 30, 7}, 7, day},
	{"day/100", Limits{1 << 30, 100}, 100, day},
	{"day/100000", Limits{1 << 30, 100000}, 100000, day},
}

func TestBurstRefillReplenish(t *testing.T) {
	for _, tc := range windowCases {
		t.Run(tc.name, func(t *testing.T) {
			l := New()
			const key = "k"
			L := tc.limit

			// A burst of exactly L, counting Remaining down.
			for i := range L {
				d := l.Allow(key, tc.lim, t0, 0)
				if !d.Allowed || d.Limit != L || d.Remaining != L-1-i || d.RetryAfter != 0 {
					t.Fatalf("request %d: %+v", i+1, d)
				}
			}
			d := l.Allow(key, tc.lim, t0, 0)
			if d.Allowed || d.Remaining != 0 || d.Limit != L {
				t.Fatalf("request L+1: %+v", d)
			}
			if d.Reset != tc.period {
				t.Fatalf("Reset after a full burst = %v, want %v", d.Reset, tc.period)
			}
			// Refill: one request after period/L (rounded up to a ns), not before.
			step := ceilDiv(tc.period, L)
			if d.RetryAfter != step {
				t.Fatalf("RetryAfter = %v, want %v", d.RetryAfter, step)
			}
			if d := l.Allow(key, tc.lim, t0.Add(step-1), 0); d.Allowed {
				t.Fatalf("accepted 1ns before the refill: %+v", d)
			}
			if d := l.Allow(key, tc.lim, t0.Add(step), 0); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("refill not accepted: %+v", d)
			}
			if d := l.Allow(key, tc.lim, t0.Add(step), 0); d.Allowed {
				t.Fatalf("second request after one refill accepted: %+v", d)
			}

			// Exhausted now with TAT = t0 + period + period/L. One period
			// later less than L is back; at TAT everything is back.
			full := t0.Add(tc.period + tc.period/time.Duration(L))
			if tc.period%time.Duration(L) != 0 {
				full = full.Add(1)
			}
			if L > 1 {
				n, _ := burst(t, l, key, tc.lim, full.Add(-1), 2*L)
				if n != L-1 {
					t.Fatalf("1ns before full replenish: burst %d, want %d", n, L-1)
				}
				l.Forget(key)
				burst(t, l, key, tc.lim, t0, L)
				l.Allow(key, tc.lim, t0.Add(step), 0)
			}
			if n, d := burst(t, l, key, tc.lim, full, 2*L); n != L || d.Allowed {
				t.Fatalf("after full replenish: burst %d, want %d", n, L)
			}
		})
	}
}

func TestWindowsDoNotConsumeEachOther(t *testing.T) {
	t.Run("minute exhausted, day not consumed", func(t *testing.T) {
		l := New()
		lim := Limits{PerMinute: 5, PerDay: 8}
		if n, _ := burst(t, l, "k", lim, t0, 100); n != 5 {
			t.Fatalf("burst %d", n)
		}
		for i := range 100 {
			if d := l.Allow("k", lim, t0.Add(time.Duration(i)*time.Millisecond), 0); d.Allowed {
				t.Fatal("accepted beyond the minute limit")
			}
		}
		if _, dayRem, _ := l.peek("k", lim, t0.Add(time.Second)); dayRem != 3 {
			t.Fatalf("day remaining %d, want 3", dayRem)
		}
		// A minute later the minute window is full; the day has 3 left.
		n, d := burst(t, l, "k", lim, t0.Add(minute), 100)
		if n != 3 || d.Limit != 8 || d.Remaining != 0 {
			t.Fatalf("burst %d, %+v; want 3 accepted, then the day limit", n, d)
		}
	})
	t.Run("day exhausted, minute not consumed", func(t *testing.T) {
		l := New()
		lim := Limits{PerMinute: 5, PerDay: 3}
		if n, _ := burst(t, l, "k", lim, t0, 100); n != 3 {
			t.Fatalf("burst %d", n)
		}
		for i := range 100 {
			if d := l.Allow("k", lim, t0.Add(time.Duration(i)*time.Millisecond), 0); d.Allowed || d.Limit != 3 {
				t.Fatalf("%+v", d)
			}
		}
		if minRem, _, _ := l.peek("k", lim, t0.Add(time.Second)); minRem != 2 {
			t.Fatalf("minute remaining %d, want 2", minRem)
		}
	})
	t.Run("restored exhausted day, minute not consumed", func(t *testing.T) {
		l := New()
		lim := Limits{PerMinute: 5, PerDay: 2880} // one request back every 30 s
		exhausted := t0.Add(day).UnixNano()
		for i := range 100 {
			if d := l.Allow("k", lim, t0.Add(time.Duration(i)*time.Millisecond), exhausted); d.Allowed {
				t.Fatal("accepted against an exhausted day")
			}
		}
		if minRem, dayRem, _ := l.peek("k", lim, t0.Add(time.Second)); minRem != 5 || dayRem != 0 {
			t.Fatalf("remaining minute %d day %d, want 5 and 0", minRem, dayRem)
		}
		if d := l.Allow("k", lim, t0.Add(30*time.Second), 0); !d.Allowed {
			t.Fatalf("not accepted after the day refilled one: %+v", d)
		}
		if minRem, _, _ := l.peek("k", lim, t0.Add(30*time.Second)); minRem != 4 {
			t.Fatalf("minute remaining %d, want 4", minRem)
		}
	})
}

func TestConcurrentExact(t *testing.T) {
	const (
		goroutines = 64
		calls      = 500
		L          = 100
	)
	for _, tc := range []struct {
		name string
		lim  Limits
	}{
		{"per minute", Limits{L, 1_000_000}},
		{"per day", Limits{1_000_000, L}},
		{"both", Limits{L, L}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New()
			var accepted atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for g := range goroutines {
				wg.Go(func() {
					<-start
					for i := range calls {
						// Clock readings a few ns apart and out of order
						// between goroutines, far below one refill.
						now := t0.Add(time.Duration((g*calls + i) % 1000))
						if l.Allow("hot", tc.lim, now, 0).Allowed {
							accepted.Add(1)
						}
						// Other keys in the same and other shards.
						l.Allow(fmt.Sprint("other", g%8), tc.lim, now, 0)
					}
				})
			}
			close(start)
			wg.Wait()
			if got := accepted.Load(); got != L {
				t.Fatalf("accepted %d of %d, want exactly %d", got, goroutines*calls, L)
			}
		})
	}
}

func TestDecisionPicksTighterWindow(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lim       Limits
		before    int // requests made at t0 before the one checked
		at        time.Duration
		wantLimit int
		wantRem   int
		wantReset time.Duration
	}{
		{"minute tighter", Limits{60, 1000}, 0, 0, 60, 59, time.Second},
		{"day tighter", Limits{1000, 10}, 0, 0, 10, 9, day / 10},
		{"tie goes to minute", Limits{10, 10}, 0, 0, 10, 9, 6 * time.Second},
		{"day tighter after use", Limits{600, 100}, 50, 0, 100, 49, 51 * day / 100},
		{"minute refilled, day not", Limits{60, 100}, 50, minute, 100, 49, 51*day/100 - minute},
		{"minute tighter after use", Limits{60, 100000}, 30, 0, 60, 29, 31 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New()
			for range tc.before {
				if !l.Allow("k", tc.lim, t0, 0).Allowed {
					t.Fatal("setup rejected")
				}
			}
			d := l.Allow("k", tc.lim, t0.Add(tc.at), 0)
			if !d.Allowed || d.Limit != tc.wantLimit || d.Remaining != tc.wantRem || d.Reset != tc.wantReset || d.RetryAfter != 0 {
				t.Fatalf("got %+v, want limit %d remaining %d reset %v", d, tc.wantLimit, tc.wantRem, tc.wantReset)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lim      Limits
		dayState time.Duration // persisted day TAT, relative to t0 (0: none)
		before   int
		want     time.Duration
		limit    int // Decision.Limit of the rejection
	}{
		{"minute", Limits{10, 1000}, 0, 10, 6 * time.Second, 10},
		{"minute 7", Limits{7, 1000}, 0, 7, ceilDiv(minute, 7), 7},
		{"day", Limits{1000, 10}, 0, 10, day / 10, 10},
		{"both, day later", Limits{1, 1}, 0, 1, day, 1},
		// The day has one request left (one back every 30 s).
		{"both, minute later", Limits{1, 2880}, day - 30*time.Second, 1, minute, 1},
		{"both exhausted at once", Limits{5, 5}, 0, 5, day / 5, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New()
			var ds int64
			if tc.dayState != 0 {
				ds = t0.Add(tc.dayState).UnixNano()
			}
			for range tc.before {
				if d := l.Allow("k", tc.lim, t0, ds); !d.Allowed {
					t.Fatalf("setup: %+v", d)
				}
			}
			d := l.Allow("k", tc.lim, t0, 0)
			if d.Allowed || d.Remaining != 0 || d.Limit != tc.limit {
				t.Fatalf("%+v", d)
			}
			if d.RetryAfter <= 0 || d.RetryAfter > day || d.RetryAfter != tc.want {
				t.Fatalf("RetryAfter %v, want %v", d.RetryAfter, tc.want)
			}
			if d := l.Allow("k", tc.lim, t0.Add(d.RetryAfter-1), 0); d.Allowed {
				t.Fatalf("accepted 1ns before RetryAfter")
			}
			if d := l.Allow("k", tc.lim, t0.Add(d.RetryAfter), 0); !d.Allowed {
				t.Fatalf("not accepted at RetryAfter: %+v", d)
			}
		})
	}
}

// Every rejection's RetryAfter is in (0, period] and honoured, under a random
// mix of limits and clock steps.
func TestRetryAfterRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	l := New()
	now := t0
	for i := range 20000 {
		key := fmt.Sprint("k", r.IntN(4))
		lim := Limits{1 + r.IntN(20), 1 + r.IntN(200)}
		now = now.Add(time.Duration(r.Int64N(int64(3 * time.Second))))
		d := l.Allow(key, lim, now, 0)
		if d.Allowed {
			continue
		}
		period := day
		if d.Limit != lim.PerDay { // the minute window is the tighter one
			period = minute
		}
		if d.RetryAfter <= 0 || d.RetryAfter > day {
			t.Fatalf("%d: RetryAfter %v", i, d.RetryAfter)
		}
		if d.Remaining != 0 || d.Reset <= 0 || d.Reset > period {
			t.Fatalf("%d: %+v", i, d)
		}
		if d2 := l.Allow(key, lim, now.Add(d.RetryAfter), 0); !d2.Allowed {
			t.Fatalf("%d: not accepted at now+RetryAfter: %+v then %+v", i, d, d2)
		}
		now = now.Add(d.RetryAfter)
	}
}

func TestRestartKeepsDay(t *testing.T) {
	lim := Limits{PerMinute: 1000, PerDay: 50} // one request back every 1728 s
	a := New()
	if n, _ := burst(t, a, "k", lim, t0, 100); n != 50 {
		t.Fatalf("burst %d", n)
	}
	store := map[string]int64{}
	for _, s := range a.Dirty() {
		store[s.Key] = s.DayState
	}
	if store["k"] != t0.Add(day).UnixNano() {
		t.Fatalf("day state %d, want TAT %d", store["k"], t0.Add(day).UnixNano())
	}

	b := New() // restart
	now := t0.Add(minute)
	d := b.Allow("k", lim, now, store["k"])
	if d.Allowed || d.Limit != 50 || d.RetryAfter != 1728*time.Second-minute {
		t.Fatalf("after restart: %+v", d)
	}
	if d := b.Allow("k", lim, t0.Add(1728*time.Second), store["k"]); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after refill: %+v", d)
	}
	// Without the persisted state the key would have had its whole day.
	if d := New().Allow("k", lim, now, 0); !d.Allowed || d.Remaining != 49 {
		t.Fatalf("without state: %+v", d)
	}
}

func TestDirty(t *testing.T) {
	l := New()
	lim := Limits{PerMinute: 10, PerDay: 100}
	step := day / 100
	keys := func(st []State) []string {
		var k []string
		for _, s := range st {
			k = append(k, s.Key)
		}
		slices.Sort(k)
		return k
	}

	if st := l.Dirty(); st != nil {
		t.Fatalf("fresh: %v", st)
	}
	for range 3 {
		l.Allow("a", lim, t0, 0)
		l.Allow("b", lim, t0, 0)
	}
	st := l.Dirty()
	if got := keys(st); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("dirty %v", got)
	}
	for _, s := range st {
		if want := t0.Add(3 * step).UnixNano(); s.DayState != want {
			t.Fatalf("%s: day state %d, want %d", s.Key, s.DayState, want)
		}
	}
	if st := l.Dirty(); st != nil {
		t.Fatalf("second call: %v", st)
	}

	// Accepted → dirty; rejected (nothing consumed) → not dirty.
	l.Allow("a", lim, t0, 0)
	if got := keys(l.Dirty()); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("dirty %v", got)
	}
	for range 20 {
		l.Allow("c", Limits{PerMinute: 1, PerDay: 100}, t0, 0)
	}
	if got := keys(l.Dirty()); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("dirty %v", got)
	}
	l.Allow("c", Limits{PerMinute: 1, PerDay: 100}, t0, 0)
	if st := l.Dirty(); st != nil {
		t.Fatalf("after a rejection: %v", st)
	}

	// A forgotten key's unreported change is still reported, once; one that
	// comes back is reported again with its new state, after the old one.
	l.Allow("d", lim, t0, 0)
	l.Allow("e", lim, t0, 0)
	l.Forget("d")
	l.Forget("e")
	l.Allow("e", lim, t0, 0)
	l.Allow("e", lim, t0, 0)
	st = l.Dirty()
	if got := keys(st); !slices.Equal(got, []string{"d", "e", "e"}) {
		t.Fatalf("dirty %v", got)
	}
	var eStates []int64
	for _, s := range st {
		if s.Key == "e" {
			eStates = append(eStates, s.DayState)
		}
	}
	if want := []int64{t0.Add(step).UnixNano(), t0.Add(2 * step).UnixNano()}; !slices.Equal(eStates, want) {
		t.Fatalf("e: day states %v, want %v (the forgotten one first)", eStates, want)
	}
	l.Forget("d") // nothing pending: nothing reported
	if st := l.Dirty(); st != nil {
		t.Fatalf("after forgetting a clean key: %v", st)
	}

	// Many keys across all shards, each reported once.
	for i := range 1000 {
		l.Allow(fmt.Sprint("many", i), lim, t0, 0)
		l.Allow(fmt.Sprint("many", i), lim, t0, 0)
	}
	if st := l.Dirty(); len(st) != 1000 || len(slices.Compact(keys(st))) != 1000 {
		t.Fatalf("%d states", len(st))
	}
}

func TestSweep(t *testing.T) {
	lim := Limits{PerMinute: 10, PerDay: 1000} // day refill: 86.4 s per request
	l := New()
	l.Allow("a", lim, t0, 0)                     // full again at t0+86.4s
	l.Allow("b", lim, t0.Add(30*time.Second), 0) // at t0+116.4s
	l.Allow("c", Limits{PerMinute: 10, PerDay: 100000}, t0, 0)
	// c: day full at t0+0.864s, minute at t0+6s.

	if n := l.Sweep(t0.Add(2 * minute)); n != 0 {
		t.Fatalf("swept %d keys with changes Dirty has not returned", n)
	}
	l.Dirty()
	for _, step := range []struct {
		at    time.Duration
		swept int
		left  int
	}{
		{0, 0, 3},
		{5 * time.Second, 0, 3}, // c's day is full, its minute not
		{6 * time.Second, 1, 2}, // c
		{86400 * time.Millisecond, 1, 1},
		{116399 * time.Millisecond, 0, 1},
		{116400 * time.Millisecond, 1, 0},
	} {
		if n := l.Sweep(t0.Add(step.at)); n != step.swept || l.Len() != step.left {
			t.Fatalf("at +%v: swept %d left %d, want %d and %d", step.at, n, l.Len(), step.swept, step.left)
		}
	}
}

// A limiter that sweeps (persisting Dirty first and feeding it back as the
// day state) decides exactly like one that never forgets.
func TestSweepDoesNotChangeDecisions(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	keep, sweep := New(), New()
	store := map[string]int64{}
	now, swept := t0, 0
	for i := range 50000 {
		key := fmt.Sprint("k", r.IntN(20))
		lim := Limits{PerMinute: 3 + r.IntN(3), PerDay: 40 + r.IntN(5)}
		if r.IntN(3) == 0 { // sometimes a long pause
			now = now.Add(time.Duration(r.Int64N(int64(2 * time.Hour))))
		} else {
			now = now.Add(time.Duration(r.Int64N(int64(10 * time.Second))))
		}
		want := keep.Allow(key, lim, now, 0)
		got := sweep.Allow(key, lim, now, store[key])
		if got != want {
			t.Fatalf("%d %s at %v: sweeping limiter %+v, reference %+v", i, key, now, got, want)
		}
		if r.IntN(10) == 0 {
			for _, s := range sweep.Dirty() {
				store[s.Key] = s.DayState
			}
			swept += sweep.Sweep(now)
		}
	}
	if swept == 0 {
		t.Fatal("nothing was swept; the test proves nothing")
	}
}

func TestLimitChanges(t *testing.T) {
	for _, tc := range []struct {
		name     string
		before   Limits
		used     int
		after    Limits
		at       time.Duration
		accepted int // burst under the new limits at t0+at
	}{
		{"minute lowered keeps used share", Limits{600, 1 << 20}, 300, Limits{60, 1 << 20}, 0, 30},
		{"minute raised while exhausted", Limits{60, 1 << 20}, 60, Limits{600, 1 << 20}, 0, 0},
		{"minute raised refills faster", Limits{60, 1 << 20}, 60, Limits{600, 1 << 20}, time.Second, 10},
		{"minute raised keeps used share", Limits{60, 1 << 20}, 30, Limits{600, 1 << 20}, 0, 300},
		// 3 of 7 used = 25.714…s of 60s; floor((60-25.714)*13/60) = 7.
		{"non-divisible limits", Limits{7, 1 << 20}, 3, Limits{13, 1 << 20}, 0, 7},
		{"day lowered", Limits{1 << 20, 1000}, 500, Limits{1 << 20, 100}, 0, 50},
		{"day lowered below use", Limits{1 << 20, 1000}, 999, Limits{1 << 20, 10}, 0, 0},
		{"day raised", Limits{1 << 20, 100}, 100, Limits{1 << 20, 1000}, 864 * time.Second, 10},
		{"unchanged", Limits{60, 1000}, 20, Limits{60, 1000}, 0, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New()
			if n, _ := burst(t, l, "k", tc.before, t0, tc.used); n != tc.used {
				t.Fatalf("setup: %d accepted", n)
			}
			if n, _ := burst(t, l, "k", tc.after, t0.Add(tc.at), 1<<21); n != tc.accepted {
				t.Fatalf("after the change: %d accepted, want %d", n, tc.accepted)
			}
		})
	}

	// Alternating limits every request never beats the smaller one.
	l := New()
	n := 0
	for i := range 1000 {
		lim := Limits{PerMinute: 7 + 6*(i%2), PerDay: 1 << 20}
		if l.Allow("k", lim, t0, 0).Allowed {
			n++
		}
	}
	if n > 13 || n < 7 {
		t.Fatalf("alternating 7 and 13: %d accepted", n)
	}
}

func TestClockBackwards(t *testing.T) {
	lim := Limits{PerMinute: 10, PerDay: 1000}
	step := 6 * time.Second

	t.Run("exhausted, then an hour back", func(t *testing.T) {
		l := New()
		burst(t, l, "k", lim, t0, 100)
		back := t0.Add(-time.Hour)
		d := l.Allow("k", lim, back, 0)
		if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > minute || d.Reset != minute {
			t.Fatalf("%+v", d)
		}
		// Counted as exhausted at the new time: it refills from there
		// instead of being locked out for the hour.
		if d.RetryAfter != step {
			t.Fatalf("RetryAfter %v, want %v", d.RetryAfter, step)
		}
		if n, _ := burst(t, l, "k", lim, back.Add(step), 100); n != 1 {
			t.Fatalf("after one refill: %d accepted", n)
		}
	})
	t.Run("partly used, then back", func(t *testing.T) {
		l := New()
		burst(t, l, "k", lim, t0, 3) // 18 s of 60 in use
		// 10 s back: 28 s in use, 5 requests left.
		if n, _ := burst(t, l, "k", lim, t0.Add(-10*time.Second), 100); n != 5 {
			t.Fatalf("%d accepted", n)
		}
	})
	t.Run("clock only going back grants at most L", func(t *testing.T) {
		l := New()
		r := rand.New(rand.NewPCG(5, 6))
		now, n := t0, 0
		for range 10000 {
			if l.Allow("k", lim, now, 0).Allowed {
				n++
			}
			now = now.Add(-time.Duration(r.Int64N(int64(20 * time.Second))))
		}
		if n > lim.PerMinute {
			t.Fatalf("%d accepted", n)
		}
	})
	t.Run("Sweep with the clock behind the state", func(t *testing.T) {
		l := New()
		l.Allow("k", lim, t0, 0)
		l.Dirty()
		if n := l.Sweep(t0.Add(-time.Hour)); n != 0 {
			t.Fatalf("swept %d", n)
		}
	})
}

// Absurd inputs must not panic and must not grant more than the limits.
func TestHostileInputs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lim      Limits
		now      time.Time
		dayState int64
		max      int
	}{
		{"zero limits act as 1", Limits{0, 0}, t0, 0, 1},
		{"negative limits act as 1", Limits{-5, math.MinInt}, t0, 0, 1},
		{"huge limits", Limits{math.MaxInt, math.MaxInt}, t0, 0, 1 << 16},
		{"day state far in the future", Limits{10, 10}, t0, math.MaxInt64, 0},
		{"day state far in the past", Limits{10, 10}, t0, math.MinInt64, 10},
		{"day state just past", Limits{10, 10}, t0, t0.Add(-time.Second).UnixNano(), 10},
		{"zero time", Limits{10, 10}, time.Time{}, 0, 10},
		{"before 1970", Limits{10, 10}, time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), 0, 10},
		{"before 1970, future day state", Limits{10, 10}, time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), math.MaxInt64, 0},
		{"after 2262", Limits{10, 10}, time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), 0, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New()
			n := 0
			for range 1 << 16 {
				d := l.Allow("k", tc.lim, tc.now, tc.dayState)
				if !d.Allowed {
					if d.RetryAfter <= 0 || d.RetryAfter > day || d.Remaining < 0 || d.Reset < 0 {
						t.Fatalf("%+v", d)
					}
					break
				}
				n++
			}
			if n > tc.max {
				t.Fatalf("%d accepted, at most %d expected", n, tc.max)
			}
			l.Dirty()
			l.Sweep(tc.now)
			l.Forget("k")
		})
	}
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	r := rand.New(rand.NewPCG(7, 8))
	for i := range keys {
		keys[i] = fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x", r.Uint32(), r.Uint32()&0xffff,
			r.Uint32()&0xfff, r.Uint32()&0xffff, r.Uint64()&0xffffffffffff)
	}
	return keys
}

func BenchmarkAllow(b *testing.B) {
	lim := Limits{PerMinute: 600, PerDay: 100000}

	b.Run("hot key", func(b *testing.B) {
		l := New()
		key := benchKeys(1)[0]
		now := t0
		for b.Loop() {
			now = now.Add(50 * time.Millisecond) // half accepted, half rejected
			l.Allow(key, lim, now, 0)
		}
	})

	b.Run("10000 keys", func(b *testing.B) {
		l := New()
		keys := benchKeys(10000)
		r := rand.New(rand.NewPCG(9, 10))
		order := make([]int, 1<<16)
		for i := range order {
			order[i] = r.IntN(len(keys))
		}
		for _, k := range keys {
			l.Allow(k, lim, t0, 0)
		}
		now, i := t0, 0
		for b.Loop() {
			now = now.Add(time.Microsecond)
			l.Allow(keys[order[i&(len(order)-1)]], lim, now, 0)
			i++
		}
	})

	b.Run("parallel 10000 keys", func(b *testing.B) {
		l := New()
		keys := benchKeys(10000)
		for _, k := range keys {
			l.Allow(k, lim, t0, 0)
		}
		var seed atomic.Uint64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			r := rand.New(rand.NewPCG(seed.Add(1), 11))
			now := t0
			for pb.Next() {
				now = now.Add(time.Microsecond)
				l.Allow(keys[r.IntN(len(keys))], lim, now, 0)
			}
		})
	})

	b.Run("parallel hot key", func(b *testing.B) {
		l := New()
		key := benchKeys(1)[0]
		b.RunParallel(func(pb *testing.PB) {
			now := t0
			for pb.Next() {
				now = now.Add(50 * time.Millisecond)
				l.Allow(key, lim, now, 0)
			}
		})
	})

	b.Run("new keys", func(b *testing.B) {
		l := New()
		keys := benchKeys(1 << 16)
		i := 0
		for b.Loop() {
			if i&(len(keys)-1) == 0 {
				b.StopTimer()
				l = New()
				b.StartTimer()
			}
			l.Allow(keys[i&(len(keys)-1)], lim, t0, 0)
			i++
		}
	})
}
