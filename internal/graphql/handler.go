package graphql

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/99designs/gqlgen/graphql/executor"
	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/gateway"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// handler serves POST /graphql with gqlgen's executor. It does what
// gqlgen's handler.Server with its POST transport does, with less work per
// request on the hot path: no per-request header maps, MIME parsing or
// request copy, the body read into a pooled buffer, and a response without
// errors written as is rather than re-encoded. Two differences: a body over
// the size limit is refused with 413, and one that is not a single JSON
// object with 400, before any operation runs.
type handler struct {
	svc *btk.Service
	gw  *gateway.Gateway
	log *slog.Logger
	// exec serves anonymous and key-authenticated requests; userExec serves
	// logged-in users, with "did you mean" suggestions in validation errors.
	exec, userExec *executor.Executor
	expansion      *expansionLimit
	// bodies holds the bytes of the bodies being read (MaxBodyBytesHeld).
	bodies *gateway.BodyBudget
}

// UserOperationTimeout bounds a logged-in user's operation: the write
// timeout of btk serve's listener, past which its answer cannot be sent.
const UserOperationTimeout = 30 * time.Second

const (
	contentTypeJSON            = "application/json"
	contentTypeGraphQLResponse = "application/graphql-response+json"
)

// Shared header values: net/http only reads them.
var (
	headerJSON            = []string{contentTypeJSON}
	headerGraphQLResponse = []string{contentTypeGraphQLResponse}
)

// bodyPool holds buffers of bodies read, of at most FreeBodyBytes: one
// grown by an unusually large body is not kept, and a pooled one is never
// counted in the bytes held (BodyBudget.Read).
var bodyPool = sync.Pool{New: func() any { return new([]byte) }}

// serve answers r in ctx, which replaces r.Context().
func (h *handler) serve(w http.ResponseWriter, r *http.Request, ctx context.Context) {
	exec := h.exec
	if btk.ActorFrom(ctx).IsUser() {
		exec = h.userExec
		// A user's operation may read much (usage, audit): its work stops
		// when its answer could no longer be written, not when it is done
		// (docs/security.md). Key-authenticated operations read no such
		// thing, and skip the timer.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, UserOperationTimeout)
		defer cancel()
	}
	defer func() {
		if p := recover(); p != nil {
			gqlErr, _ := exec.PresentRecoveredError(ctx, p).(*gqlerror.Error)
			w.WriteHeader(http.StatusInternalServerError)
			writeResponse(w, &graphql.Response{Errors: gqlerror.List{gqlErr}})
		}
	}()
	if !postJSON(r) {
		// A JSON answer with a code, as every other refusal has: 415 for
		// a body of another media type (a form, text), 400 for an
		// Upgrade (btk serves no subscriptions).
		status, err := http.StatusUnsupportedMediaType, errNotJSON
		if r.Header.Get("Upgrade") != "" {
			status, err = http.StatusBadRequest, errUpgrade
		}
		gateway.WriteError(w, status, err)
		return
	}
	ctx = graphql.StartOperationTrace(ctx) // the executor requires it
	graphqlResponse := wantsGraphQLResponse(r)
	if graphqlResponse {
		w.Header()["Content-Type"] = headerGraphQLResponse
	} else {
		w.Header()["Content-Type"] = headerJSON
	}

	start := graphql.Now()
	params, status, err := h.readParams(w, r)
	if status == http.StatusRequestEntityTooLarge {
		gateway.WriteError(w, status, errBodyTooLarge)
		return
	}
	if errors.Is(err, errBodiesBusy) {
		gateway.Busy(w, r, err)
		return
	}
	if err == errLongList {
		if graphqlResponse {
			w.WriteHeader(http.StatusBadRequest)
		}
		gqlErr := gqlerror.Errorf("%s", errLongList.Error())
		errcode.Set(gqlErr, string(btk.CodeBadUserInput))
		writeRequestError(w, exec.DispatchError(ctx, gqlerror.List{gqlErr}))
		return
	}
	if err != nil {
		w.WriteHeader(status)
		// A fixed message: the decoder's would quote the body, which may
		// hold a password.
		gqlErr := gqlerror.Errorf("the request body must be a JSON object with a query string")
		writeRequestError(w, exec.DispatchError(ctx, gqlerror.List{gqlErr}))
		return
	}
	if params.Query == "" {
		w.WriteHeader(http.StatusBadRequest) // invalid parameters (GraphQL over HTTP)
		gqlErr := gqlerror.Errorf("the request has no query")
		errcode.Set(gqlErr, errcode.ValidationFailed)
		writeRequestError(w, exec.DispatchError(ctx, gqlerror.List{gqlErr}))
		return
	}
	if err := h.expansion.check(ctx, params.Query); err != nil {
		writeRequestError(w, exec.DispatchError(ctx, gqlerror.List{err}))
		return
	}
	params.Headers = r.Header
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}

	rc, opErr := exec.CreateOperationContext(ctx, params)
	if opErr != nil {
		if graphqlResponse {
			w.WriteHeader(statusForGraphQLResponse(opErr))
		}
		// With application/json, 200 (GraphQL over HTTP): the answer is
		// a GraphQL response whose errors say what failed.
		writeRequestError(w, exec.DispatchError(graphql.WithOperationContext(ctx, rc), opErr))
		return
	}
	responses, ctx := exec.DispatchOperation(ctx, rc)
	writeResponse(w, responses(ctx))
}

// postJSON is gqlgen's POST transport test: a POST with a JSON body and no
// Upgrade header (the mux routes only POST here).
func postJSON(r *http.Request) bool {
	if r.Method != http.MethodPost || r.Header.Get("Upgrade") != "" {
		return false
	}
	ct := r.Header.Get("Content-Type")
	if ct == contentTypeJSON {
		return true
	}
	mediaType, _, err := mime.ParseMediaType(ct)
	return err == nil && mediaType == contentTypeJSON
}

// wantsGraphQLResponse reports whether the response is
// application/graphql-response+json rather than application/json, as gqlgen
// decides it from Accept.
func wantsGraphQLResponse(r *http.Request) bool {
	accept := r.Header.Get("Accept")
	if accept == "" {
		return false
	}
	for part := range strings.SplitSeq(accept, ",") {
		mediaType, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mediaType {
		case "*/*", "application/*", contentTypeJSON:
			return false
		case contentTypeGraphQLResponse:
			return true
		}
	}
	return true
}

// wireParams is the request body; variables and extensions are decoded
// apart, with numbers kept as json.Number as gqlgen does.
type wireParams struct {
	Query         string          `json:"query"`
	OperationName string          `json:"operationName"`
	Variables     json.RawMessage `json:"variables"`
	Extensions    json.RawMessage `json:"extensions"`
}

// readParams reads the whole body, at most maxBodyBytes, its bytes held
// counted in h.bodies, and decodes it; on failure it returns the HTTP
// status (errBodiesBusy: none, past the bytes held).
func (h *handler) readParams(w http.ResponseWriter, r *http.Request) (*graphql.RawParams, int, error) {
	buf := bodyPool.Get().(*[]byte)
	body, held, err := h.bodies.Read(w, r, maxBodyBytes, *buf)
	defer func() { // decoding copies what it keeps
		h.bodies.Release(held)
		if cap(body) <= FreeBodyBytes && cap(body) > cap(*buf) {
			*buf = body[:0]
		}
		bodyPool.Put(buf)
	}()
	if err != nil {
		if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
			return nil, http.StatusRequestEntityTooLarge, err
		}
		if errors.Is(err, errBodiesBusy) {
			return nil, 0, err
		}
		return nil, http.StatusBadRequest, err
	}
	var wire wireParams
	if err := json.Unmarshal(body, &wire); err != nil {
		return nil, http.StatusBadRequest, err
	}
	// Lists are bounded before they are even decoded, let alone coerced by
	// gqlgen (a 1 MiB list of short strings cost a hundred MB to coerce).
	if !listsWithin(wire.Variables, maxListItems) || !listsWithin(wire.Extensions, maxListItems) {
		return nil, 0, errLongList
	}
	p := &graphql.RawParams{Query: wire.Query, OperationName: wire.OperationName}
	if err := decodeObject(wire.Variables, &p.Variables); err != nil {
		return nil, http.StatusBadRequest, err
	}
	if err := decodeObject(wire.Extensions, &p.Extensions); err != nil {
		return nil, http.StatusBadRequest, err
	}
	return p, 0, nil
}

func decodeObject(raw json.RawMessage, m *map[string]any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(m)
}

// maxListItems bounds every list in a request's variables. The schema's
// only list input is scopes (at most 32, which the domain checks with its
// own message).
const maxListItems = 100

var errLongList = fmt.Errorf("the variables or extensions hold a list longer than %d items", maxListItems)

// listsWithin reports whether every array in the JSON document b (already
// known to be valid JSON) has at most n elements, scanning its bytes once.
func listsWithin(b []byte, n int) bool {
	var (
		open   []bool // per open bracket: is it an array?
		commas []int  // per open bracket: commas seen at its level
		inStr  bool
		esc    bool
	)
	for _, c := range b {
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case '[', '{':
			open, commas = append(open, c == '['), append(commas, 0)
		case ']', '}':
			if len(open) > 0 {
				open, commas = open[:len(open)-1], commas[:len(commas)-1]
			}
		case ',':
			if k := len(open) - 1; k >= 0 && open[k] {
				if commas[k]++; commas[k] >= n { // n commas: n+1 elements
					return false
				}
			}
		}
	}
	return true
}

// writeRequestError writes the response of a request that did not execute:
// errors and no data entry (GraphQL over HTTP).
func writeRequestError(w http.ResponseWriter, resp *graphql.Response) {
	b, err := json.Marshal(struct {
		Errors     gqlerror.List  `json:"errors"`
		Extensions map[string]any `json:"extensions,omitempty"`
	}{capErrors(resp.Errors), resp.Extensions})
	if err != nil {
		panic(err)
	}
	_, _ = w.Write(b) // a client that left is no error of the request
}

var (
	dataPrefix = []byte(`{"data":`)
	dataNull   = []byte(`null`)
	dataSuffix = []byte(`}`)
)

// writeResponse writes a GraphQL response. The common answer, data and
// nothing else, is written as is: gqlgen's data is already compact JSON.
func writeResponse(w http.ResponseWriter, resp *graphql.Response) {
	if resp != nil && len(resp.Errors) == 0 && len(resp.Extensions) == 0 && resp.Label == "" && resp.Path == nil && resp.HasNext == nil {
		data := []byte(resp.Data)
		if len(data) == 0 {
			data = dataNull
		}
		_, _ = w.Write(dataPrefix) // a client that left is no error of the request
		_, _ = w.Write(data)
		_, _ = w.Write(dataSuffix)
		return
	}
	if resp != nil {
		resp.Errors = capErrors(resp.Errors)
	}
	b, err := json.Marshal(resp)
	if err != nil {
		panic(err) // as gqlgen's transport does: a bug of the generated code
	}
	_, _ = w.Write(b) // a client that left is no error of the request
}

// statusForGraphQLResponse is the status of an operation that could not
// start, with application/graphql-response+json: 400 when the document does
// not parse or validate, 200 otherwise (the operation was refused, e.g. for
// its cost). With application/json it is always 200.
func statusForGraphQLResponse(errs gqlerror.List) int {
	if errcode.GetErrorKind(errs) == errcode.KindProtocol {
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// complexityLimit bounds what an operation may cost before any resolver
// runs, and lets only logged-in users introspect. It replaces gqlgen's
// FixedComplexityLimit, whose walk expands every fragment spread anew: a
// document in which each fragment spreads the next one twice costs 2^depth
// there (22 levels in 1 KB: most of a second of CPU). Here each fragment's
// cost is computed once per operation, so the walk is linear in the size of
// the document, and introspection fields count like any other (gqlgen's walk
// skips them). An operation without variables is costed once, not on every
// request: its cost depends only on the parsed document, which the query
// cache keeps.
type complexityLimit struct {
	limit int
	es    graphql.ExecutableSchema

	mu    sync.RWMutex
	known map[*ast.OperationDefinition]opCost
}

// opCost is what complexityLimit learns about an operation.
type opCost struct {
	cost          int
	introspection bool // selects __schema or __type somewhere
}

const maxKnownComplexities = 1000 // as many as the query cache holds

func newComplexityLimit(limit int) *complexityLimit {
	return &complexityLimit{limit: limit, known: make(map[*ast.OperationDefinition]opCost)}
}

var _ interface {
	graphql.OperationContextMutator
	graphql.HandlerExtension
} = (*complexityLimit)(nil)

func (c *complexityLimit) ExtensionName() string { return "ComplexityLimit" }

func (c *complexityLimit) Validate(es graphql.ExecutableSchema) error {
	c.es = es
	return nil
}

// errIntrospectionNeedsUser refuses __schema and __type to anonymous and
// key-authenticated callers: the schema is published with the source, and
// tools that introspect log in first.
var errIntrospectionNeedsUser = btk.Errorf(btk.CodeUnauthenticated, "introspection needs a logged-in user (Authorization: Bearer)")

func (c *complexityLimit) MutateOperationContext(ctx context.Context, rc *graphql.OperationContext) *gqlerror.Error {
	op := rc.Operation
	if n := mutations(rc); n > maxMutations {
		err := gqlerror.Errorf("the operation has %d mutations; one operation may make at most %d changes: send the others in operations of their own", n, maxMutations)
		errcode.Set(err, codeComplexityLimit)
		return err
	}
	var oc opCost
	ok := false
	// Only the costs of documents the query cache may hold are kept: a
	// remembered operation pins its document and source.
	remember := len(op.VariableDefinitions) == 0 && len(rc.RawQuery) <= maxCachedQuery
	if remember {
		c.mu.RLock()
		oc, ok = c.known[op]
		c.mu.RUnlock()
	}
	if !ok {
		oc = operationCost(ctx, c.es, op, rc.Variables)
		if remember {
			c.mu.Lock()
			if len(c.known) >= maxKnownComplexities {
				clear(c.known) // documents evicted from the query cache are not kept alive
			}
			c.known[op] = oc
			c.mu.Unlock()
		}
	}
	if oc.cost > c.limit {
		err := gqlerror.Errorf("operation has complexity %d, which exceeds the limit of %d", oc.cost, c.limit)
		if oc.cost == maxInt {
			err = gqlerror.Errorf("operation has a complexity beyond any limit (the limit is %d)", c.limit)
		}
		errcode.Set(err, codeComplexityLimit)
		return err
	}
	user := btk.ActorFrom(ctx).IsUser()
	if oc.introspection && !user {
		err := gqlerror.Errorf("%s", errIntrospectionNeedsUser.Message)
		errcode.Set(err, string(btk.CodeUnauthenticated))
		return err
	}
	rc.DisableIntrospection = !user
	return nil
}

const maxInt = int(^uint(0) >> 1)

// mutations counts the mutations a mutation operation makes: its top-level
// fields as they run (fragments spread, @skip and @include applied, fields
// of one response name merged), __typename aside.
func mutations(rc *graphql.OperationContext) int {
	if rc.Operation.Operation != ast.Mutation {
		return 0
	}
	n := 0
	for _, f := range graphql.CollectFields(rc, rc.Operation.SelectionSet, []string{"Mutation"}) {
		if !strings.HasPrefix(f.Name, "__") {
			n++
		}
	}
	return n
}

// codeComplexityLimit refuses a document for its cost before it runs, as
// gqlgen's own complexity limit names it (it does not export the name).
// Like gqlgen's GRAPHQL_PARSE_FAILED and GRAPHQL_VALIDATION_FAILED it is a
// code of the GraphQL layer, not of the domain (docs/design.md#error-codes).
const codeComplexityLimit = "COMPLEXITY_LIMIT_EXCEEDED"

// costWalker computes an operation's cost as gqlgen's complexity package
// does (a field costs its complexity function's answer, else 1 plus its
// selections), with each fragment costed once.
type costWalker struct {
	ctx       context.Context
	es        graphql.ExecutableSchema
	vars      map[string]any
	fragments map[string]int
	intro     bool
}

func operationCost(ctx context.Context, es graphql.ExecutableSchema, op *ast.OperationDefinition, vars map[string]any) opCost {
	w := &costWalker{ctx: ctx, es: es, vars: vars, fragments: make(map[string]int)}
	n := w.selectionSet(op.SelectionSet)
	return opCost{cost: n, introspection: w.intro}
}

func (w *costWalker) selectionSet(set ast.SelectionSet) int {
	total := 0
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			total = saturatingAdd(total, w.field(s))
		case *ast.FragmentSpread:
			n, ok := w.fragments[s.Name]
			if !ok {
				// Validation refuses fragment cycles; should one get here,
				// it costs everything rather than recursing forever.
				w.fragments[s.Name] = maxInt
				if s.Definition != nil {
					n = w.selectionSet(s.Definition.SelectionSet)
				} else {
					n = maxInt
				}
				w.fragments[s.Name] = n
			}
			total = saturatingAdd(total, n)
		case *ast.InlineFragment:
			total = saturatingAdd(total, w.selectionSet(s.SelectionSet))
		}
	}
	return total
}

func (w *costWalker) field(f *ast.Field) int {
	if f.Name == "__schema" || f.Name == "__type" {
		w.intro = true
	}
	child := 0
	if len(f.SelectionSet) > 0 {
		child = w.selectionSet(f.SelectionSet)
	}
	if f.ObjectDefinition != nil && f.Definition != nil {
		args := f.ArgumentMap(w.vars)
		if n, ok := w.es.Complexity(w.ctx, f.ObjectDefinition.Name, f.Name, child, args); ok && n >= 1 {
			return n
		}
	}
	return saturatingAdd(1, child)
}

// saturatingAdd adds two non-negative costs, stopping at maxInt.
func saturatingAdd(a, b int) int {
	if c := a + b; c >= a {
		return c
	}
	return maxInt
}
