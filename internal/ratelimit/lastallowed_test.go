package ratelimit

import (
	"testing"
	"time"
)

// Dirty reports the latest accepted request of each key since the previous
// call (rejected ones do not count), and Forget hands back what Dirty still
// owed.
func TestLastAllowed(t *testing.T) {
	l := New()
	lim := Limits{PerMinute: 2, PerDay: 100}
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	l.Allow("a", lim, at(0), 0)
	l.Allow("a", lim, at(time.Second), 0)
	l.Allow("a", lim, at(2*time.Second), 0) // rejected: 2 per minute
	l.Allow("b", lim, at(3*time.Second), 0)
	got := map[string]int64{}
	for _, s := range l.Dirty() {
		got[s.Key] = s.LastAllowed
	}
	if len(got) != 2 || got["a"] != at(time.Second).UnixNano() || got["b"] != at(3*time.Second).UnixNano() {
		t.Fatalf("last allowed %v", got)
	}

	// Only rejections since: nothing to report.
	l.Allow("a", lim, at(4*time.Second), 0)
	if st := l.Dirty(); st != nil {
		t.Fatalf("after a rejection: %v", st)
	}

	// An earlier time never replaces a later one (a clock step backwards).
	wide := Limits{PerMinute: 100, PerDay: 1000}
	if !l.Allow("e", wide, at(30*time.Second), 0).Allowed || !l.Allow("e", wide, at(29*time.Second), 0).Allowed {
		t.Fatal("refused")
	}
	if st := l.Dirty(); len(st) != 1 || st[0].LastAllowed != at(30*time.Second).UnixNano() {
		t.Fatalf("after a step back: %v", st)
	}

	// Forget keeps the pending change for the next Dirty, once.
	l.Allow("c", lim, at(5*time.Second), 0)
	l.Forget("c")
	l.Forget("c")
	if st := l.Dirty(); len(st) != 1 || st[0].Key != "c" || st[0].LastAllowed != at(5*time.Second).UnixNano() || st[0].DayState == 0 {
		t.Fatalf("Dirty after Forget: %+v", st)
	}
	if st := l.Dirty(); st != nil {
		t.Fatalf("second Dirty after Forget: %v", st)
	}

	// Restore hands states back to the next Dirty.
	l.Allow("f", lim, at(7*time.Second), 0)
	lost := l.Dirty()
	l.Restore(lost)
	l.Allow("f", lim, at(8*time.Second), 0)
	st := l.Dirty()
	if len(st) != 2 || st[0] != lost[0] || st[1].Key != "f" || st[1].LastAllowed != at(8*time.Second).UnixNano() {
		t.Fatalf("after Restore: %+v", st)
	}
}
