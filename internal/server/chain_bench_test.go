//go:build unix

package server_test

import (
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkRotationChainAudit measures a key's audit log at the end of a
// rotation chain of 13,671 keys, the chain of the report (about 32 s to
// make through the API), and of a key in its middle: CPU per request from
// getrusage and bytes allocated, through the real handler on SQLite
// (docs/security.md#bounds-on-a-request).
//
//	go test ./internal/server -run '^$' -bench RotationChainAudit -benchtime 20x
func BenchmarkRotationChainAudit(b *testing.B) {
	e := newEnv(b)
	owner := e.admin()
	ids := storeChain(b, e, e.adminWS, "chained", 13_671)
	h := e.srv.Config.Handler
	for _, c := range []struct{ name, id string }{{"newest", ids[len(ids)-1]}, {"middle", ids[len(ids)/2]}} {
		b.Run(c.name, func(b *testing.B) {
			body := fmt.Appendf(nil, `{"query":%q,"variables":{"id":%q,"first":50}}`, chainLogQuery, c.id)
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			start := cpuTime()
			answer := 0
			for i := 0; b.Loop(); i++ {
				rec := serveGraphQL(h, body, owner)
				answer = rec.Body.Len()
				if i == 0 {
					b.Logf("HTTP %d, %d bytes: %.300s", rec.Code, answer, rec.Body)
				}
			}
			b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
			runtime.ReadMemStats(&m1)
			b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(b.N), "alloc-B/op")
			b.ReportMetric(float64(answer), "answer-B")
		})
	}
}
