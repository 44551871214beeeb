package btk

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"time"

	"github.com/btk-project/btk/internal/ratelimit"
)

// Password checks are the one expensive thing an anonymous caller can ask
// for (argon2id: 19 MiB and tens of milliseconds each), and each is a guess.
// passwordGate bounds both, at most GOMAXPROCS checks at once, and budgets
// attempts so that an attacker cannot turn them against the owner:
//
//   - per client address (all accounts): tight; bounds the CPU one address
//     can spend and what it can guess;
//   - per account and address: tighter still, counting the attempts since
//     the last success there;
//   - per account (all addresses): much looser, and charged only to
//     addresses that have failed for this account since their last
//     success. An address that has not failed is never refused for what
//     others did: after any number of failures elsewhere, the owner logs
//     in at once from a clean address. A distributed guesser gets one
//     attempt per fresh address beyond the account's budget.
//
// IPv6 clients are counted by their /64, which one host usually holds whole.
type passwordGate struct {
	limiter Throttle // in memory, or shared by the instances (Config.Throttle)
	slots   chan struct{}
}

// Attempt budgets: generous for people, ruinous for guessing.
// docs/security.md#password-throttles repeats them.
var (
	addressAttempts = ratelimit.Limits{PerMinute: 30, PerDay: 300}
	pairAttempts    = ratelimit.Limits{PerMinute: 5, PerDay: 50}
	accountAttempts = ratelimit.Limits{PerMinute: 50, PerDay: 1000}
	// deviceAttempts is the budget of one device token (it replaces the
	// pair's and the account's budgets for the client presenting it).
	deviceAttempts = ratelimit.Limits{PerMinute: 5, PerDay: 50}
	// failedMark is a budget of one attempt a day: spent, it marks an
	// address that failed for an account (Forget clears it on success).
	failedMark = ratelimit.Limits{PerMinute: 1, PerDay: 1}
)

func newPasswordGate() *passwordGate {
	return &passwordGate{limiter: NewLocalThrottle(), slots: make(chan struct{}, runtime.GOMAXPROCS(0))}
}

// attempt names who tries a password, for the budgets.
type attempt struct {
	// account is the account's id when it exists (known), else the email
	// as typed.
	account string
	known   bool
	ip      string
	// device is the nonce of a valid device token of this account, or "".
	device string
}

// Throttle keys are a kind and a digest of what the client chose (an email
// of 62 KB is 22 bytes here), so a key's length is bounded. Kinds whose
// count the client cannot choose (an existing account's budget, a device
// token the server issued) are kept apart from those it can: see
// NewLocalThrottle.
const (
	protectedAccountKind = "acct:"
	protectedDeviceKind  = "dev:"
	// protectedSwitchKind counts an account's workspace switches
	// (SwitchWorkspace).
	protectedSwitchKind = "switch:"
	// protectedImpersonateKind counts a platform admin's impersonations
	// (Impersonate).
	protectedImpersonateKind = "imp:"
	// protectedChangeKind counts a workspace's changes (spendChange).
	protectedChangeKind = "changes:"
)

// protectedKey reports whether key's count is one no client chooses the
// number of.
func protectedKey(key string) bool {
	return strings.HasPrefix(key, protectedAccountKind) || strings.HasPrefix(key, protectedDeviceKind) ||
		strings.HasPrefix(key, protectedSwitchKind) || strings.HasPrefix(key, protectedImpersonateKind) ||
		strings.HasPrefix(key, protectedChangeKind)
}

func throttleKey(kind string, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	var sum [sha256.Size]byte
	return kind + base64.RawURLEncoding.EncodeToString(h.Sum(sum[:0])[:16])
}

// check counts one attempt for the account (by email or id) from the client
// address, then checks password against hash within a bounded number of
// concurrent checks. It returns ErrTooManyAttempts when a budget is spent.
func (g *passwordGate) check(ctx context.Context, now time.Time, account, ip, hash, password string) (bool, error) {
	return g.checkAttempt(ctx, now, attempt{account: account, ip: ip}, hash, password)
}

// checkAttempt is check for an attempt: a client presenting a device token
// of the account is charged to its address and to that token only, never
// to the account-wide budget an attacker may have drained.
func (g *passwordGate) checkAttempt(ctx context.Context, now time.Time, at attempt, hash, password string) (bool, error) {
	account, ip := strings.ToLower(at.account), addressKey(at.ip)
	d, err := g.spend(ctx, throttleKey("ip:", ip), addressAttempts, now)
	if err != nil || !d.Allowed {
		return false, refusal(d, err)
	}
	var pair, mark string
	if at.device != "" {
		// Like a pair's, a device token's budget counts the attempts since
		// its last success.
		pair = throttleKey(protectedDeviceKind, at.account, at.device)
		d, err = g.spend(ctx, pair, deviceAttempts, now)
	} else {
		pair = throttleKey("pair:", account, ip)
		if d, err = g.spend(ctx, pair, pairAttempts, now); err == nil && d.Allowed {
			// The first attempt of a clean pair spends its mark; while the
			// mark is spent (a failure, or an attempt under way, since the
			// last success), the account's budget applies too. While the
			// in-memory throttle evicts (a flood of addresses), a missing
			// mark may be an evicted one: the account's budget applies.
			mark = throttleKey("failed:", account, ip)
			var clean ratelimit.Decision
			clean, err = g.spend(ctx, mark, failedMark, now)
			if err == nil && (!clean.Allowed || g.evicting(now)) {
				kind := "account:"
				if at.known {
					kind = protectedAccountKind
				}
				d, err = g.spend(ctx, throttleKey(kind, account), accountAttempts, now)
			}
		}
	}
	if err != nil || !d.Allowed {
		return false, refusal(d, err)
	}
	select {
	case g.slots <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-g.slots }()
	ok := CheckPassword(hash, password)
	if ok {
		// A success clears the pair's (or device token's) record: its
		// budget counts the attempts since the last success (a guesser
		// never has one). If the shared throttle cannot be told, the
		// record stays: stricter.
		if mark != "" {
			_ = g.limiter.Forget(ctx, mark)
		}
		_ = g.limiter.Forget(ctx, pair)
	}
	return ok, nil
}

// evicting reports whether the throttle forgot counts in the last day to
// stay within its bound (only the in-memory one does).
func (g *passwordGate) evicting(now time.Time) bool {
	e, ok := g.limiter.(interface{ lastEviction() time.Time })
	if !ok {
		return false
	}
	last := e.lastEviction()
	return !last.IsZero() && now.Sub(last) < 24*time.Hour
}

// spend counts one attempt under key.
func (g *passwordGate) spend(ctx context.Context, key string, lim ratelimit.Limits, now time.Time) (ratelimit.Decision, error) {
	return g.limiter.Allow(ctx, key, lim, now)
}

// refusal is the answer to an attempt refused by a budget (d), or by a
// shared throttle that does not answer (fail closed).
func refusal(d ratelimit.Decision, err error) error {
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return errTooManyAttempts(d.RetryAfter)
}

// addressKey is the throttled unit of a client address: the address itself,
// or the /64 of an IPv6 address.
func addressKey(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil || !a.Is6() || a.Is4In6() {
		return ip
	}
	p, _ := a.Prefix(64)
	return p.String()
}

// sweep forgets attempt counts that have fully replenished.
func (g *passwordGate) sweep(now time.Time) {
	g.limiter.Sweep(now)
}

// errTooManyAttempts refuses a password check over the attempt limits,
// saying when the budget that refused it takes one again (rounded up to the
// second): a script knows how long to wait, a guesser learns nothing it
// could not count (docs/security.md#password-throttles).
func errTooManyAttempts(retry time.Duration) *Error {
	return errSpent("too many password attempts", retry)
}

type clientIPKey struct{}

// WithClientIP records the request's client address for the anonymous
// operations (login) that have no actor to carry it.
func WithClientIP(ctx context.Context, ip string) context.Context {
	return context.WithValue(ctx, clientIPKey{}, ip)
}

func clientIPFrom(ctx context.Context) string {
	if a := ActorFrom(ctx); a != nil {
		return a.IP
	}
	ip, _ := ctx.Value(clientIPKey{}).(string)
	return ip
}
