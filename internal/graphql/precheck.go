package graphql

import (
	"context"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/btk-project/btk/internal/btk"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/parser"
)

// expansionLimit refuses, before gqlgen validates it, a document that
// expands to more fields than any operation may cost. Validation is the
// costliest step a document meets before complexityLimit (its
// overlapping-fields rule compares the fields each fragment spread brings
// in), and it runs on every fragment, even unused ones: a fragment bomb
// within the token limit (150 levels) cost 48 ms of CPU there before this
// check. The expanded size is counted with each fragment counted once, so
// the check is linear in the document; documents already in the query cache
// (valid, and checked when they entered) skip it.
//
// Anonymous and API-key callers get a tighter limit (anonymousLimit): what
// they may call (login, workspaceBranding, tenantInfo) expands to a few
// dozen fields, and the overlapping-fields rule costs up to the square of
// the fields sharing a response name (499 copies of one field: 51 ms of CPU;
// 100: about 2 ms).
type expansionLimit struct {
	limit          int // logged-in users
	anonymousLimit int // anonymous and API-key callers
	tokenLimit     int
	cache          graphql.Cache[*ast.QueryDocument]

	mu    sync.RWMutex
	known map[*ast.QueryDocument]int // expanded sizes of cached documents
}

func newExpansionLimit(limit, anonymousLimit, tokenLimit int, cache graphql.Cache[*ast.QueryDocument]) *expansionLimit {
	return &expansionLimit{limit: limit, anonymousLimit: anonymousLimit, tokenLimit: tokenLimit, cache: cache,
		known: make(map[*ast.QueryDocument]int)}
}

// check returns COMPLEXITY_LIMIT_EXCEEDED when an operation or a fragment of
// query expands to more than limit fields. A document that does not parse
// passes: the executor reports the syntax error.
func (x *expansionLimit) check(ctx context.Context, query string) *gqlerror.Error {
	limit := x.anonymousLimit
	if btk.ActorFrom(ctx).IsUser() {
		limit = x.limit
	}
	// A cached document is valid and within the larger limit (it was
	// checked when it entered); its size is counted once, off the hot path.
	if doc, ok := x.cache.Get(ctx, query); ok {
		if limit == x.limit {
			return nil
		}
		x.mu.RLock()
		n, ok := x.known[doc]
		x.mu.RUnlock()
		if !ok {
			n = expandedSize(doc)
			x.mu.Lock()
			if len(x.known) >= maxKnownComplexities {
				clear(x.known) // documents evicted from the cache are not kept alive
			}
			x.known[doc] = n
			x.mu.Unlock()
		}
		if n <= limit {
			return nil
		}
		return x.refuse(limit)
	}
	doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: query}, x.tokenLimit)
	if err != nil {
		return nil
	}
	if expandedSize(doc) <= limit {
		return nil
	}
	return x.refuse(limit)
}

func (x *expansionLimit) refuse(limit int) *gqlerror.Error {
	gerr := gqlerror.Errorf("the document expands to more than %d fields, the most allowed to this caller", limit)
	errcode.Set(gerr, "COMPLEXITY_LIMIT_EXCEEDED")
	return gerr
}

// expandedSize is the most fields an operation or a fragment of doc expands to.
func expandedSize(doc *ast.QueryDocument) int {
	c := &fieldCounter{doc: doc, fragments: make(map[string]int, len(doc.Fragments))}
	n := 0
	for _, f := range doc.Fragments {
		n = max(n, c.fragment(f.Name))
	}
	for _, op := range doc.Operations {
		n = max(n, c.selectionSet(op.SelectionSet))
	}
	return n
}

// fieldCounter counts the fields a selection set expands to, each fragment
// counted once and a fragment cycle (which validation would refuse) counted
// as unbounded.
type fieldCounter struct {
	doc       *ast.QueryDocument
	fragments map[string]int
}

func (c *fieldCounter) fragment(name string) int {
	if n, ok := c.fragments[name]; ok {
		return n
	}
	c.fragments[name] = maxInt // a cycle back here is unbounded
	n := 0
	if f := c.doc.Fragments.ForName(name); f != nil {
		n = c.selectionSet(f.SelectionSet)
	}
	c.fragments[name] = n
	return n
}

func (c *fieldCounter) selectionSet(set ast.SelectionSet) int {
	n := 0
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			n = saturatingAdd(n, saturatingAdd(1, c.selectionSet(s.SelectionSet)))
		case *ast.FragmentSpread:
			n = saturatingAdd(n, c.fragment(s.Name))
		case *ast.InlineFragment:
			n = saturatingAdd(n, c.selectionSet(s.SelectionSet))
		}
	}
	return n
}
