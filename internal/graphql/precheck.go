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
	if expandedSize(doc) > limit {
		return x.refuse(limit)
	}
	if name, n := mostSharedName(doc); n > maxSameName {
		gerr := gqlerror.Errorf("%d fields share the response name %q in one selection; at most %d may", n, cutUTF8(name, 64), maxSameName)
		errcode.Set(gerr, codeComplexityLimit)
		return gerr
	}
	return nil
}

// maxSameName bounds the fields that share a response name in one
// selection (fragments merged in): the validator compares each pair of
// them (overlapping fields), so 320 of them cost a logged-in member 34 ms
// of CPU and 30 MB allocated before any error was made; 64 cost about 2 ms.
// No real operation repeats a name more than a few times.
const maxSameName = 64

// mostSharedName returns the response name shared by the most fields of
// one selection set of doc, fragments' fields counted where they are
// spread, and how many share it.
func mostSharedName(doc *ast.QueryDocument) (string, int) {
	c := &nameCounter{doc: doc, fragments: map[string]map[string]int{}}
	for _, op := range doc.Operations {
		c.walk(op.SelectionSet)
	}
	for _, f := range doc.Fragments {
		c.walk(f.SelectionSet)
	}
	return c.name, c.most
}

type nameCounter struct {
	doc       *ast.QueryDocument
	fragments map[string]map[string]int // response names a fragment brings to its selection
	name      string
	most      int
}

// walk counts the names of set and of every selection set nested in it.
func (c *nameCounter) walk(set ast.SelectionSet) {
	counts := map[string]int{}
	c.collect(set, counts)
	for name, n := range counts {
		if n > c.most {
			c.name, c.most = name, n
		}
	}
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			if len(s.SelectionSet) > 0 {
				c.walk(s.SelectionSet)
			}
		case *ast.InlineFragment:
			c.walk(s.SelectionSet)
		}
	}
}

// collect adds the response names set brings to its selection: its fields,
// and those of its inline fragments and fragment spreads.
func (c *nameCounter) collect(set ast.SelectionSet, counts map[string]int) {
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			name := s.Alias
			if name == "" {
				name = s.Name
			}
			counts[name]++
		case *ast.InlineFragment:
			c.collect(s.SelectionSet, counts)
		case *ast.FragmentSpread:
			for name, n := range c.fragment(s.Name) {
				counts[name] = saturatingAdd(counts[name], n)
			}
		}
	}
}

func (c *nameCounter) fragment(name string) map[string]int {
	if m, ok := c.fragments[name]; ok {
		return m
	}
	c.fragments[name] = nil // a cycle (which validation refuses) adds nothing
	m := map[string]int{}
	if f := c.doc.Fragments.ForName(name); f != nil {
		c.collect(f.SelectionSet, m)
	}
	c.fragments[name] = m
	return m
}

func (x *expansionLimit) refuse(limit int) *gqlerror.Error {
	gerr := gqlerror.Errorf("the document expands to more than %d fields, the most allowed to this caller", limit)
	errcode.Set(gerr, codeComplexityLimit)
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
