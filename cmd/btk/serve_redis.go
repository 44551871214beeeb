package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/redisstate"
	"github.com/redis/go-redis/v9"
)

// openShared puts the state instances share (rate limits, revocation,
// password throttles) in the Redis that --redis names. Redis must answer at
// start (a typo should not wait for the first request to show); later
// outages fail key checks closed (503) until it is back.
func openShared(ctx context.Context, cfg serveConfig, svcCfg *btk.Config, log *slog.Logger) (func(), error) {
	// Before the first dial: go-redis's messages at start (a Redis that
	// does not answer, Sentinel's discoveries) go to the server log too, as
	// JSON under --log-format json, not as plain lines of Go's log.
	redis.SetLogger(&redisLog{log: log})
	st, err := redisstate.Open(cfg.Redis, cfg.RedisPrefix)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// Ready, not a ping: the server must be a primary that takes writes.
	if err := st.Ready(pctx); err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("--redis %s: %w", redisstate.Redact(cfg.Redis), err)
	}
	svcCfg.KeyGate, svcCfg.Throttle = st, st.Throttle()
	log.Info("shared state in Redis", "redis", redisstate.Redact(cfg.Redis), "kind", st.Kind().String(), "prefix", cfg.RedisPrefix)
	// A setting that breaks a guarantee only when memory runs short is
	// named, not refused (docs/clusters.md#shared-state-in-redis).
	warnings, err := st.Warnings(pctx)
	if err != nil {
		log.Warn("could not read the Redis memory settings", "redis", redisstate.Redact(cfg.Redis), "err", err)
	}
	for _, w := range warnings {
		log.Warn(w, "redis", redisstate.Redact(cfg.Redis))
	}
	return func() { _ = st.Close() }, nil
}

// redisLog sends go-redis's own messages (dial failures while Redis is
// down) to the server log, at warning level, once per 10 seconds at most:
// every key check reports the outage already (503).
type redisLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	last time.Time
}

func (l *redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.mu.Lock()
	now := time.Now()
	quiet := now.Sub(l.last) < 10*time.Second
	if !quiet {
		l.last = now
	}
	l.mu.Unlock()
	if !quiet {
		l.log.WarnContext(ctx, "redis: "+fmt.Sprintf(format, v...))
	}
}
