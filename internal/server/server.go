// Package server wires btk's HTTP surface together: the main listener's
// routes (POST /graphql from internal/graphql; /v1/authorize, POST /v1/leaks
// and the proxy from internal/gateway; the dashboard, /healthz and /readyz),
// the access log, TLS with reload, Prometheus metrics on their own listener,
// and the connection guard that bounds the connections of every listener by
// the descriptor limit, and one client address's connections and requests
// in flight by its share (conns.go, docs/security.md). The rules live in
// internal/btk; this package only mounts them.
package server

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/gateway"
	"github.com/btk-project/btk/internal/graphql"
)

// Handler serves the main listener: POST /graphql, /v1/authorize, POST
// /v1/leaks (docs/leaks.md), GET /healthz, GET /readyz and what Mount adds.
type Handler struct {
	svc      *btk.Service
	store    btk.Store
	log      *slog.Logger
	gw       *gateway.Gateway
	mux      *http.ServeMux
	root     http.Handler            // mux, within the client address's requests in flight
	proxies  *gateway.TrustedProxies // whose X-Forwarded-For is believed (options.go)
	leakKeys *btk.LeakReportKeys     // sign acceptable leak reports (options.go)
	// upstreamTimeout bounds the proxy's wait for response headers (options.go).
	upstreamTimeout time.Duration
	// upstreamConns bounds the proxy's upstream connections (options.go).
	upstreamConns int
}

// New returns the HTTP handler of the service. The logger never receives a
// key, password, token, or credential header.
func New(svc *btk.Service, store btk.Store, log *slog.Logger, opts ...Option) *Handler {
	h := &Handler{svc: svc, store: store, log: log, mux: http.NewServeMux()}
	h.root = limitInFlight(h.mux)
	for _, o := range opts {
		o(h)
	}
	h.gw = gateway.New(svc, log, h.proxies)
	h.gw.SetLeakReportKeys(h.leakKeys)
	h.gw.SetUpstreamTimeout(h.upstreamTimeout)
	// Over HTTP/2 one client connection carries many requests, each of
	// which would open its own upstream connection: without this bound
	// (and one address's share of requests in flight, limitInFlight) the
	// descriptors the connection guard leaves for them ran out, and every
	// listener stopped accepting.
	if h.upstreamConns == 0 {
		h.upstreamConns = processGuard.Limit()
	}
	h.gw.LimitUpstream(h.upstreamConns)

	h.mux.Handle("POST /graphql", graphql.New(svc, h.gw, log))
	h.mux.HandleFunc("/v1/authorize", h.gw.Authorize)
	// The same for GET, the method forward-auth callers use: ServeMux tries
	// the method's patterns first, and a GET that misses them costs a walk
	// and an allocation before the pattern for any method is tried.
	h.mux.HandleFunc("GET /v1/authorize", h.gw.Authorize)
	h.mux.HandleFunc("POST /v1/leaks", h.gw.Leaks)
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	h.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		// A database that stops answering is not ready: 503 within
		// ReadyTimeout, before a load balancer's probe gives up on its own
		// (docs/clusters.md#postgresql).
		ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
		err := store.Ping(ctx)
		cancel()
		if err != nil {
			h.log.ErrorContext(r.Context(), "readiness check failed", "err", err)
			http.Error(w, "database unavailable", http.StatusServiceUnavailable)
			return
		}
		if err := svc.Ready(r.Context()); err != nil {
			h.log.ErrorContext(r.Context(), "readiness check failed", "err", err)
			http.Error(w, "shared state (Redis) unavailable", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return h
}

// ReadyTimeout bounds /readyz's database check: a PostgreSQL that does not
// answer makes the instance not ready within it (docs/operating.md).
const ReadyTimeout = 3 * time.Second

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.serveLogged(h.root, w, r, true)
}

// serveLogged serves r with next and, at DEBUG, writes its access-log line.
// The line names no header (credentials travel in headers) and no query.
// On the main listener (routed) it names the route that matched (the
// pattern ServeMux sets, GET /keys/{id}), not the path: a client makes the
// path up, and a secret pasted into it that does not look like a btk_ key
// was logged whole (an unmatched GET /QSECRET5/x). The proxy's paths are
// the upstream's, whose routes btk does not know: they are logged with keys
// redacted, as its WARN lines are.
func (h *Handler) serveLogged(next http.Handler, w http.ResponseWriter, r *http.Request, routed bool) {
	if !h.log.Enabled(r.Context(), slog.LevelDebug) {
		next.ServeHTTP(w, r)
		return
	}
	start := time.Now()
	// statusWriter passes Flush and Hijack on, which the proxy's streamed
	// answers and upgrades need.
	sw := &statusWriter{ResponseWriter: w}
	next.ServeHTTP(sw, r)
	where := slog.Any("path", btk.Redacted(r.URL.Path)) // a key pasted into a URL is redacted
	if routed {
		where = slog.String("route", cmp.Or(r.Pattern, "(none)"))
	}
	h.log.DebugContext(r.Context(), "request", "method", r.Method, where, "status", sw.code(),
		"duration", time.Since(start), "ip", h.gw.ClientIP(r))
}

// Proxy returns the handler of the proxy listener (--proxy-addr): the
// gateway's reverse proxy to upstream, with the access log of the main
// listener and its share of requests in flight per client address.
func (h *Handler) Proxy(upstream *url.URL) http.Handler {
	proxy := limitInFlight(h.gw.Proxy(upstream))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.serveLogged(proxy, w, r, false) })
}
