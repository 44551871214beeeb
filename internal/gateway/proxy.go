package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/btk-project/btk/internal/access"
	"github.com/btk-project/btk/internal/btk"
)

// errBadGateway answers a proxied request whose upstream did not answer.
var errBadGateway = &btk.Error{Code: btk.CodeBadGateway, Message: "the upstream service is unreachable"}

// errGatewayTimeout answers a proxied request whose upstream did not send
// its response headers within the upstream timeout.
var errGatewayTimeout = &btk.Error{Code: btk.CodeGatewayTimeout, Message: "the upstream service did not answer in time"}

// errAboveUpstreamRoot refuses a proxied request whose path climbs above the
// root while the upstream has a base path it would leave.
var errAboveUpstreamRoot = &btk.Error{Code: btk.CodeBadUserInput, Message: "the path climbs above the root"}

// errOpaqueTarget refuses a request target such as "http:admin/x": Go reads
// it as a URL with no path, which the rules would decide as "/", while the
// upstream is sent "admin/x", which some servers (Werkzeug) route as
// /admin/x, past the rules and any base path (docs/gateway.md).
var errOpaqueTarget = &btk.Error{Code: btk.CodeBadUserInput, Message: "the request target is not a path (origin form) or an absolute URL"}

// errKeyNoLongerValid ends a proxied connection whose key was revoked,
// replaced or expired while it lasted; it answers a request whose body was
// still being sent then.
var errKeyNoLongerValid = &btk.Error{Code: btk.CodeUnauthenticated, Message: "the API key of this request is no longer valid"}

// DefaultUpstreamTimeout is --upstream-timeout's default.
const DefaultUpstreamTimeout = 60 * time.Second

// SetUpstreamTimeout sets the time the proxy waits for an upstream's
// response headers (--upstream-timeout; 0: DefaultUpstreamTimeout). Call it
// before Proxy.
func (h *Gateway) SetUpstreamTimeout(d time.Duration) { h.upstreamTimeout = d }

// LimitUpstream bounds the proxy's connections to its upstream (a request
// over it waits for one to be free; 0: no bound). Over HTTP/2 one client
// connection carries many requests, each of which would open an upstream
// connection of its own (docs/security.md#what-a-client-can-make-the-server-hold);
// the share of one client address is the server's (its requests in
// flight). Call it before Proxy.
func (h *Gateway) LimitUpstream(total int) { h.maxUpstreamConns = total }

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
//
// Past the upstream timeout without response headers the answer is 504
// GATEWAY_TIMEOUT. A key-authenticated request is watched from when its
// body starts streaming (or, without a body, once the response has begun):
// when its key stops being valid (revoked, rotated, revoked with all
// others, expired) or would refuse the request now (narrowed, rules
// reloaded), the upload, stream or upgraded connection is cut
// (docs/security.md).
func (h *Gateway) Proxy(upstream *url.URL) http.Handler {
	transport := ProxyTransport()
	transport.MaxConnsPerHost = h.maxUpstreamConns
	transport.ResponseHeaderTimeout = h.upstreamTimeout
	if transport.ResponseHeaderTimeout <= 0 {
		transport.ResponseHeaderTimeout = DefaultUpstreamTimeout
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
			stripIdentityHeaders(pr.Out.Header)
			// btk's own headers are set on the outgoing request, after
			// ReverseProxy removed what the client's Connection header
			// named: a client cannot strip them.
			for _, name := range [...]string{HeaderTenantID, headerKeyID, headerKeyScopes} {
				if v := pr.In.Header[name]; len(v) > 0 {
					pr.Out.Header[name] = v
				}
			}
		},
		Transport: transport,
		ErrorLog:  slog.NewLogLogger(h.log.Handler(), slog.LevelWarn),
		ModifyResponse: func(res *http.Response) error {
			// The response has begun: from now on the key is watched.
			if kw, ok := res.Request.Context().Value(keyWatchKey{}).(*keyWatch); ok {
				kw.start()
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(context.Cause(r.Context()), errKeyNoLongerValid) {
				// Cut while its body was still being sent: answered
				// without reading the rest.
				w.Header().Set("Connection", "close")
				Fail(w, errKeyNoLongerValid)
				dropUnreadBody(w)
				return
			}
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return // the client went away; nobody to answer
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !isDial(err) {
				h.log.WarnContext(r.Context(), "upstream timed out", "err", err, "path", btk.Redacted(r.URL.Path))
				Fail(w, errGatewayTimeout)
				return
			}
			h.log.WarnContext(r.Context(), "upstream unreachable", "err", err, "path", btk.Redacted(r.URL.Path))
			Fail(w, errBadGateway)
		},
	}
	// An upstream with a base path (http://host/api/) gets /x as /api/x, and
	// /../admin as /api/../admin, which it reads as /admin: with a base
	// path, a path that climbs above the root in any reading is refused,
	// whatever the credential.
	based := strings.Trim(upstream.Path, "/") != ""
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accepted := false
		dropConnectionNamed(r.Header)
		dropH2CUpgrade(r.Header)
		// A refusal is answered before the request's body is read, and
		// closes the connection without reading it: net/http reads an
		// unread body (up to 256 KiB) before it answers, and again before
		// it closes, and this listener has no read timeout, so clients
		// without a key that never sent the body they announced held
		// connections until none were left for anyone (docs/security.md).
		body := r.Body != nil && r.Body != http.NoBody
		if body {
			w.Header().Set("Connection", "close")
			defer func() {
				if !accepted {
					dropUnreadBody(w)
				}
			}()
		}
		if r.URL.Opaque != "" {
			Fail(w, errOpaqueTarget)
			return
		}
		if based && !withinRoot(r) {
			Fail(w, errAboveUpstreamRoot)
			return
		}
		var a btk.Actor
		var req btk.KeyRequest
		switch h.check(w, r, entryProxy, &a, &req) {
		case Refused:
			return
		case None:
			Fail(w, errKeyRequired)
			return
		case Key:
			setKeyHeaders(r.Header, &a)
			kw := &keyWatch{svc: h.svc, log: h.log, key: r.Header.Get("X-Api-Key"), req: req}
			var cancel context.CancelCauseFunc
			kw.ctx, cancel = context.WithCancelCause(context.WithValue(r.Context(), keyWatchKey{}, kw))
			kw.cancel = cancel
			defer kw.stop()
			r = r.WithContext(kw.ctx)
			if body {
				// The body streams to the upstream before any answer: an
				// upload must not outlive its key either.
				kw.start()
			}
		}
		accepted = true
		if body {
			delete(w.Header(), "Connection")
		}
		rp.ServeHTTP(w, r)
	})
}

// dropUnreadBody makes net/http close the connection of an answered
// request without reading the rest of its body (an expired read deadline).
// The answer must say "Connection: close" before it is written, or
// net/http reads the body before it writes the answer.
func dropUnreadBody(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
}

// dropConnectionNamed removes the headers r's Connection header names,
// Upgrade apart: ReverseProxy removes them before it forwards (RFC 9110
// §7.6.1), so the key check must decide without them. Otherwise
// "Authorization: Bearer x" with "Connection: Authorization" would be
// decided as a bearer request (passed on for the upstream to check) and
// reach the upstream with no credential at all (docs/gateway.md#btks-reverse-proxy).
// Upgrade stays for ReverseProxy, which forwards an upgrade itself.
func dropConnectionNamed(h http.Header) {
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			name = textproto.TrimString(name)
			if name != "" && !strings.EqualFold(name, "Upgrade") {
				h.Del(name)
			}
		}
	}
}

// dropH2CUpgrade removes an upgrade to cleartext HTTP/2 (Upgrade: h2c), so
// that the request is forwarded as the HTTP/1.1 request it also is. An
// upstream that took the upgrade would answer 101 and the proxy would pass
// the connection through as it does a WebSocket's: HTTP/2 requests to any
// path, with any X-Tenant-Id, that btk never sees ("h2c smuggling";
// docs/gateway.md#btks-reverse-proxy). A server may ignore an Upgrade, so
// nothing a client may rely on is lost.
func dropH2CUpgrade(h http.Header) {
	for _, v := range h["Upgrade"] {
		for proto := range strings.SplitSeq(v, ",") {
			name, _, _ := strings.Cut(textproto.TrimString(proto), "/")
			if strings.EqualFold(name, "h2c") {
				h.Del("Upgrade")
				h.Del("Http2-Settings")
				return
			}
		}
	}
}

// withinRoot reports whether every reading of r's path stays below the
// root (access.Normalize and access.Readings refuse one that climbs above
// it).
func withinRoot(r *http.Request) bool {
	p := r.URL.EscapedPath()
	if p == "" {
		return true // an authority-form CONNECT: the upstream is asked for "/"
	}
	if _, ok := access.Normalize(p); !ok {
		return false
	}
	_, ok := access.Readings(r.Method, p)
	return ok
}

// isDial reports whether err is a failure to connect to the upstream (not
// reachable: 502), rather than a wait for its answer (504).
func isDial(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

type keyWatchKey struct{}

// keyWatch checks, every KeyWatchInterval once the response has begun,
// that the key of a proxied request is still valid, and cancels the
// request when it is not: httputil.ReverseProxy then closes the upstream
// connection, which ends a stream or an upgraded (WebSocket) tunnel. A
// timer, not a goroutine, waits between checks.
type keyWatch struct {
	svc *btk.Service
	log *slog.Logger
	key string
	// req is the request the key was accepted for: a key narrowed since
	// (networks, scopes) or rules reloaded since that refuse it end the
	// connection as a revocation does.
	req    btk.KeyRequest
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

func (kw *keyWatch) start() {
	kw.mu.Lock()
	defer kw.mu.Unlock()
	if kw.timer == nil && !kw.stopped {
		kw.timer = time.AfterFunc(kw.svc.KeyWatchInterval(), kw.check)
	}
}

func (kw *keyWatch) check() {
	if kw.ctx.Err() != nil {
		return
	}
	ok, err := kw.svc.KeyStillValid(kw.ctx, kw.key, &kw.req)
	if err != nil {
		// A store that does not answer for a moment does not end every
		// stream: the next check decides.
		kw.log.WarnContext(kw.ctx, "could not recheck the key of a proxied connection", "err", err)
		ok = true
	}
	if !ok {
		kw.cancel(errKeyNoLongerValid)
		return
	}
	kw.mu.Lock()
	if !kw.stopped {
		kw.timer.Reset(kw.svc.KeyWatchInterval())
	}
	kw.mu.Unlock()
}

func (kw *keyWatch) stop() {
	kw.mu.Lock()
	kw.stopped = true
	if kw.timer != nil {
		kw.timer.Stop()
	}
	kw.mu.Unlock()
	kw.cancel(nil)
}

// stripIdentityHeaders removes every header that names a key or a tenant in
// any spelling: X-Api-Key (the upstream never sees a key, checked or not),
// and X-Tenant-Id and X-Api-Key-Id, also as X_Tenant_Id and the like, which
// CGI-style upstreams (PHP, WSGI, Rack) read as the same variable. Go does
// not canonicalise names with underscores, so exact deletes would miss them.
func stripIdentityHeaders(h http.Header) {
	for name := range h {
		switch len(name) {
		case len("X-Api-Key"), len("X-Tenant-Id"), len("X-Api-Key-Id"), len("X-Api-Key-Scopes"):
			switch strings.ReplaceAll(strings.ToLower(name), "_", "-") {
			case "x-api-key", "x-tenant-id", "x-api-key-id", "x-api-key-scopes":
				delete(h, name)
			}
		}
	}
}
