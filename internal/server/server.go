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
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/executor"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/server/graph"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// Request bounds.
const (
	// maxBodyBytes bounds a GraphQL request body.
	maxBodyBytes = 1 << 20
	// maxComplexity bounds an operation's cost (one per field by default).
	maxComplexity = 500
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
}

// New returns the HTTP handler of the service. The logger never receives a
// key, password, token, or credential header.
func New(svc *btk.Service, store btk.Store, log *slog.Logger) *Handler {
	h := &Handler{svc: svc, store: store, log: log, mux: http.NewServeMux()}

	cfg := graph.Config{Resolvers: &Resolver{svc: svc}}
	// A password check (argon2id) is the costliest thing a request can ask
	// for: at most one per operation, however many aliases it uses.
	cfg.Complexity.Mutation.Login = func(int, string, string, *string, *string) int { return maxComplexity }
	cfg.Complexity.Mutation.Elevate = func(int, string) int { return maxComplexity }
	exec := executor.New(graph.NewExecutableSchema(cfg))
	// Validation cost grows fast with the size of a document: bound it before
	// anything else looks at the query (the largest client operation uses a
	// few hundred tokens).
	exec.SetParserTokenLimit(parserTokenLimit)
	// Parsing and validating a query costs as much as the rest of a request:
	// cache the parsed documents.
	exec.SetQueryCache(lru.New[*ast.QueryDocument](1000))
	exec.Use(extension.Introspection{})
	exec.Use(newComplexityLimit(maxComplexity))
	exec.SetErrorPresenter(h.presentError)
	exec.SetRecoverFunc(func(ctx context.Context, p any) error {
		h.log.ErrorContext(ctx, "panic in resolver", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		return errors.New("panic in resolver")
	})
	gql := &graphqlHandler{exec: exec}
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
		"duration", time.Since(start), "ip", clientIP(r))
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

// presentError sets extensions.code. Domain errors keep their message;
// gqlgen's own errors (syntax, validation, input coercion, transport) are the
// caller's mistake; anything else is hidden behind "internal error", with the
// details in the server log only.
func (h *Handler) presentError(ctx context.Context, err error) *gqlerror.Error {
	gerr := graphql.DefaultErrorPresenter(ctx, err)
	var be *btk.Error
	if errors.As(err, &be) {
		gerr.Message = be.Message
		gerr.Extensions = map[string]any{"code": string(be.Code)}
		presentChoices(err, gerr)
		return gerr
	}
	var ge *gqlerror.Error
	if errors.As(err, &ge) { // made by gqlgen, not returned by a resolver
		if gerr.Extensions["code"] == nil {
			gerr.Extensions = map[string]any{"code": string(btk.CodeBadUserInput)}
		}
		return gerr
	}
	h.log.ErrorContext(ctx, "internal error", "err", err, "path", gerr.Path.String())
	gerr.Message = "internal error"
	gerr.Extensions = map[string]any{"code": string(btk.CodeInternal)}
	return gerr
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
			next.serve(w, r, btk.WithClientIP(ctx, clientIP(r)))
			return
		}
		actor.IP, actor.UserAgent = clientIP(r), r.UserAgent()
		// The context goes to the GraphQL handler directly: r.WithContext
		// would copy the request.
		next.serve(w, r, btk.WithActor(ctx, actor))
	})
}

// errBodyTooLarge is the request-level failure for a body over maxBodyBytes.
var errBodyTooLarge = btk.Errorf(btk.CodeBadUserInput, "request body is larger than 1 MiB")

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

// clientIP is the peer address of the connection. Forwarding headers are not
// trusted: they are set by the client unless a proxy is known to rewrite them.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
