package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// errBadGateway answers a proxied request whose upstream did not answer.
var errBadGateway = &btk.Error{Code: "BAD_GATEWAY", Message: "the upstream service is unreachable"}

// ProxyTransport is the transport of the reverse proxy: http.DefaultTransport
// with enough idle connections per host for a busy upstream (the default
// keeps 2, so a loaded proxy would open a connection per request).
func ProxyTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 1024
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return t
}

// Proxy returns the handler of the proxy listener (docs/gateway.md#btks-reverse-proxy): every request
// gets the decision of /v1/authorize; btk answers the refusals and forwards
// the rest to upstream without X-Api-Key, with X-Tenant-Id and X-Api-Key-Id
// set from an accepted key (client-sent ones are dropped by the key check)
// and X-Forwarded-For/-Host/-Proto set. Authorization passes unchanged.
// Bodies stream both ways and upgrades (WebSocket) pass: httputil.ReverseProxy
// copies as data arrives and flushes at once a response of unknown length or
// an event stream.
func (h *Gateway) Proxy(upstream *url.URL) http.Handler {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
			stripIdentityHeaders(pr.Out.Header)
			// btk's own headers are set on the outgoing request, after
			// ReverseProxy removed what the client's Connection header
			// named: a client cannot strip them.
			for _, name := range [...]string{HeaderTenantID, headerKeyID} {
				if v := pr.In.Header[name]; len(v) > 0 {
					pr.Out.Header[name] = v
				}
			}
		},
		Transport: ProxyTransport(),
		ErrorLog:  slog.NewLogLogger(h.log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return // the client went away; nobody to answer
			}
			h.log.WarnContext(r.Context(), "upstream unreachable", "err", err, "path", r.URL.Path)
			WriteError(w, http.StatusBadGateway, errBadGateway)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch c, a := h.Check(w, r); c {
		case Refused:
			return
		case None:
			WriteError(w, http.StatusUnauthorized, errKeyRequired)
			return
		case Key:
			setKeyHeaders(r.Header, a)
		}
		rp.ServeHTTP(w, r)
	})
}

// stripIdentityHeaders removes every header that names a key or a tenant in
// any spelling: X-Api-Key (the upstream never sees a key, checked or not),
// and X-Tenant-Id and X-Api-Key-Id, also as X_Tenant_Id and the like, which
// CGI-style upstreams (PHP, WSGI, Rack) read as the same variable. Go does
// not canonicalise names with underscores, so exact deletes would miss them.
func stripIdentityHeaders(h http.Header) {
	for name := range h {
		switch len(name) {
		case len("X-Api-Key"), len("X-Tenant-Id"), len("X-Api-Key-Id"):
			switch strings.ReplaceAll(strings.ToLower(name), "_", "-") {
			case "x-api-key", "x-tenant-id", "x-api-key-id":
				delete(h, name)
			}
		}
	}
}
