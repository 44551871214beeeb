package btk

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Password throttles in memory are bounded (docs/security.md#what-a-client-can-make-the-server-hold):
// logins with 62 KB made-up emails from distinct addresses
// grew the in-memory throttle by the whole email per key, for 24 hours.
// Keys are digests now, and the map is bounded: the heap stays flat.
func TestThrottleMemoryBoundedUnderLongEmails(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	g := newPasswordGate()
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	long := strings.Repeat("x", 62_000)
	for i := range 1000 {
		// A hash that does not parse fails at once (no argon2 work), as a
		// wrong password does.
		email := fmt.Sprintf("%d%s@example.com", i, long)
		g.check(ctx, now, email, fmt.Sprintf("10.%d.%d.1", i/250, i%250), "bad", "guess")
	}
	grew := int64(heap()) - int64(before)
	t.Logf("heap grew by %d bytes for 1,000 attempts with 62 KB emails", grew)
	if grew > 8<<20 {
		t.Fatalf("heap grew by %d MB for 1,000 attempts: the emails are kept", grew>>20)
	}
	// The count is bounded too, whatever the number of addresses.
	lt := newLocalThrottle(1000)
	g.limiter = lt
	for i := range 5000 {
		g.check(ctx, now, fmt.Sprintf("u%d@example.com", i), fmt.Sprintf("10.%d.%d.2", i/250, i%250), "bad", "guess")
	}
	if n := lt.open.Len(); n > 1024 {
		t.Fatalf("%d keys held, bound 1,000", n)
	}
}

// The throttle's eviction and device tokens (docs/security.md#password-throttles): a flood of made-up
// emails and addresses that fills the bounded throttle neither gives a
// guesser back the account's budget nor a free attempt per address; the
// owner presenting the device token of an earlier login still logs in.
func TestThrottleEvictionFavoursOwner(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	tokens := NewTokens([]byte(strings.Repeat("s", 32)), func() time.Time { return now })
	g := newPasswordGate()
	lt := newLocalThrottle(1000)
	g.limiter = lt
	good := HashPassword("right-password")
	owner := attempt{account: "acct-1", known: true, ip: "192.0.2.1"}
	device := tokens.DeviceToken("acct-1")
	// The attacker drains the account from 600 addresses (two attempts
	// each: the second is charged to the account).
	for i := range 600 {
		a := attempt{account: "acct-1", known: true, ip: fmt.Sprintf("10.0.%d.%d", i/250, i%250)}
		g.checkAttempt(ctx, now, a, "bad", "guess")
		g.checkAttempt(ctx, now, a, "bad", "guess")
	}
	// ... then floods made-up emails from fresh addresses to evict.
	for i := range 5000 {
		g.check(ctx, now, fmt.Sprintf("u%d@example.com", i), fmt.Sprintf("10.1%d.%d.%d", i/62500, i/250%250, i%250), "bad", "guess")
	}
	if lt.open.LastEviction().IsZero() {
		t.Fatal("the flood did not fill the throttle")
	}
	// A fresh address is no longer a free guess while the throttle evicts.
	if _, err := g.checkAttempt(ctx, now, attempt{account: "acct-1", known: true, ip: "198.51.100.7"}, "bad", "guess"); !tooManyAttempts(err) {
		t.Fatalf("a fresh address during eviction: %v, want refused (the account's budget is spent)", err)
	}
	// The owner without a device token: refused like anyone (its address
	// failed once in the last day).
	g.checkAttempt(ctx, now, owner, "bad", "typo")
	if _, err := g.checkAttempt(ctx, now, owner, good, "right-password"); !tooManyAttempts(err) {
		t.Fatalf("owner without a device token: %v", err)
	}
	// With the device token of an earlier login: in, every time.
	owner.device = tokens.CheckDevice(device, "acct-1")
	if owner.device == "" {
		t.Fatal("the device token does not check")
	}
	for i := range 21 {
		if ok, err := g.checkAttempt(ctx, now.Add(time.Duration(i)*time.Minute), owner, good, "right-password"); !ok || err != nil {
			t.Fatalf("owner with its device token, login %d: %v %v", i, ok, err)
		}
	}
	// The token is the account's only, and its own budget applies.
	if tokens.CheckDevice(device, "acct-2") != "" || tokens.CheckDevice(device+"x", "acct-1") != "" {
		t.Fatal("a device token checks for another account, or altered")
	}
	thief := attempt{account: "acct-1", known: true, ip: "203.0.113.9", device: owner.device}
	refused := 0
	for range 10 {
		if _, err := g.checkAttempt(ctx, now.Add(time.Hour), thief, "bad", "guess"); tooManyAttempts(err) {
			refused++
		}
	}
	if refused != 10-deviceAttempts.PerMinute {
		t.Fatalf("a device token's budget refused %d of 10", refused)
	}
}

// lookupStore counts the database lookups of keys, none of which exist.
type lookupStore struct {
	Store
	lookups atomic.Int64
}

func (s *lookupStore) Read(ctx context.Context, fn func(Tx) error) error { return fn(lookupTx{s: s}) }

type lookupTx struct {
	Tx
	s *lookupStore
}

func (lookupTx) Setting(context.Context, string) (string, error) { return "", ErrNotFound }
func (t lookupTx) APIKeyByHash(context.Context, []byte) (*APIKey, error) {
	t.s.lookups.Add(1)
	return nil, ErrNotFound
}

// Unknown keys are bounded (docs/security.md#what-a-client-can-make-the-server-hold):
// a flood of unknown keys reached the database one lookup
// each. The same unknown key again is answered from the negative cache; an
// address that presents many distinct unknown keys is refused without a
// lookup once its budget is spent; another address is not.
func TestUnknownKeysKeptOffTheDatabase(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	st := &lookupStore{}
	svc, err := NewService(ctx, st, []byte(strings.Repeat("s", 32)), Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int) string {
		k := fmt.Sprintf("btk_0123abcd_%042d0", i)
		if !WellFormedKey(k) {
			t.Fatalf("%q is not well formed", k)
		}
		return k
	}
	for range 1000 {
		if _, _, err := svc.AuthenticateKeyFrom(ctx, key(0), Client{IP: netip.MustParseAddr("192.0.2.1")}); err != ErrInvalidKey {
			t.Fatalf("unknown key: %v", err)
		}
	}
	if n := st.lookups.Load(); n != 1 {
		t.Fatalf("the same unknown key 1,000 times: %d lookups, want 1", n)
	}
	refused := 0
	for i := range 1000 {
		if _, _, err := svc.AuthenticateKeyFrom(ctx, key(i+1), Client{IP: netip.MustParseAddr("192.0.2.1")}); err == ErrTooManyUnknownKeys {
			refused++
		}
	}
	if n := st.lookups.Load(); n > 1+int64(unknownKeyLookups.PerMinute) {
		t.Fatalf("1,000 distinct unknown keys from one address: %d lookups", n)
	}
	if refused < 1000-unknownKeyLookups.PerMinute {
		t.Fatalf("only %d of 1,000 refused", refused)
	}
	if _, _, err := svc.AuthenticateKeyFrom(ctx, key(5000), Client{IP: netip.MustParseAddr("192.0.2.2")}); err != ErrInvalidKey {
		t.Fatalf("another address: %v, want a lookup and ErrInvalidKey", err)
	}
	// A minute later the address may look up again.
	now = now.Add(time.Minute)
	if _, _, err := svc.AuthenticateKeyFrom(ctx, key(6000), Client{IP: netip.MustParseAddr("192.0.2.1")}); err != ErrInvalidKey {
		t.Fatalf("a minute later: %v", err)
	}
}
