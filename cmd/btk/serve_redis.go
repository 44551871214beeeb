package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/redisstate"
)

// openShared puts the state instances share (rate limits, revocation,
// password throttles) in the Redis that --redis names. Redis must answer at
// start (a typo should not wait for the first request to show); later
// outages fail key checks closed (503) until it is back.
func openShared(ctx context.Context, cfg serveConfig, svcCfg *btk.Config, log *slog.Logger) (func(), error) {
	st, err := redisstate.Open(cfg.Redis, cfg.RedisPrefix)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := st.Ping(pctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("--redis %s: %w", displayRedis(cfg.Redis), err)
	}
	svcCfg.KeyGate, svcCfg.Throttle = st, st.Throttle()
	log.Info("shared state in Redis", "redis", displayRedis(cfg.Redis), "prefix", cfg.RedisPrefix)
	return func() { st.Close() }, nil
}

// displayRedis is the --redis value as it may be logged: without its password.
func displayRedis(raw string) string {
	return redisstate.Redact(raw)
}
