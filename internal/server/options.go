package server

import (
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/gateway"
)

// Option configures a Handler.
type Option func(*Handler)

// WithTrustedProxies makes X-Forwarded-For believed from these peers only
// (nil: from none).
func WithTrustedProxies(tp *gateway.TrustedProxies) Option {
	return func(h *Handler) { h.proxies = tp }
}

// WithLeakReportKeys accepts leak reports at POST /v1/leaks signed by these
// keys (--leak-report-keys; nil: only a platform admin's bearer token).
func WithLeakReportKeys(keys *btk.LeakReportKeys) Option {
	return func(h *Handler) { h.leakKeys = keys }
}

// WithUpstreamTimeout bounds the reverse proxy's wait for the upstream's
// response headers (--upstream-timeout; 0: gateway.DefaultUpstreamTimeout).
func WithUpstreamTimeout(d time.Duration) Option {
	return func(h *Handler) { h.upstreamTimeout = d }
}

// WithUpstreamConns bounds the reverse proxy's upstream connections; 0
// leaves the process's connection limit
// (docs/security.md#what-a-client-can-make-the-server-hold). One client
// address's requests in flight are its share of the connection guard's
// (ConnGuard.PerAddress).
func WithUpstreamConns(total int) Option {
	return func(h *Handler) { h.upstreamConns = total }
}
