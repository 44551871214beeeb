// Package graphql is btk's GraphQL API at POST /graphql: the HTTP handler
// (a lean replacement for gqlgen's POST transport), the resolvers, the
// bounds a document must meet before it runs (body size, tokens, field
// expansion, cost), and the error presenter that gives every error its
// code. Credentials are decided by the gateway's one key check. See
// docs/design.md#graphql and docs/security.md#bounds-on-a-request.
package graphql

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/99designs/gqlgen/graphql/executor"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/gateway"
	"github.com/btk-project/btk/internal/graphql/graph"
	"github.com/vektah/gqlparser/v2/ast"
)

// Request bounds.
const (
	// maxBodyBytes bounds a GraphQL request body: about ten times the
	// largest real operation of this API (createApiKey with 32 scopes of 64
	// characters and a 64-character name, or a login with a 1,024-byte
	// password: under 7 KB; TestLargestOperationFits measures it).
	maxBodyBytes = 64 << 10
	// FreeBodyBytes of each body are not counted in MaxBodyBytesHeld: the
	// largest real operation fits (TestLargestOperationFits), so stalled
	// large bodies never refuse one. Each client address's share of
	// requests in flight bounds what these hold (docs/security.md).
	FreeBodyBytes = 8 << 10
	// MaxBodyBytesHeld bounds the bytes past FreeBodyBytes that the bodies
	// being read hold together, counted as they arrive; a request past it
	// is answered 503 with Retry-After. Requests that sent 60 KB of a body
	// and stopped held it until the 30 s read timeout, from every address
	// that could hold requests.
	MaxBodyBytesHeld = 16 << 20
	// maxComplexity bounds an operation's cost (one per field by default).
	maxComplexity = 500
	// scanCost is the part of maxComplexity a read of many usage or audit
	// rows costs (New).
	scanCost = maxComplexity / 5
	// readCost is the part of maxComplexity a top-level field that opens a
	// database read of its own costs besides its fields (New).
	readCost = maxComplexity / 10
	// maxMutations bounds the mutations (top-level fields) of one operation:
	// each is a change of its own, audited and queued for every webhook of
	// the workspace, and one operation carried 120 aliased changes. The CLI
	// sends one per operation; the dashboard sends none (it calls the
	// service).
	maxMutations = 10
	// anonymousExpansion bounds the fields a document of an anonymous or
	// API-key caller expands to (fragments counted once each), checked
	// before validation.
	anonymousExpansion = 100
	// parserTokenLimit bounds the size of a GraphQL document.
	parserTokenLimit = 2000
)

// New returns the handler of POST /graphql: credentials through gw, then
// the operation through gqlgen's executor.
func New(svc *btk.Service, gw *gateway.Gateway, log *slog.Logger) http.Handler {
	h := &handler{svc: svc, gw: gw, log: log, bodies: gateway.NewBodyBudget(MaxBodyBytesHeld, FreeBodyBytes, errBodiesBusy)}
	cfg := graph.Config{Resolvers: &Resolver{svc: svc}}
	// A password check (argon2id) is the costliest thing a request can ask
	// for: at most one per operation, however many aliases it uses.
	cfg.Complexity.Mutation.Login = func(int, string, string, *string, *string, *string) int { return maxComplexity }
	cfg.Complexity.Mutation.Elevate = func(int, string) int { return maxComplexity }
	cfg.Complexity.Mutation.ChangePassword = func(int, string, string) int { return maxComplexity }
	// Recomputing an audit chain reads all of it: one per operation.
	cfg.Complexity.Query.VerifyAuditChain = func(int, *string, *bool) int { return maxComplexity }
	// A top-level field that reads the database costs a tenth of an
	// operation: each alias of one is a read transaction of its own (or
	// two), and 249 aliases of me cost 50-110 ms of CPU, 290 ms for an
	// account in 21 workspaces (docs/security.md). No client asks for one
	// twice.
	cfg.Complexity.Query.Me = func(child int) int { return child + readCost }
	cfg.Complexity.Query.TenantInfo = func(child int) int { return child + readCost }
	cfg.Complexity.Query.APIKey = func(child int, _ string) int { return child + readCost }
	cfg.Complexity.Query.APIKeyByHash = func(child int, _ string) int { return child + readCost }
	cfg.Complexity.Query.WorkspaceBranding = func(child int, _ string) int { return child + readCost }
	cfg.Complexity.Query.Workspaces = func(child int) int { return child + readCost }
	cfg.Complexity.Query.Accounts = func(child int) int { return child + readCost }
	cfg.Complexity.Query.Members = func(child int, _ string) int { return child + readCost }
	cfg.Complexity.Query.Webhooks = func(child int) int { return child + readCost }
	cfg.Complexity.Query.AuditHead = func(child int, _ *string, _ *bool) int { return child + readCost }
	// A page costs its rows as well as its fields: without this, 45
	// aliases of auditEvents(first: 100) cost 45 x 10 and read 4,500 rows
	// (113 ms of CPU, a 1.8 MB answer) (docs/security.md).
	cfg.Complexity.Query.APIKeys = func(child int, _ *bool, first *int, _ *string) int { return pageCost(child, first) }
	// A read that may walk much of a workspace's usage or audit rows (a
	// filter matching few of them walks them all) costs a fifth of an
	// operation besides its page: at most four in one operation, where 100
	// aliases of auditEvents(first: 1) with a filter matching nothing cost
	// 14 s of CPU (docs/security.md). Each also waits for one of the
	// instance's btk.MaxScans slots.
	cfg.Complexity.Query.AuditEvents = func(child int, _, _ *time.Time, first *int, _, _ *string, _ *bool, _, _ *string) int {
		return pageCost(child, first) + scanCost
	}
	cfg.Complexity.Query.APIKeyAuditLog = func(child int, _, _ *string, _ *btk.AuditAction, _, _ *time.Time, first *int, _, _ *string) int {
		return pageCost(child, first) + scanCost
	}
	cfg.Complexity.Query.WorkspaceUsage = func(child int, _, _ *time.Time, _ *btk.Granularity) int { return child + scanCost }
	cfg.Complexity.Query.WebhookDeliveries = func(child int, _ string, first *int, _ *string) int { return pageCost(child, first) }
	// topKeys is a page of keys (each row a key read): aliases of it were
	// 120 aggregates and 12,000 key reads in one operation.
	cfg.Complexity.WorkspaceUsage.TopKeys = func(child int, first *int) int {
		rows := 10 // the schema's default
		if first != nil {
			rows = *first
		}
		return pageCost(child, &rows) + scanCost
	}
	es := graph.NewExecutableSchema(cfg)
	// Parsing and validating a query costs as much as the rest of a request:
	// cache the parsed documents (only valid ones are cached, so the two
	// executors can share the cache).
	cache := smallDocuments{lru.New[*ast.QueryDocument](1000)}
	limit := newComplexityLimit(maxComplexity)
	newExec := func(suggest bool) *executor.Executor {
		exec := executor.New(es)
		// Validation cost grows fast with the size of a document: bound it
		// before anything else looks at the query (the largest client
		// operation uses a few hundred tokens).
		exec.SetParserTokenLimit(parserTokenLimit)
		// Validation errors are bounded as they are made (errorcap.go).
		exec.SetDefaultRulesFn(boundedRules)
		exec.SetQueryCache(cache)
		// "Did you mean" suggestions spell out the schema: for users only.
		exec.SetDisableSuggestion(!suggest)
		exec.Use(limit) // also decides introspection
		exec.AroundFields(markResolverErrors)
		exec.AroundOperations(withUsageBudget)
		exec.AroundOperations(withKeyBatches)
		exec.SetErrorPresenter(h.presentError)
		exec.SetRecoverFunc(func(ctx context.Context, p any) error {
			h.log.ErrorContext(ctx, "panic in resolver", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			return errors.New("panic in resolver")
		})
		return exec
	}
	h.exec, h.userExec = newExec(false), newExec(true)
	h.expansion = newExpansionLimit(maxComplexity, anonymousExpansion, parserTokenLimit, cache)
	return h

}

// maxCachedQuery bounds the documents the query cache keeps: a parsed
// document pins its source, so 1,000 distinct valid 64 KB documents (a
// comment fills them) would have held 128 MB for any anonymous caller. Real
// operations are under 3 KB; a larger one is parsed each time.
const maxCachedQuery = 8 << 10

// smallDocuments is the query cache, for documents of at most
// maxCachedQuery bytes.
type smallDocuments struct {
	*lru.LRU[*ast.QueryDocument]
}

func (c smallDocuments) Add(ctx context.Context, query string, doc *ast.QueryDocument) {
	if len(query) <= maxCachedQuery {
		c.LRU.Add(ctx, query, doc)
	}
}

// pageCost is the complexity of a paged field: its fields for each 20 of
// its rows, so that an operation reads at most about 10,000 fields' worth
// of rows (the CLI's pages of 250 keys cost about 260).
func pageCost(child int, first *int) int {
	rows := btk.DefaultPageSize
	if first != nil && *first > 0 {
		rows = min(*first, btk.MaxPageSize)
	}
	return max(child, (child*rows+19)/20)
}

// ServeHTTP resolves the request's credential into the context's actor
// (gateway.Check): a bearer token alone decides when present; otherwise
// X-Api-Key. Invalid credentials end the request with 401; over-limit keys
// with 429.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > maxBodyBytes { // refused before anything reads it
		gateway.WriteError(w, http.StatusRequestEntityTooLarge, errBodyTooLarge)
		return
	}
	ctx := r.Context()
	var actor *btk.Actor
	switch c, a := h.gw.Check(w, r); c {
	case gateway.Refused:
		return
	case gateway.Bearer:
		token, ok := gateway.BearerToken(r.Header.Get("Authorization"))
		if !ok {
			gateway.Fail(w, btk.ErrInvalidSession)
			return
		}
		a, err := h.svc.ResolveSession(ctx, token)
		if err != nil {
			h.gw.Refuse(w, r, err)
			return
		}
		h.svc.CheckElevation(a, r.Header.Get("X-Elevation"))
		actor = a
	case gateway.Key:
		r.Header[gateway.HeaderTenantID] = []string{a.WorkspaceID}
		actor = a
	case gateway.None:
		// Anonymous: only public operations answer; login throttles by address.
		h.serve(w, r, btk.WithClientRequest(btk.WithClientIP(ctx, h.gw.ClientIP(r)), r.UserAgent(), r.URL.Path))
		return
	}
	actor.IP, actor.UserAgent = h.gw.ClientIP(r), r.UserAgent()
	// The context goes to the GraphQL handler directly: r.WithContext
	// would copy the request.
	h.serve(w, r, btk.WithActor(ctx, actor))
}

// errBodyTooLarge is the request-level failure for a body over maxBodyBytes.
var errBodyTooLarge = btk.Errorf(btk.CodeBadUserInput, "request body is larger than 64 KiB")

// errBodiesBusy answers a request whose body would take the bodies being
// read past MaxBodyBytesHeld.
var errBodiesBusy = &btk.Error{Code: btk.CodeUnavailable, Message: "too many large GraphQL requests are being received at once; retry shortly"}

// Requests /graphql does not take.
var (
	errNotJSON = btk.Errorf(btk.CodeBadUserInput, "send the operation as a JSON body with Content-Type: application/json")
	errUpgrade = btk.Errorf(btk.CodeBadUserInput, "/graphql takes POST requests with a JSON body; it serves no subscriptions or upgrades")
)
