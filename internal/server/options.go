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

// WithUpstreamConns bounds the reverse proxy's upstream connections
// (total) and the proxied requests in flight from one client address
// (perAddress); 0 leaves the process's connection guard's figures
// (docs/security.md#what-a-client-can-make-the-server-hold).
func WithUpstreamConns(total, perAddress int) Option {
	return func(h *Handler) { h.upstreamConns, h.upstreamPerAddress = total, perAddress }
}
