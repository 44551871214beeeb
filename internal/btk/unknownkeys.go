package btk

import (
	"crypto/sha256"
	"sync"
	"time"

	"github.com/btk-project/btk/internal/ratelimit"
)

// unknownKeys keeps floods of made-up keys away from the database
// (docs/security.md): a key the database did not know is answered from a
// short negative cache for negativeTTL, and each client address may make
// the database look up only so many distinct unknown keys; past that its
// cache misses are refused (429) without a lookup until its budget
// refills. Cold misses of real keys never spend the budget, so a
// forward-auth proxy carrying thousands of keys from one address is not
// refused after a restart. Both maps are bounded; their keys are a digest
// and a parsed address.
type unknownKeys struct {
	mu      sync.Mutex
	neg     map[[sha256.Size]byte]int64 // key hash → unix ns until which it is unknown
	blocked map[string]int64            // address → unix ns until which misses are refused
	spent   *ratelimit.Limiter          // unknown keys looked up, per address
	swept   int64                       // unix ns of the last sweep
}

const (
	negativeTTL     = 30 * time.Second
	unknownKeysMax  = 100_000 // entries of each map (about 10 MB at most)
	unknownKeysDrop = unknownKeysMax / 10
)

// unknownKeyLookups is each address's budget of distinct unknown keys
// looked up in the database.
var unknownKeyLookups = ratelimit.Limits{PerMinute: 60, PerDay: 2000}

// ErrTooManyUnknownKeys refuses a cache miss from an address that has
// presented too many unknown keys (HTTP 429).
var ErrTooManyUnknownKeys = &Error{Code: CodeRateLimited, Message: "too many invalid API keys from this address; try again later"}

func newUnknownKeys() *unknownKeys {
	return &unknownKeys{
		neg: map[[sha256.Size]byte]int64{}, blocked: map[string]int64{},
		spent: ratelimit.NewBounded(unknownKeysMax),
	}
}

// before decides a cache miss before any lookup: ErrInvalidKey when the key
// is known to be unknown, ErrTooManyUnknownKeys when the address is
// refused, nil to look it up.
func (u *unknownKeys) before(hash [sha256.Size]byte, addr string, now time.Time) error {
	t := now.UnixNano()
	u.mu.Lock()
	defer u.mu.Unlock()
	if until, ok := u.neg[hash]; ok {
		if t < until {
			return ErrInvalidKey
		}
		delete(u.neg, hash)
	}
	if until, ok := u.blocked[addr]; ok {
		if t < until {
			return ErrTooManyUnknownKeys
		}
		delete(u.blocked, addr)
	}
	return nil
}

// unknown records that the database does not know the key addr presented.
func (u *unknownKeys) unknown(hash [sha256.Size]byte, addr string, now time.Time) {
	t := now.UnixNano()
	d := u.spent.Allow(addressKey(addr), unknownKeyLookups, now, 0)
	u.mu.Lock()
	defer u.mu.Unlock()
	dropSome(u.neg)
	u.neg[hash] = t + int64(negativeTTL)
	if !d.Allowed {
		dropSome(u.blocked)
		u.blocked[addr] = t + int64(d.RetryAfter)
	}
}

// dropSome makes room in a full map: a tenth of it, at random (map order).
// Dropping costs lookups again, never a wrong answer.
func dropSome[K comparable](m map[K]int64) {
	if len(m) < unknownKeysMax {
		return
	}
	n := unknownKeysDrop
	for k := range m {
		delete(m, k)
		if n--; n <= 0 {
			break
		}
	}
}

// sweep drops what has expired, and lets the budgets replenish.
func (u *unknownKeys) sweep(now time.Time) {
	t := now.UnixNano()
	u.mu.Lock()
	if t-u.swept < int64(negativeTTL) {
		u.mu.Unlock()
		return
	}
	u.swept = t
	for k, until := range u.neg {
		if until <= t {
			delete(u.neg, k)
		}
	}
	for k, until := range u.blocked {
		if until <= t {
			delete(u.blocked, k)
		}
	}
	u.mu.Unlock()
	u.spent.Dirty()
	u.spent.Sweep(now)
}
