package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/99designs/gqlgen/complexity"
	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/99designs/gqlgen/graphql/executor"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// graphqlHandler serves POST /graphql with gqlgen's executor. It does what
// gqlgen's handler.Server with its POST transport does, with less work per
// request on the hot path: no per-request header maps, MIME parsing or
// request copy, the body read into a pooled buffer, and a response without
// errors written as is rather than re-encoded. Two differences: a body over
// the size limit is refused with 413, and one that is not a single JSON
// object with 400, before any operation runs.
type graphqlHandler struct {
	exec *executor.Executor
}

const (
	contentTypeJSON            = "application/json"
	contentTypeGraphQLResponse = "application/graphql-response+json"
)

// Shared header values: net/http only reads them.
var (
	headerJSON            = []string{contentTypeJSON}
	headerGraphQLResponse = []string{contentTypeGraphQLResponse}
)

var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody keeps buffers grown by unusually large bodies out of the pool.
const maxPooledBody = 64 << 10

func (h *graphqlHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.serve(w, r, r.Context())
}

// serve answers r in ctx, which replaces r.Context().
func (h *graphqlHandler) serve(w http.ResponseWriter, r *http.Request, ctx context.Context) {
	defer func() {
		if p := recover(); p != nil {
			gqlErr, _ := h.exec.PresentRecoveredError(ctx, p).(*gqlerror.Error)
			w.WriteHeader(http.StatusInternalServerError)
			writeResponse(w, &graphql.Response{Errors: gqlerror.List{gqlErr}})
		}
	}()
	if !postJSON(r) {
		w.WriteHeader(http.StatusBadRequest)
		writeResponse(w, &graphql.Response{Errors: gqlerror.List{{Message: "transport not supported"}}})
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
	params, status, err := readParams(r)
	if status == http.StatusRequestEntityTooLarge {
		writeError(w, status, errBodyTooLarge)
		return
	}
	if err != nil {
		w.WriteHeader(status)
		// A fixed message: the decoder's would quote the body, which may
		// hold a password.
		gqlErr := gqlerror.Errorf("the request body must be a JSON object with a query string")
		writeResponse(w, h.exec.DispatchError(ctx, gqlerror.List{gqlErr}))
		return
	}
	params.Headers = r.Header
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}

	rc, opErr := h.exec.CreateOperationContext(ctx, params)
	if opErr != nil {
		if graphqlResponse {
			w.WriteHeader(statusForGraphQLResponse(opErr))
		} else {
			w.WriteHeader(statusFor(opErr))
		}
		writeResponse(w, h.exec.DispatchError(graphql.WithOperationContext(ctx, rc), opErr))
		return
	}
	responses, ctx := h.exec.DispatchOperation(ctx, rc)
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

// readParams reads the whole body (bounded by the middleware's
// MaxBytesReader) and decodes it; on failure it returns the HTTP status.
func readParams(r *http.Request) (*graphql.RawParams, int, error) {
	buf := bodyPool.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBody {
			buf.Reset()
			bodyPool.Put(buf)
		}
	}()
	if _, err := buf.ReadFrom(r.Body); err != nil {
		if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
			return nil, http.StatusRequestEntityTooLarge, err
		}
		return nil, http.StatusBadRequest, err
	}
	var wire wireParams
	if err := json.Unmarshal(buf.Bytes(), &wire); err != nil {
		return nil, http.StatusBadRequest, err
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
		w.Write(dataPrefix)
		w.Write(data)
		w.Write(dataSuffix)
		return
	}
	b, err := json.Marshal(resp)
	if err != nil {
		panic(err) // as gqlgen's transport does: a bug of the generated code
	}
	w.Write(b)
}

// statusFor and statusForGraphQLResponse are gqlgen's statuses for an
// operation that could not start.
func statusFor(errs gqlerror.List) int {
	if errcode.GetErrorKind(errs) == errcode.KindProtocol {
		return http.StatusUnprocessableEntity
	}
	return http.StatusOK
}

func statusForGraphQLResponse(errs gqlerror.List) int {
	if errcode.GetErrorKind(errs) == errcode.KindProtocol {
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// complexityLimit is gqlgen's FixedComplexityLimit, computed once per
// operation that has no variables (its complexity depends only on the parsed
// document, which the query cache keeps) instead of on every request.
type complexityLimit struct {
	limit int
	es    graphql.ExecutableSchema

	mu    sync.RWMutex
	known map[*ast.OperationDefinition]int
}

const maxKnownComplexities = 1000 // as many as the query cache holds

func newComplexityLimit(limit int) *complexityLimit {
	return &complexityLimit{limit: limit, known: make(map[*ast.OperationDefinition]int)}
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

func (c *complexityLimit) MutateOperationContext(ctx context.Context, rc *graphql.OperationContext) *gqlerror.Error {
	op := rc.Operation
	n, ok := 0, false
	if len(op.VariableDefinitions) == 0 {
		c.mu.RLock()
		n, ok = c.known[op]
		c.mu.RUnlock()
	}
	if !ok {
		n = complexity.Calculate(ctx, c.es, op, rc.Variables)
		if len(op.VariableDefinitions) == 0 {
			c.mu.Lock()
			if len(c.known) >= maxKnownComplexities {
				clear(c.known) // documents evicted from the query cache are not kept alive
			}
			c.known[op] = n
			c.mu.Unlock()
		}
	}
	if n > c.limit {
		err := gqlerror.Errorf("operation has complexity %d, which exceeds the limit of %d", n, c.limit)
		errcode.Set(err, "COMPLEXITY_LIMIT_EXCEEDED")
		return err
	}
	return nil
}
