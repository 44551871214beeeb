package btk

import (
	"context"
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
	// failedMark is a budget of one attempt a day: spent, it marks an
	// address that failed for an account (Forget clears it on success).
	failedMark = ratelimit.Limits{PerMinute: 1, PerDay: 1}
)

func newPasswordGate() *passwordGate {
	return &passwordGate{limiter: NewLocalThrottle(), slots: make(chan struct{}, runtime.GOMAXPROCS(0))}
}

// check counts one attempt for the account (by email or id) from the client
// address, then checks password against hash within a bounded number of
// concurrent checks. It returns ErrTooManyAttempts when a budget is spent.
func (g *passwordGate) check(ctx context.Context, now time.Time, account, ip, hash, password string) (bool, error) {
	account, ip = strings.ToLower(account), addressKey(ip)
	pair := "pair:" + account + "|" + ip
	ok, err := g.spend(ctx, "ip:"+ip, addressAttempts, now)
	if err == nil && ok {
		ok, err = g.spend(ctx, pair, pairAttempts, now)
	}
	if err != nil || !ok {
		return false, refusal(err)
	}
	// The first attempt of a clean pair spends its mark; while the mark is
	// spent (a failure, or an attempt under way, since the last success),
	// the account's budget applies too.
	mark := "failed:" + account + "|" + ip
	if ok, err = g.spend(ctx, mark, failedMark, now); err == nil && !ok {
		ok, err = g.spend(ctx, "account:"+account, accountAttempts, now)
	}
	if err != nil || !ok {
		return false, refusal(err)
	}
	select {
	case g.slots <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-g.slots }()
	ok = CheckPassword(hash, password)
	if ok {
		// A success clears the pair's record: its budget counts the
		// attempts since the last success (a guesser never has one). If
		// the shared throttle cannot be told, the record stays: stricter.
		g.limiter.Forget(ctx, mark)
		g.limiter.Forget(ctx, pair)
	}
	return ok, nil
}

// spend counts one attempt under key.
func (g *passwordGate) spend(ctx context.Context, key string, lim ratelimit.Limits, now time.Time) (bool, error) {
	return g.limiter.Allow(ctx, key, lim, now)
}

// refusal is the answer to an attempt refused by a budget, or by a shared
// throttle that does not answer (fail closed).
func refusal(err error) error {
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return ErrTooManyAttempts
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

// ErrTooManyAttempts refuses password checks over the attempt limits.
var ErrTooManyAttempts = &Error{CodeRateLimited, "too many password attempts; try again later"}

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
