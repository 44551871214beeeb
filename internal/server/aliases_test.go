package server_test

import (
	"fmt"
	"strings"
)

// The queries that ask for a lot in one request, for the tests and
// benchmarks of the bounds of docs/security.md#bounds-on-a-request.

// aliasQuery is a query of n aliases of field (a0, a1, …): the way to make
// one request ask for n times the work.
func aliasQuery(n int, field string) string {
	var q strings.Builder
	q.WriteString("{")
	for i := range n {
		fmt.Fprintf(&q, "a%d:%s ", i, field)
	}
	return q.String() + "}"
}

// alternate is a query of n fields all named a, alternately a and b: pairs
// of fields that share a name but conflict.
func alternate(n int, a, b string) string { return alternateAs("a", n, a, b) }

// alternateAs is alternate with the fields named alias.
func alternateAs(alias string, n int, a, b string) string {
	var q strings.Builder
	q.WriteString("{")
	for i := range n {
		if i%2 == 0 {
			q.WriteString(alias + ":" + a + " ")
		} else {
			q.WriteString(alias + ":" + b + " ")
		}
	}
	return q.String() + "}"
}
