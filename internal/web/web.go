// Package web is the owner dashboard (docs/design.md#dashboard): server-rendered pages over
// the domain service, with embedded templates and assets. Every rule is the
// service's; the handlers only translate forms into calls and results into
// pages.
package web

import (
	"embed"
	"github.com/btk-project/btk/internal/gateway"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// Patterns are the paths the dashboard answers on the main listener; the
// rest (/graphql, /healthz, /readyz…) stays the server's.
var Patterns = []string{"GET /{$}", "/login", "/logout", "/keys", "/keys/", "/audit", "/webhooks", "/webhooks/", "/workspaces", "/workspaces/", "/switch", "/assets/"}

// CookieName is the session cookie: the same session JWT as GraphQL login.
const CookieName = "btk_session"

const (
	// maxFormBytes bounds a form post; the largest form is a few hundred bytes.
	maxFormBytes = 16 << 10
	// auditPageSize is the number of audit events per page.
	auditPageSize = 25
	// keysPageSize is the number of keys per page.
	keysPageSize = 50
)

// Handler serves the dashboard.
type Handler struct {
	svc      *btk.Service
	log      *slog.Logger
	clientIP func(*http.Request) string
	pages    map[string]*template.Template
	handler  http.Handler
}

// New returns the dashboard. clientIP attributes a request to an address
// (login throttles, audit rows) the way the rest of the server does.
func New(svc *btk.Service, log *slog.Logger, clientIP func(*http.Request) string) *Handler {
	h := &Handler{svc: svc, log: log, clientIP: clientIP, pages: map[string]*template.Template{}}
	for _, name := range []string{"login", "keys", "key", "rotate", "revoke", "audit", "webhooks", "workspaces", "message"} {
		h.pages[name] = template.Must(template.New("layout.html").Funcs(funcs).
			ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
	}
	assets, _ := fs.Sub(assetFS, "assets")
	files := http.StripPrefix("/assets/", http.FileServerFS(assets))

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.root)
	mux.HandleFunc("GET /login", h.loginForm)
	mux.HandleFunc("POST /login", h.login)
	mux.HandleFunc("POST /logout", h.logout)
	mux.HandleFunc("GET /keys", h.authed(h.keys))
	mux.HandleFunc("POST /keys", h.authed(h.createKey))
	mux.HandleFunc("GET /keys/{id}", h.authed(h.keyDetail))
	mux.HandleFunc("POST /switch", h.authed(h.switchWorkspace))
	mux.HandleFunc("GET /keys/{id}/rotate", h.authed(h.rotateForm))
	mux.HandleFunc("POST /keys/{id}/rotate", h.authed(h.rotateKey))
	mux.HandleFunc("GET /keys/{id}/revoke", h.authed(h.revokeForm))
	mux.HandleFunc("POST /keys/{id}/revoke", h.authed(h.revokeKey))
	mux.HandleFunc("GET /audit", h.authed(h.audit))
	mux.HandleFunc("GET /webhooks", h.authed(h.webhooks))
	mux.HandleFunc("POST /webhooks", h.authed(h.createWebhook))
	mux.HandleFunc("POST /webhooks/{id}/delete", h.authed(h.deleteWebhook))
	mux.HandleFunc("GET /workspaces", h.authed(h.workspaces))
	mux.HandleFunc("POST /workspaces/{id}/impersonate", h.authed(h.impersonate))
	mux.Handle("GET /assets/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") { // no directory listings
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.message(w, r, nil, http.StatusNotFound, "Page not found", "There is nothing at this address.")
	})

	// Cross-origin form posts are refused (Sec-Fetch-Site, else Origin
	// against Host) before any handler runs; SameSite=Strict on the cookie
	// is the second lock on the same door.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.message(w, r, nil, http.StatusForbidden, "Request refused", "Forms can only be sent from the dashboard's own pages.")
	}))
	h.handler = cop.Handler(mux)
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "same-origin")
	// Every page but the assets is personal; a page showing a key must never
	// be stored anywhere.
	hdr.Set("Cache-Control", "no-store")
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	}
	h.handler.ServeHTTP(w, r)
}

// authed resolves the session cookie into the actor, or sends the browser to
// the login page.
func (h *Handler) authed(next func(http.ResponseWriter, *http.Request, *btk.Actor)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a, err := h.actor(r)
		if err != nil {
			if btk.ErrorCode(err) == btk.CodeUnauthenticated {
				clearCookie(w, r)
				http.Redirect(w, r, "/login", http.StatusSeeOther)
				return
			}
			h.fail(w, r, nil, err)
			return
		}
		next(w, r, a)
	}
}

// actor returns the actor of the request's session cookie.
func (h *Handler) actor(r *http.Request) (*btk.Actor, error) {
	c, err := r.Cookie(CookieName)
	if err != nil || c.Value == "" {
		return nil, btk.ErrUnauthenticated
	}
	a, err := h.svc.ResolveSession(r.Context(), c.Value)
	if err != nil {
		return nil, err
	}
	a.IP, a.UserAgent = h.clientIP(r), r.UserAgent()
	return a, nil
}

// #nosec G124 -- HttpOnly and SameSite=Strict always; Secure whenever the request came over TLS, since plain HTTP on 127.0.0.1 (the default) must still log in
func setCookie(w http.ResponseWriter, r *http.Request, token string, expires time.Time) {
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: token, Path: "/", Expires: expires,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

// DeviceCookieName keeps the browser's device token (docs/security.md): a
// login presenting it is not refused for failures elsewhere. It outlives
// logouts; it authenticates nothing by itself.
const DeviceCookieName = "btk_device"

// #nosec G124 -- as setCookie: Secure whenever the request came over TLS
func setDeviceCookie(w http.ResponseWriter, r *http.Request, token string) {
	if token == "" {
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: DeviceCookieName, Value: token, Path: "/login", MaxAge: 400 * 24 * 3600,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

// #nosec G124 -- a cookie being deleted (MaxAge -1), with the same attributes as setCookie
func clearCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

// render executes a page into a buffer first, so that a template failure
// never sends half a page. The page goes out through btk.Printable: a bidi
// override or an invisible character in text someone else chose (a user
// agent, a webhook URL, audit metadata) shows as an escape instead of
// reordering or hiding what the page says. The templates have none of
// their own (TestTemplatesPrintable), so only such text changes.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, name string, status int, data any) {
	var buf strings.Builder
	if err := h.pages[name].Execute(&buf, data); err != nil {
		h.log.ErrorContext(r.Context(), "dashboard template failed", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, btk.Printable(buf.String())) // a client that left is no error of the page
}

// message renders a page with a title and a sentence.
func (h *Handler) message(w http.ResponseWriter, r *http.Request, l *layout, status int, title, text string) {
	if l == nil {
		l = &layout{}
	}
	l.Title = title
	h.render(w, r, "message", status, messagePage{layout: *l, Heading: title, Text: text})
}

// parseForm parses a posted form; one that cannot be read is answered 400
// and parseForm returns false.
func (h *Handler) parseForm(w http.ResponseWriter, r *http.Request) bool {
	if err := r.ParseForm(); err != nil {
		h.message(w, r, nil, http.StatusBadRequest, "Bad request", "The form could not be read.")
		return false
	}
	return true
}

// readOutcome sorts the error (nil included) of a page's read: a read the
// role does not allow is forbidden (the page says so instead of listing);
// any other failure gets the error page, and ok is false (the answer is
// written).
func (h *Handler) readOutcome(w http.ResponseWriter, r *http.Request, l *layout, err error) (forbidden, ok bool) {
	if btk.ErrorCode(err) == btk.CodeForbidden {
		return true, true
	}
	if err != nil {
		h.fail(w, r, l, err)
		return false, false
	}
	return false, true
}

// fail renders a domain error as a page; anything that is not the caller's
// doing is logged and shown as "internal error".
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, l *layout, err error) {
	status := statusOf(err)
	if status == http.StatusInternalServerError {
		h.log.ErrorContext(r.Context(), "dashboard request failed", "path", btk.Redacted(r.URL.Path), "err", err)
	}
	title := http.StatusText(status)
	if status == http.StatusNotFound {
		title = "Not found"
	}
	h.message(w, r, l, status, title, sentence(btk.ErrorMessage(err)))
}

// statusOf is the HTTP status a page answering with err carries: the one
// table of gateway.Status.
func statusOf(err error) int { return gateway.ErrorStatus(err) }
