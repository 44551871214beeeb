package gateway

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/ratelimit"
)

// wantRateLimitHeaders is what setRateLimitHeaders must write, spelled out
// with Header.Set (docs/gateway.md#forward-auth-v1authorize).
func wantRateLimitHeaders(d ratelimit.Decision, key *btk.Actor) http.Header {
	h := http.Header{}
	reset := ceilSeconds(d.Reset)
	window := "minute"
	if d.Day {
		window = "day"
	}
	h.Set("RateLimit-Limit", strconv.Itoa(d.Limit))
	h.Set("RateLimit-Remaining", strconv.Itoa(d.Remaining))
	h.Set("RateLimit-Reset", strconv.Itoa(reset))
	h.Set("RateLimit-Policy", fmt.Sprintf(`"minute";q=%d;w=60, "day";q=%d;w=86400`, d.PerMinute, d.PerDay))
	h.Set("RateLimit", fmt.Sprintf(`"%s";r=%d;t=%d`, window, d.Remaining, reset))
	if !d.Allowed {
		h.Set("Retry-After", strconv.Itoa(max(1, ceilSeconds(d.RetryAfter))))
	}
	if key != nil {
		h.Set("X-Tenant-Id", key.WorkspaceID)
		h.Set("X-Api-Key-Id", key.KeyID)
		h.Set("X-Api-Key-Scopes", key.KeyScopes)
	}
	return h
}

// randomDecision is a decision of one of few limits (so that the limit
// strings are found again) or of many (so that their slots are replaced).
func randomDecision(r *rand.Rand, limits int) ratelimit.Decision {
	pm, pd := 1+r.IntN(limits), 1+r.IntN(limits)*1000
	if r.IntN(8) == 0 {
		pm, pd = ratelimit.MaxLimit, ratelimit.MaxLimit
	}
	d := ratelimit.Decision{
		Allowed: r.IntN(4) != 0, PerMinute: pm, PerDay: pd, Day: r.IntN(3) == 0,
		Reset: time.Duration(r.Int64N(int64(25 * time.Hour))),
	}
	d.Limit = pm
	if d.Day {
		d.Limit = pd
	}
	if r.IntN(50) == 0 {
		d.Limit = 7 // neither window's: told as it is
	}
	d.Remaining = r.IntN(d.Limit + 1)
	if !d.Allowed {
		d.Remaining = 0
		d.RetryAfter = time.Duration(r.Int64N(int64(24 * time.Hour)))
	}
	return d
}

func TestSetRateLimitHeaders(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	key := &btk.Actor{WorkspaceID: "ws-1", KeyID: "key-1", KeyScopes: "orders:read orders:write"}
	for i := range 20_000 {
		d := randomDecision(r, []int{3, 100_000}[i%2])
		var k *btk.Actor
		if d.Allowed && r.IntN(2) == 0 {
			k = key
		}
		got := http.Header{}
		setRateLimitHeaders(got, d, k)
		if want := wantRateLimitHeaders(d, k); !reflect.DeepEqual(got, want) {
			t.Fatalf("%+v, key %v:\n got %v\nwant %v", d, k != nil, got, want)
		}
	}
}

// TestSetRateLimitHeadersConcurrent: requests of different limits share
// the limit strings' slots (run with -race).
func TestSetRateLimitHeadersConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 3))
			for range 2_000 {
				d := randomDecision(r, 1_000)
				got := http.Header{}
				setRateLimitHeaders(got, d, nil)
				if want := wantRateLimitHeaders(d, nil); !reflect.DeepEqual(got, want) {
					t.Errorf("%+v:\n got %v\nwant %v", d, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}
