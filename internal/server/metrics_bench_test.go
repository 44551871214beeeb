//go:build unix

package server_test

// The cost of the metrics on the hot path (docs/operating.md#metrics), side by side in one
// run on the same seeded database:
//
//	go test ./internal/server -run '^$' -bench HotPathMetrics -benchmem -count 5
//
// metrics=off is `btk serve` without --metrics-addr (the domain observer is
// the no-op); metrics=on adds the request counter and histogram around the
// handler and the key-check and key-cache counters. Compare cpu-ns/op.

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/server"
	"github.com/btk-project/btk/internal/store/sqlite"
)

func BenchmarkHotPathMetrics(b *testing.B) {
	bdb := seedBenchDB(b, b.TempDir(), 1_000)
	keys := bdb.active
	ord := order(len(keys), 1)
	for _, on := range []bool{false, true} {
		name := "metrics=off"
		if on {
			name = "metrics=on"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			db, err := sqlite.Open(ctx, bdb.path)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { db.Close() })
			cfg := btk.Config{DefaultPerMinute: btk.MaxPerMinute, DefaultPerDay: btk.MaxPerDay}
			var m *server.Metrics
			if on {
				m = server.NewMetrics(server.BuildInfo{})
				cfg.Observer = m
			}
			svc, err := btk.NewService(ctx, db, []byte(strings.Repeat("s", 32)), cfg)
			if err != nil {
				b.Fatal(err)
			}
			log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
			var h http.Handler = server.New(svc, db, log)
			if on {
				h = m.Instrument("other", h)
				m.CollectStore(db)
			}
			warmKeys(b, svc, keys)
			b.Run("middleware", measure(probeSerially(h, keys, ord)))
			b.Run("middleware/parallel", measure(probeInParallel(h, keys)))
			b.Run("healthz", measure(healthzLoop(h)))
		})
	}
}

// BenchmarkMetricsOverhead isolates what the metrics add to one request:
// the Instrument wrapper around a handler that does nothing, and the two
// observer calls of a key check.
//
//	go test ./internal/server -run '^$' -bench MetricsOverhead -benchmem
func BenchmarkMetricsOverhead(b *testing.B) {
	m := server.NewMetrics(server.BuildInfo{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /graphql", func(w http.ResponseWriter, r *http.Request) {})
	req := httptest.NewRequest(http.MethodPost, "/graphql", nil)
	rec := httptest.NewRecorder()
	b.Run("bare", measure(func(b *testing.B) {
		for b.Loop() {
			mux.ServeHTTP(rec, req)
		}
	}))
	h := m.Instrument("other", mux)
	b.Run("instrumented", measure(func(b *testing.B) {
		for b.Loop() {
			h.ServeHTTP(rec, req)
		}
	}))
	b.Run("instrumented/parallel", measure(func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			req := httptest.NewRequest(http.MethodPost, "/graphql", nil)
			rec := httptest.NewRecorder()
			for pb.Next() {
				h.ServeHTTP(rec, req)
			}
		})
	}))
	b.Run("key-check-observers", measure(func(b *testing.B) {
		for b.Loop() {
			m.KeyCacheLookup(true)
			m.KeyChecked(btk.KeyCheckResultOf(nil))
		}
	}))
}
