// Package server is btk's HTTP surface: authentication and rate-limit
// middleware, the gqlgen handler and its resolvers, health endpoints.
package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/99designs/gqlgen/graphql/executor"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/server/graph"
	"github.com/vektah/gqlparser/v2/ast"
)

// Request bounds.
const (
	// maxBodyBytes bounds a GraphQL request body: about ten times the
	// largest real operation of this API (createApiKey with 32 scopes of 64
	// characters and a 64-character name, or a login with a 1,024-byte
	// password: under 7 KB; TestLargestOperationFits measures it).
	maxBodyBytes = 64 << 10
	// maxComplexity bounds an operation's cost (one per field by default).
	maxComplexity = 500
	// anonymousExpansion bounds the fields a document of an anonymous or
	// API-key caller expands to (fragments counted once each), checked
	// before validation.
	anonymousExpansion = 100
	// parserTokenLimit bounds the size of a GraphQL document.
	parserTokenLimit = 2000
)

// Handler serves POST /graphql, GET /healthz and GET /readyz.
type Handler struct {
	svc     *btk.Service
	store   btk.Store
	log     *slog.Logger
	graphql http.Handler
	mux     *http.ServeMux
	proxies *TrustedProxies // whose X-Forwarded-For is believed (options.go)
}

// New returns the HTTP handler of the service. The logger never receives a
// key, password, token, or credential header.
func New(svc *btk.Service, store btk.Store, log *slog.Logger, opts ...Option) *Handler {
	h := &Handler{svc: svc, store: store, log: log, mux: http.NewServeMux()}
	for _, o := range opts {
		o(h)
	}

	cfg := graph.Config{Resolvers: &Resolver{svc: svc}}
	// A password check (argon2id) is the costliest thing a request can ask
	// for: at most one per operation, however many aliases it uses.
	cfg.Complexity.Mutation.Login = func(int, string, string, *string, *string) int { return maxComplexity }
	cfg.Complexity.Mutation.Elevate = func(int, string) int { return maxComplexity }
	cfg.Complexity.Mutation.ChangePassword = func(int, string, string) int { return maxComplexity }
	es := graph.NewExecutableSchema(cfg)
	// Parsing and validating a query costs as much as the rest of a request:
	// cache the parsed documents (only valid ones are cached, so the two
	// executors can share the cache).
	cache := lru.New[*ast.QueryDocument](1000)
	limit := newComplexityLimit(maxComplexity)
	newExec := func(suggest bool) *executor.Executor {
		exec := executor.New(es)
		// Validation cost grows fast with the size of a document: bound it
		// before anything else looks at the query (the largest client
		// operation uses a few hundred tokens).
		exec.SetParserTokenLimit(parserTokenLimit)
		exec.SetQueryCache(cache)
		// "Did you mean" suggestions spell out the schema: for users only.
		exec.SetDisableSuggestion(!suggest)
		exec.Use(limit) // also decides introspection
		exec.AroundFields(markResolverErrors)
		exec.SetErrorPresenter(h.presentError)
		exec.SetRecoverFunc(func(ctx context.Context, p any) error {
			h.log.ErrorContext(ctx, "panic in resolver", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			return errors.New("panic in resolver")
		})
		return exec
	}
	gql := &graphqlHandler{exec: newExec(false), userExec: newExec(true),
		expansion: newExpansionLimit(maxComplexity, anonymousExpansion, parserTokenLimit, cache)}
	h.graphql = gql

	h.mux.Handle("POST /graphql", h.authenticate(gql))
	h.mux.HandleFunc("/v1/authorize", h.authorize)
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	h.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := store.Ping(r.Context()); err != nil {
			h.log.ErrorContext(r.Context(), "readiness check failed", "err", err)
			http.Error(w, "database unavailable", http.StatusServiceUnavailable)
			return
		}
		if err := svc.Ready(r.Context()); err != nil {
			h.log.ErrorContext(r.Context(), "readiness check failed", "err", err)
			http.Error(w, "shared state (Redis) unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.log.Enabled(r.Context(), slog.LevelDebug) {
		h.mux.ServeHTTP(w, r)
		return
	}
	// The access log names no header: credentials travel in headers.
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	h.mux.ServeHTTP(sw, r)
	h.log.DebugContext(r.Context(), "request", "method", r.Method, "path", r.URL.Path, "status", sw.status,
		"duration", time.Since(start), "ip", h.clientIP(r))
}

// statusWriter remembers the status code for the access log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// authenticate resolves the request's credential into the context's actor
// (checkCredential): a bearer token alone decides when present; otherwise
// X-Api-Key. Invalid credentials end the request with 401; over-limit keys
// with 429.
func (h *Handler) authenticate(next *graphqlHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !limitBody(w, r) {
			return
		}
		ctx := r.Context()
		var actor *btk.Actor
		switch c, a := h.checkCredential(w, r); c {
		case credRefused:
			return
		case credBearer:
			token, ok := bearer(r.Header.Get("Authorization"))
			if !ok {
				writeError(w, http.StatusUnauthorized, btk.ErrInvalidSession)
				return
			}
			a, err := h.svc.ResolveSession(ctx, token)
			if err != nil {
				h.refuse(w, r, err)
				return
			}
			h.svc.CheckElevation(a, r.Header.Get("X-Elevation"))
			actor = a
		case credKey:
			r.Header[headerTenantID] = []string{a.WorkspaceID}
			actor = a
		case credNone:
			// Anonymous: only public operations answer; login throttles by address.
			next.serve(w, r, btk.WithClientIP(ctx, h.clientIP(r)))
			return
		}
		actor.IP, actor.UserAgent = h.clientIP(r), r.UserAgent()
		// The context goes to the GraphQL handler directly: r.WithContext
		// would copy the request.
		next.serve(w, r, btk.WithActor(ctx, actor))
	})
}

// errBodyTooLarge is the request-level failure for a body over maxBodyBytes.
var errBodyTooLarge = btk.Errorf(btk.CodeBadUserInput, "request body is larger than 64 KiB")

// limitBody refuses a body over maxBodyBytes with 413 before anything reads
// it. A body of unknown length (chunked) is read here, up to the limit.
func limitBody(w http.ResponseWriter, r *http.Request) bool {
	if r.ContentLength > maxBodyBytes {
		writeError(w, http.StatusRequestEntityTooLarge, errBodyTooLarge)
		return false
	}
	if r.ContentLength >= 0 {
		r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
		return true
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil || len(body) > maxBodyBytes {
		writeError(w, http.StatusRequestEntityTooLarge, errBodyTooLarge)
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return true
}

func bearer(auth string) (string, bool) {
	const prefix = "Bearer "
	if len(auth) <= len(prefix) || !equalFoldASCII(auth[:len(prefix)], prefix) {
		return "", false
	}
	return auth[len(prefix):], true
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i]|0x20, b[i]|0x20
		if x != y {
			return false
		}
	}
	return true
}

func ceilSeconds(d time.Duration) int { return int((d + time.Second - 1) / time.Second) }

// errorBody is the GraphQL-shaped body of a request-level failure.
type errorBody struct {
	Errors []errorItem `json:"errors"`
}

type errorItem struct {
	Message    string         `json:"message"`
	Extensions map[string]any `json:"extensions"`
}

func writeError(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(errorBody{Errors: []errorItem{{
		Message:    btk.ErrorMessage(err),
		Extensions: map[string]any{"code": string(btk.ErrorCode(err))},
	}}})
}

// clientIP is the address of the client: the TCP peer, or what a trusted
// proxy (--trusted-proxies) says in X-Forwarded-For. It is the audit IP,
// the throttles' address and the access log's.
func (h *Handler) clientIP(r *http.Request) string {
	return h.proxies.ClientIP(r)
}
