package btk

import (
	"context"
	"fmt"
	"time"

	"github.com/btk-project/btk/internal/ratelimit"
)

// State that instances must share (docs/design.md#layout, docs/clusters.md#shared-state-in-redis) sits behind KeyGate and
// Throttle. One node uses the in-memory implementations below; several
// instances use internal/redisstate. The service does not know which it has.

// Revision names the state of a workspace's keys (and of the workspace) as
// the shared state knows it: Epoch changes when that state is lost (Redis
// restarted empty), Token each time a change to the workspace's keys or
// limits has committed. A cached key is used only while the revision it was
// read under is still the current one.
type Revision struct {
	Epoch, Token string
}

// KeyCheck is one request of an active key, as the key cache knows it.
type KeyCheck struct {
	KeyID string
	// WorkspacePrefix is the 8-character prefix of the key's workspace (the
	// unit of Revision): it is read from the plaintext before any lookup.
	WorkspacePrefix string
	Limits          ratelimit.Limits
	Now             time.Time
	// DayState is the stored per-day limiter state, used when the shared
	// state has none for the key.
	DayState int64
	// Seen is the revision the cached record was read under.
	Seen Revision
}

// KeyVerdict is a KeyGate's answer.
type KeyVerdict struct {
	ratelimit.Decision
	// Stale reports that Seen is not the current revision: nothing was
	// counted, and the caller must read the key again (the database is the
	// source of truth) and ask again with Seen = Current.
	Stale   bool
	Current Revision
}

// KeyGate decides the rate limit of key-authenticated requests and tells
// whether a cached key record may still be trusted. Its Dirty / Restore /
// Sweep / Forget are those of ratelimit.Limiter: they carry the last use and
// the day state to the database (FlushUsage).
type KeyGate interface {
	// Allow decides one request in one step (for Redis: one round trip).
	Allow(ctx context.Context, c KeyCheck) (KeyVerdict, error)
	// Current answers the current revision of the workspace whose prefix
	// is given, counting nothing: an instance about to refuse a request
	// from a cached record asks it first. A Token of "" matches no record.
	Current(ctx context.Context, workspacePrefix string) (Revision, error)
	// Changed records, after the change has committed and before it is
	// answered, that the keys or limits of the workspace changed, so that
	// every instance reads them again on its next request.
	Changed(ctx context.Context, workspaceID string) error
	// Ready reports whether the shared state accepts the writes the key
	// checks need (readiness): a write, not only an answer.
	Ready(ctx context.Context) error
	Forget(keyID string)
	Dirty() []ratelimit.State
	Restore(states []ratelimit.State)
	Sweep(now time.Time)
}

// Throttle counts password attempts (login, elevate) under a key, and the
// budgets of switches, impersonations and a workspace's changes.
type Throttle interface {
	// Allow counts one attempt under key and decides whether it is within
	// lim (and, when not, when one would be).
	Allow(ctx context.Context, key string, lim ratelimit.Limits, now time.Time) (ratelimit.Decision, error)
	// Forget drops the count under key (e.g. after a success).
	Forget(ctx context.Context, key string) error
	// Sweep forgets counts that have fully replenished.
	Sweep(now time.Time)
}

// localGate is the one-node KeyGate: the in-memory limiter; the key cache is
// exact on its own (the service drops entries after every change).
type localGate struct{ *ratelimit.Limiter }

// NewLocalGate returns the in-memory KeyGate of one node.
func NewLocalGate() KeyGate { return localGate{ratelimit.New()} }

func (g localGate) Allow(_ context.Context, c KeyCheck) (KeyVerdict, error) {
	return KeyVerdict{Decision: g.Limiter.Allow(c.KeyID, c.Limits, c.Now, c.DayState)}, nil
}

// Current: one node has no revisions (its cache is exact on its own).
func (localGate) Current(context.Context, string) (Revision, error) { return Revision{}, nil }

func (localGate) Changed(context.Context, string) error { return nil }
func (localGate) Ready(context.Context) error           { return nil }
func (g localGate) Sweep(now time.Time)                 { g.Limiter.Sweep(now) }

// localThrottle is the one-node Throttle. Counts whose keys a client
// chooses (addresses, emails) live in a bounded limiter that evicts the
// least recently used first; the budgets of existing accounts, of issued
// device tokens and of workspaces, whose number no client chooses, are never
// evicted, so that no flood of made-up addresses and emails makes the server
// forget what an account or a workspace has spent (docs/security.md).
type localThrottle struct {
	open, protected *ratelimit.Limiter
}

// LocalThrottleKeys bounds the keys of the in-memory throttle that clients
// choose (about 200 bytes each: 20 MB at the bound).
const LocalThrottleKeys = 100_000

// NewLocalThrottle returns the in-memory Throttle of one node.
func NewLocalThrottle() Throttle { return newLocalThrottle(LocalThrottleKeys) }

func newLocalThrottle(bound int) localThrottle {
	return localThrottle{open: ratelimit.NewBounded(bound), protected: ratelimit.New()}
}

func (t localThrottle) limiter(key string) *ratelimit.Limiter {
	if protectedKey(key) {
		return t.protected
	}
	return t.open
}

func (t localThrottle) Allow(_ context.Context, key string, lim ratelimit.Limits, now time.Time) (ratelimit.Decision, error) {
	return t.limiter(key).Allow(key, lim, now, 0), nil
}

func (t localThrottle) Forget(_ context.Context, key string) error {
	t.limiter(key).Forget(key)
	return nil
}

func (t localThrottle) Sweep(now time.Time) {
	for _, l := range []*ratelimit.Limiter{t.open, t.protected} {
		l.Dirty() // nothing to persist; Sweep keeps what Dirty has not returned
		l.Sweep(now)
	}
}

func (t localThrottle) lastEviction() time.Time { return t.open.LastEviction() }

// changed tells the other instances, after a change to the workspace's keys
// or limits has committed and before it is answered, to read them again. If
// the shared state does not answer, the change stands (it is committed) but
// is answered UNAVAILABLE, so the caller retries: every change tells again
// when its repeat finds nothing left to change (a revoked key, an update
// already stored), and every instance refuses keys while the shared state
// is unreachable from it. What the server revokes with no caller to repeat
// it is told again by the next sweep (untold.go).
func (s *Service) changed(ctx context.Context, workspaceID string) error {
	if err := s.gate.Changed(ctx, workspaceID); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// Ready reports whether the shared state accepts the writes the key checks
// need (the database is checked apart).
func (s *Service) Ready(ctx context.Context) error { return s.gate.Ready(ctx) }
