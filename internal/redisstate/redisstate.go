// Package redisstate keeps the state that several btk instances must share
// in Redis: the two-window rate limits of keys, the revision that tells an
// instance its cached key records may be stale (revocation), and the
// password throttles. It implements btk.KeyGate and btk.Throttle.
//
// A key-authenticated request costs one round trip: one Lua script (gcra.lua)
// checks the epoch and the workspace's revision token and, when the cached
// record is current, decides and commits both rate-limit windows atomically.
package redisstate

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/ratelimit"
	"github.com/redis/go-redis/v9"
)

//go:embed gcra.lua
var gcraSource string

var gcra = redis.NewScript(gcraSource)

// Short timeouts: a key check that cannot reach Redis fails closed (503)
// quickly, and the pool reconnects by itself once Redis is back.
const (
	dialTimeout = time.Second
	ioTimeout   = 500 * time.Millisecond
)

// State is the shared state on one Redis. It is safe for concurrent use.
type State struct {
	rdb    *redis.Client
	prefix string
	// epoch is the value this instance creates the epoch key with when it
	// finds it missing (random: unlike any epoch before).
	epoch string
	// now, when set, replaces the Redis server's clock (tests).
	now func() time.Time

	mu    sync.Mutex
	usage map[string]ratelimit.State // day states and last uses not yet flushed
}

// Open connects to the Redis at url (redis:// or rediss://; timeouts may be
// given as URL parameters, e.g. ?read_timeout=1s) and keeps its keys under
// prefix. It does not wait for Redis: use Ping.
func Open(url, prefix string) (*State, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("--redis: %w", err)
	}
	if opt.DialTimeout == 0 {
		opt.DialTimeout = dialTimeout
	}
	if opt.ReadTimeout == 0 {
		opt.ReadTimeout = ioTimeout
	}
	if opt.WriteTimeout == 0 {
		opt.WriteTimeout = ioTimeout
	}
	if opt.PoolTimeout == 0 {
		opt.PoolTimeout = time.Second
	}
	opt.MaxRetries = 1
	if opt.DialerRetries == 0 {
		// A Redis that refuses connections should cost a request
		// milliseconds, not the default half second of dial retries.
		opt.DialerRetries, opt.DialerRetryTimeout = 2, 20*time.Millisecond
	}
	return New(redis.NewClient(opt), prefix), nil
}

// New returns the shared state on rdb under prefix.
func New(rdb *redis.Client, prefix string) *State {
	return &State{rdb: rdb, prefix: prefix, epoch: random(), usage: make(map[string]ratelimit.State)}
}

// UseClock makes the rate limits follow now instead of the Redis server's
// clock: for tests that move time. Instances that share state must use
// one clock; in production that is the Redis server's.
func (s *State) UseClock(now func() time.Time) { s.now = now }

// Close closes the connections.
func (s *State) Close() error { return s.rdb.Close() }

// Client is the underlying client (for tests and benchmarks).
func (s *State) Client() *redis.Client { return s.rdb }

// Ping reports whether Redis answers.
func (s *State) Ping(ctx context.Context) error { return s.rdb.Ping(ctx).Err() }

// Ready reports whether Redis accepts the writes btk needs (readiness): it
// writes a short-lived key under the prefix. A Redis that answers but does
// not write (a replica, an old primary back as one: READONLY; out of memory
// under noeviction: OOM) would answer PING while every key check fails.
func (s *State) Ready(ctx context.Context) error {
	return s.rdb.Set(ctx, s.prefix+"ready", s.epoch, 10*time.Second).Err()
}

func random() string {
	b := make([]byte, 16)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (s *State) epochKey() string              { return s.prefix + "epoch" }
func (s *State) revKey(wsPrefix string) string { return s.prefix + "rev:" + wsPrefix }

// nowArgs returns the two time arguments of the script: empty for the
// Redis server's clock (one clock for every instance).
func (s *State) nowArgs() (any, any) {
	if s.now == nil {
		return "", ""
	}
	t := s.now().UnixNano()
	return t / 1e9, t % 1e9
}

// run evaluates the script and parses its answer.
func (s *State) run(ctx context.Context, keys []string, args ...any) (verdict string, vals [6]int64, rev btk.Revision, err error) {
	res, err := gcra.Run(ctx, s.rdb, keys, args...).Slice()
	if err != nil {
		return "", vals, rev, err
	}
	if len(res) == 0 {
		return "", vals, rev, errors.New("redisstate: empty script answer")
	}
	verdict, _ = res[0].(string)
	switch {
	case verdict == "S" && len(res) == 3:
		rev.Epoch, _ = res[1].(string)
		rev.Token, _ = res[2].(string)
		return verdict, vals, rev, nil
	case (verdict == "A" || verdict == "R") && len(res) == 7:
		for i := range vals {
			n, ok := res[i+1].(int64)
			if !ok {
				return "", vals, rev, fmt.Errorf("redisstate: bad script answer %v", res)
			}
			vals[i] = n
		}
		return verdict, vals, rev, nil
	}
	return "", vals, rev, fmt.Errorf("redisstate: bad script answer %v", res)
}

// Allow checks the revision the cached record was read under and, when it
// is current, decides the request: one round trip.
func (s *State) Allow(ctx context.Context, c btk.KeyCheck) (btk.KeyVerdict, error) {
	lm, ld := c.Limits.Clamp()
	nowS, nowN := s.nowArgs()
	keys := []string{s.epochKey(), s.revKey(c.WorkspacePrefix), s.prefix + "rl:" + c.KeyID}
	verdict, v, rev, err := s.run(ctx, keys, c.Seen.Epoch, c.Seen.Token, lm, ld,
		c.DayState/1e9, c.DayState%1e9, nowS, nowN, s.epoch)
	if err != nil {
		return btk.KeyVerdict{}, err
	}
	if verdict == "S" {
		return btk.KeyVerdict{Stale: true, Current: rev}, nil
	}
	lim := ratelimit.Limits{PerMinute: int(lm), PerDay: int(ld)}
	d := ratelimit.Decide(lim, verdict == "A", ratelimit.Relative{D: v[0], Frac: v[1]}, ratelimit.Relative{D: v[2], Frac: v[3]})
	if d.Allowed {
		s.record(c.KeyID, v[4]*1e9+v[5], c.Now.UnixNano())
	}
	return btk.KeyVerdict{Decision: d}, nil
}

// record keeps an accepted request's day state and time for FlushUsage.
func (s *State) record(keyID string, dayState, at int64) {
	s.mu.Lock()
	u := s.usage[keyID]
	// Concurrent requests of a key record in any order: the latest day
	// state is the largest.
	u.Key, u.DayState, u.LastAllowed = keyID, max(u.DayState, dayState), max(u.LastAllowed, at)
	s.usage[keyID] = u
	s.mu.Unlock()
}

// Changed gives the workspace a new revision token: every instance's cached
// records of its keys (and its limits) are read again before their next use.
// The token has no expiry, so that no record read before it can pass after.
func (s *State) Changed(ctx context.Context, workspaceID string) error {
	if len(workspaceID) < btk.WorkspacePrefixLen {
		return fmt.Errorf("redisstate: bad workspace id %q", workspaceID)
	}
	return s.rdb.Set(ctx, s.revKey(workspaceID[:btk.WorkspacePrefixLen]), random(), 0).Err()
}

// Dirty returns the day states and last uses of the keys accepted since the
// previous call.
func (s *State) Dirty() []ratelimit.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.usage) == 0 {
		return nil
	}
	out := make([]ratelimit.State, 0, len(s.usage))
	for _, u := range s.usage {
		out = append(out, u)
	}
	clear(s.usage)
	return out
}

// Restore hands back states that could not be persisted.
func (s *State) Restore(states []ratelimit.State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range states {
		if u, ok := s.usage[st.Key]; ok {
			u.DayState, u.LastAllowed = max(u.DayState, st.DayState), max(u.LastAllowed, st.LastAllowed)
			s.usage[st.Key] = u
			continue
		}
		s.usage[st.Key] = st
	}
}

// Forget: a revoked key's windows expire in Redis by themselves.
func (s *State) Forget(string) {}

// Sweep: Redis expires idle windows (each state key lives until both of its
// windows are full again).
func (s *State) Sweep(time.Time) {}

// Throttle returns the password throttle on the same Redis.
func (s *State) Throttle() btk.Throttle { return throttle{s} }

type throttle struct{ s *State }

// Allow counts one attempt under key.
func (t throttle) Allow(ctx context.Context, key string, lim ratelimit.Limits, _ time.Time) (bool, error) {
	lm, ld := lim.Clamp()
	nowS, nowN := t.s.nowArgs()
	verdict, _, _, err := t.s.run(ctx, []string{t.key(key)}, "", "", lm, ld, 0, 0, nowS, nowN, "")
	return verdict == "A", err
}

// Forget drops the count under key.
func (t throttle) Forget(ctx context.Context, key string) error {
	return t.s.rdb.Del(ctx, t.key(key)).Err()
}

// key is the Redis key of a throttle key: hashed, so that no email or
// address is written to Redis.
func (t throttle) key(key string) string {
	h := sha256.Sum256([]byte(key))
	return t.s.prefix + "th:" + hex.EncodeToString(h[:16])
}

func (throttle) Sweep(time.Time) {}

var (
	_ btk.KeyGate  = (*State)(nil)
	_ btk.Throttle = throttle{}
)

// Redact returns a Redis URL without its password, for logs.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "redis://(unparsable URL)"
	}
	return u.Redacted()
}

// Wipe deletes every key under the prefix (tests; what a Redis restarted
// empty looks like to this prefix).
func (s *State) Wipe(ctx context.Context) error {
	iter := s.rdb.Scan(ctx, 0, s.prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil || len(keys) == 0 {
		return err
	}
	return s.rdb.Del(ctx, keys...).Err()
}
