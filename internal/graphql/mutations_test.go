package graphql

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/btk-project/btk/internal/graphql/graph"
)

// The operations of the real client (internal/client, so the CLI) stay
// within the bound on mutations an operation (maxMutations) by far: each
// makes one change. The dashboard sends none (it calls the service).
func TestClientOperationsWithinBounds(t *testing.T) {
	files, err := filepath.Glob("../client/*.graphql")
	if err != nil || len(files) == 0 {
		t.Fatalf("client operations: %v %v", files, err)
	}
	var src strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f) // #nosec G304 -- the repository's own operation files
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
		src.WriteString("\n")
	}
	schema := graph.NewExecutableSchema(graph.Config{Resolvers: &Resolver{}}).Schema()
	doc, errs := gqlparser.LoadQueryWithRules(schema, src.String(), nil) // the default rules
	if len(errs) > 0 {
		t.Fatalf("client operations do not validate: %v", errs)
	}
	most, ops := 0, 0
	for _, op := range doc.Operations {
		if op.Operation != ast.Mutation {
			continue
		}
		ops++
		most = max(most, topLevelFields(op.SelectionSet))
	}
	if ops == 0 || most != 1 || most > maxMutations {
		t.Fatalf("%d client mutations, the largest making %d changes; want each 1 (at most %d)", ops, most, maxMutations)
	}
}

func topLevelFields(set ast.SelectionSet) int {
	n := 0
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			if !strings.HasPrefix(s.Name, "__") {
				n++
			}
		case *ast.FragmentSpread:
			n += topLevelFields(s.Definition.SelectionSet)
		case *ast.InlineFragment:
			n += topLevelFields(s.SelectionSet)
		}
	}
	return n
}
