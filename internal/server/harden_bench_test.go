//go:build unix

package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkCostliestAnonymousRequests measures what the costliest requests
// an anonymous caller can make cost the server after the bounds of docs/security.md#bounds-on-a-request,
// each refused or answered in full by the real handler (SQLite store, no
// network). Each request is a new document (a comment makes it unique), so
// the query cache does not help. cpu-ns/op is the process's user+system CPU
// per request (getrusage), which includes the garbage collector.
//
//	go test ./internal/server -run '^$' -bench CostliestAnonymous -benchtime 50x
func BenchmarkCostliestAnonymousRequests(b *testing.B) {
	e := newEnv(b)
	h := e.srv.Config.Handler
	body := func(query string, vars map[string]any) func(i int) []byte {
		return func(i int) []byte {
			m := map[string]any{"query": fmt.Sprintf("%s #%d", query, i)}
			if vars != nil {
				m["variables"] = vars
			}
			out, _ := json.Marshal(m)
			return out
		}
	}
	scopes := make([]string, 100) // the most a list may hold
	for i := range scopes {
		scopes[i] = strings.Repeat("s", 500)
	}
	cases := []struct {
		name   string
		body   func(i int) []byte
		before func()
	}{
		{"fragment-bomb-22-levels", body(fragmentBomb(22), nil), nil},
		{"fragment-bomb-150-levels", body(fragmentBomb(150), nil), nil},
		{"666-aliases-over-token-limit", body(aliasQuery(666, "__typename"), nil), nil},
		{"499-aliases-refused", body(aliasQuery(499, "__typename"), nil), nil},
		{"99-aliases-executed", body(aliasQuery(99, "__typename"), nil), nil},
		{"499-same-name-fields-refused", body("{"+strings.Repeat("a:__typename ", 499)+"}", nil), nil},
		{"99-same-name-fields", body("{"+strings.Repeat("a:__typename ", 99)+"}", nil), nil},
		{"99-same-name-fields-from-fragments", body("{...F0 ...F1 ...F2 ...F3 ...F4 ...F5 ...F6 ...F7 ...F8}"+func() string {
			var b strings.Builder
			for i := range 9 {
				fmt.Fprintf(&b, " fragment F%d on Query{%s}", i, strings.Repeat("a:__typename ", 11))
			}
			return b.String()
		}(), nil), nil},
		{"64KiB-nested-variables", func(i int) []byte {
			return fmt.Appendf(nil, `{"query":"{__typename #%d}","variables":{"v":%s%s}}`, i, strings.Repeat("[", 30000), strings.Repeat("]", 30000))
		}, nil},
		{"introspection-refused", body(`{__schema{types{name fields{name type{name ofType{name ofType{name}}}}}}}`, nil), nil},
		{"64KiB-body-list-refused", body(`query($s:[String!]){__typename}`, map[string]any{"s": make([]string, 20000)}), nil},
		{"100-item-list-of-500B-strings", body(`query($s:[String!]){__typename}`, map[string]any{"s": scopes}), nil},
		{"login-wrong-password", body(`mutation{login(email:"admin@example.com",password:"not-the-password"){accessToken}}`, nil),
			func() { e.clock.Advance(24 * time.Hour) }}, // refill the throttles: measure the check itself
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			bodies := make([][]byte, b.N)
			for i := range bodies {
				bodies[i] = tc.body(i)
			}
			start := cpuTime()
			b.ResetTimer()
			for i := range b.N {
				if tc.before != nil {
					tc.before()
				}
				rec := serveGraphQL(h, bodies[i], cred{})
				if i == 0 && b.N > 1 {
					b.Logf("HTTP %d %.200s", rec.Code, rec.Body)
				}
			}
			b.StopTimer()
			cpu := cpuTime() - start
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(len(bodies[0])), "body-bytes")
		})
	}
}
