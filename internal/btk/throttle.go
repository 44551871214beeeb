package btk

import (
	"context"
	"runtime"
	"strings"
	"time"

	"github.com/btk-project/btk/internal/ratelimit"
)

// Password checks are the one expensive thing an anonymous caller can ask
// for (argon2id: 19 MiB and tens of milliseconds each), and each is a guess.
// passwordGate bounds both: per-account and per-address limits on attempts,
// and at most GOMAXPROCS checks at once.
type passwordGate struct {
	limiter *ratelimit.Limiter
	slots   chan struct{}
}

// Attempt limits: generous for people, ruinous for guessing.
var (
	accountAttempts = ratelimit.Limits{PerMinute: 10, PerDay: 200}
	addressAttempts = ratelimit.Limits{PerMinute: 30, PerDay: 2000}
)

func newPasswordGate() *passwordGate {
	return &passwordGate{limiter: ratelimit.New(), slots: make(chan struct{}, runtime.GOMAXPROCS(0))}
}

// check counts one attempt for the account (by email or id) and the client
// address, then checks password against hash within a bounded number of
// concurrent checks. It returns ErrRateLimited when either budget is spent.
func (g *passwordGate) check(ctx context.Context, now time.Time, account, ip, hash, password string) (bool, error) {
	if !g.limiter.Allow("account:"+strings.ToLower(account), accountAttempts, now, 0).Allowed {
		return false, ErrTooManyAttempts
	}
	if ip != "" && !g.limiter.Allow("ip:"+ip, addressAttempts, now, 0).Allowed {
		return false, ErrTooManyAttempts
	}
	select {
	case g.slots <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-g.slots }()
	return CheckPassword(hash, password), nil
}

// sweep forgets attempt counts that have fully replenished.
func (g *passwordGate) sweep(now time.Time) {
	g.limiter.Dirty() // nothing to persist; Sweep keeps what Dirty has not returned
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
