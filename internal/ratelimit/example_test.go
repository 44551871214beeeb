package ratelimit_test

import (
	"fmt"
	"time"

	"github.com/btk-project/btk/internal/ratelimit"
)

func Example() {
	l := ratelimit.New()
	lim := ratelimit.Limits{PerMinute: 2, PerDay: 100}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	for range 3 {
		d := l.Allow("key-id", lim, now, 0) // dayState: the value last persisted for the key
		fmt.Printf("allowed=%v limit=%d remaining=%d reset=%v retryAfter=%v\n",
			d.Allowed, d.Limit, d.Remaining, d.Reset, d.RetryAfter)
	}

	// The flush loop (about once a second): persist, then sweep.
	for _, s := range l.Dirty() {
		fmt.Println("persist", s.Key, time.Unix(0, s.DayState).UTC().Format(time.TimeOnly))
	}
	fmt.Println("swept", l.Sweep(now.Add(time.Hour)))
	// Output:
	// allowed=true limit=2 remaining=1 reset=30s retryAfter=0s
	// allowed=true limit=2 remaining=0 reset=1m0s retryAfter=0s
	// allowed=false limit=2 remaining=0 reset=1m0s retryAfter=30s
	// persist key-id 12:28:48
	// swept 1
}
