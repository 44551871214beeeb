package server

// Option configures a Handler.
type Option func(*Handler)

// WithTrustedProxies makes X-Forwarded-For believed from these peers only
// (nil: from none).
func WithTrustedProxies(tp *TrustedProxies) Option {
	return func(h *Handler) { h.proxies = tp }
}
