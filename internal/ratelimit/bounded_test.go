package ratelimit

import (
	"fmt"
	"testing"
	"time"
)

// A bounded limiter holds at most its bound, however many keys come, and
// keeps the entry in active use over the idle ones it evicts.
func TestBoundedEvictsIdleFirst(t *testing.T) {
	l := NewBounded(640)
	t0 := time.Unix(1_700_000_000, 0)
	lim := Limits{PerMinute: 5, PerDay: 50}
	for range 5 {
		l.Allow("hot", lim, t0, 0)
	}
	for i := range 20_000 {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		l.Allow(fmt.Sprint("flood", i), lim, now, 0)
		if i%100 == 0 {
			l.Allow("hot", lim, now, 0) // refused, but keeps it recent
		}
	}
	if n := l.Len(); n > 640 {
		t.Fatalf("%d keys held, bound 640", n)
	}
	if d := l.Allow("hot", lim, t0.Add(20*time.Second), 0); d.Allowed {
		t.Fatal("the spent key was evicted: its budget is whole again")
	}
	if l.LastEviction().IsZero() {
		t.Fatal("no eviction reported")
	}
}
