package server_test

import (
	"fmt"
	"strings"
	"testing"
)

// mutationAliases is a mutation of n aliased createApiKey fields (keys
// m<first>… upward), each a change of its own.
func mutationAliases(first, n int) string {
	var q strings.Builder
	for i := range n {
		fmt.Fprintf(&q, "m%d:createApiKey(input:{name:\"m%d\"}){apiKey{id}} ", first+i, first+i)
	}
	return q.String()
}

// One operation makes at most 10 changes (docs/security.md#bounds-on-a-request):
// 120 aliased mutations were one request, each an audited change queued for
// every webhook of the workspace. The 11th is refused before any runs,
// COMPLEXITY_LIMIT_EXCEEDED, however it is spelled (aliases, fragments);
// what @skip leaves out and __typename do not count. The CLI sends one
// mutation an operation (TestClientOperationsWithinBounds).
func TestMutationsPerOperationBounded(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	keys := func() int { return len(e.allIDs(owner, "apiKeys", "")) }
	e.must(owner, "mutation{__typename "+mutationAliases(0, 10)+"}", nil, &struct{}{})
	if got := keys(); got != 10 {
		t.Fatalf("10 mutations made %d keys", got)
	}
	for _, c := range []struct{ name, query string }{
		{"11 aliases", "mutation{" + mutationAliases(10, 11) + "}"},
		{"11 through fragments", "mutation{...A ...B} fragment A on Mutation{" + mutationAliases(10, 6) + "} fragment B on Mutation{" + mutationAliases(16, 5) + "}"},
		{"120 aliases", "mutation" + aliasQuery(120, "logout")},
	} {
		r := e.do(owner, c.query, nil)
		if r.Code() != "COMPLEXITY_LIMIT_EXCEEDED" || !strings.Contains(r.Errors[0].Message, "at most 10") {
			t.Errorf("%s: HTTP %d %q %+v; want COMPLEXITY_LIMIT_EXCEEDED", c.name, r.Status, r.Code(), r.Errors)
		}
	}
	if got := keys(); got != 10 {
		t.Fatalf("refused operations made %d keys", got-10)
	}
	// Skipped fields do not run, and do not count.
	skipped := "mutation{" + mutationAliases(10, 9) + ` x:createApiKey(input:{name:"x"})@skip(if:true){apiKey{id}} y:createApiKey(input:{name:"y"})@include(if:false){apiKey{id}}}`
	e.must(owner, skipped, nil, &struct{}{})
	if got := keys(); got != 19 {
		t.Fatalf("9 mutations and 2 skipped made %d keys", got-10)
	}
}
