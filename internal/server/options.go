package server

import "github.com/btk-project/btk/internal/gateway"

// Option configures a Handler.
type Option func(*Handler)

// WithTrustedProxies makes X-Forwarded-For believed from these peers only
// (nil: from none).
func WithTrustedProxies(tp *gateway.TrustedProxies) Option {
	return func(h *Handler) { h.proxies = tp }
}
