package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/redisstate"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// openShared puts the state instances share (rate limits, revocation,
// password throttles) in the Redis that --redis names. Redis must answer at
// start (a typo should not wait for the first request to show); later
// outages fail key checks closed (503) until it is back.
func openShared(ctx context.Context, cfg serveConfig, svcCfg *btk.Config, reg prometheus.Registerer, log *slog.Logger) (func(), error) {
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
	// A setting that breaks a guarantee only when memory runs short or a
	// failover meets an unsynced replica is named, not refused
	// (docs/clusters.md#shared-state-in-redis).
	warnings, err := st.Warnings(pctx)
	if err != nil {
		log.Warn("could not read the Redis memory and replication settings", "redis", redisstate.Redact(cfg.Redis), "err", err)
	}
	for _, w := range warnings {
		log.Warn(w, "redis", redisstate.Redact(cfg.Redis))
	}
	stop := make(chan struct{})
	var watching sync.WaitGroup
	if st.Kind() == redisstate.Sentinel {
		watchSentinels(st, reg, log, stop, &watching)
	}
	return func() { close(stop); watching.Wait(); _ = st.Close() }, nil
}

// watchSentinels tells the operator when fewer than a majority of the
// sentinels answer: key checks go on, on the primary btk has, and /readyz
// stays 200, but every change answers UNAVAILABLE until they are back, and a
// failover would not be followed (docs/clusters.md#failover). Metrics
// btk_redis_sentinels_answering and btk_redis_sentinels_listed, and one log
// line when the majority is lost and one when it is back.
func watchSentinels(st *redisstate.State, reg prometheus.Registerer, log *slog.Logger, stop <-chan struct{}, wg *sync.WaitGroup) {
	if reg != nil {
		reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "btk_redis_sentinels_answering",
				Help: "Sentinels of the redis+sentinel:// URL that answered when last asked (every 5 s); below a majority of those listed, every change answers UNAVAILABLE.",
			}, func() float64 { n, _ := st.Sentinels(); return float64(n) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "btk_redis_sentinels_listed",
				Help: "Sentinels listed in the redis+sentinel:// URL.",
			}, func() float64 { _, n := st.Sentinels(); return float64(n) }),
		)
	}
	wg.Go(func() {
		t := time.NewTicker(sentinelsLogEvery)
		defer t.Stop()
		lost := false
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			answering, listed := st.Sentinels()
			switch majority := answering > listed/2; {
			case !majority && !lost:
				lost = true
				log.Warn("fewer than a majority of the sentinels answer: key checks go on, every change answers UNAVAILABLE until they are back",
					"answering", answering, "listed", listed)
			case majority && lost:
				lost = false
				log.Info("a majority of the sentinels answer again", "answering", answering, "listed", listed)
			}
		}
	})
}

// sentinelsLogEvery is how often watchSentinels reads the count.
const sentinelsLogEvery = time.Second

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
