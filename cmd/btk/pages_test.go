package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// pagedLists answers the list operations with pages of its making: page n
// (from 1, counted by requests) holds nodes(n) nodes and ends with
// cursor(n), "" for the last. Pages after last end the list, so that a
// command without bounds ends too and the test fails on its counts. It
// returns the server and its number of requests; each request also
// records the live heap (after a collection) in heap, when not nil.
func pagedLists(t *testing.T, last int, nodes func(n int) int, cursor func(n int) string, heap *atomic.Uint64) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var requests atomic.Int64
	node := map[string]string{
		"ApiKeys":           apiKeyJSON,
		"ApiKeyAuditLog":    `{"id":"1","action":"CREATED","apiKeyName":"ci","createdAt":"2026-11-21T22:00:00Z"}`,
		"AuditEvents":       `{"id":"1","action":"login","createdAt":"2026-11-21T22:00:00Z"}`,
		"WebhookDeliveries": `{"id":"1","status":"DELIVERED","createdAt":"2026-11-21T22:00:00Z"}`,
	}
	field := map[string]string{"ApiKeys": "apiKeys", "ApiKeyAuditLog": "apiKeyAuditLog", "AuditEvents": "auditEvents", "WebhookDeliveries": "webhookDeliveries"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			OperationName string `json:"operationName"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || node[req.OperationName] == "" {
			t.Errorf("unexpected request %q: %v", req.OperationName, err)
			http.Error(w, "unexpected", http.StatusBadRequest)
			return
		}
		if heap != nil {
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > heap.Load() {
				heap.Store(m.HeapAlloc)
			}
		}
		n := int(requests.Add(1))
		next := "null"
		if cur := cursor(n); cur != "" && n < last {
			next = `"` + cur + `"`
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"data":{"%s":{"nodes":[`, field[req.OperationName])
		for i := range nodes(n) {
			if i > 0 {
				io.WriteString(w, ",")
			}
			io.WriteString(w, node[req.OperationName])
		}
		fmt.Fprintf(w, `],"pageInfo":{"hasNextPage":%t,"endCursor":%s}}}}`, next != "null", next)
	}))
	t.Cleanup(srv.Close)
	return srv, &requests
}

// runBounded runs btk with a deadline: a command that followed pages for
// ever would be stopped by the test's fake server anyway.
func runBounded(t *testing.T, s *iostreams, args ...string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return runWith(ctx, args, s)
}

func nth(n int) string { return fmt.Sprint(n) }

// A hostile or broken server made the commands that follow pages ask for
// ever (pages that hold nothing but say more follow, or a cursor that comes
// back) or keep every key it sent (2.13 GB in 32 s): each now ends with an
// error, after a bounded number of pages (docs/design.md#long-lists).
func TestLongListsBounded(t *testing.T) {
	isolate(t)
	const perPage = 5000 // as the report's server sent
	wantPages := int64(100_000/perPage + 1)
	for _, c := range []struct {
		name   string
		args   []string
		nodes  func(int) int
		cursor func(int) string
		pages  int64
		code   string
		msg    string
	}{
		{"list table keeps 100,000 keys at most", []string{"list", "--all"}, func(int) int { return perPage }, nth, wantPages,
			"TOO_LARGE", "more than 100000 keys to hold in memory: a table needs every row first; -o json and -o plain print the keys a page at a time"},
		{"revoke NAME reads no more keys than a workspace holds", []string{"revoke", "nope", "--yes"}, func(int) int { return perPage }, nth, wantPages,
			"BAD_RESPONSE", "unexpected answer: more than 100000 keys not revoked, more than a workspace holds"},
		{"show NAME likewise", []string{"show", "nope"}, func(int) int { return perPage }, nth, wantPages,
			"BAD_RESPONSE", "unexpected answer: more than 100000 keys not revoked, more than a workspace holds"},
		{"events: an empty page that says more follow", []string{"events"}, func(int) int { return 0 }, nth, 1,
			"BAD_RESPONSE", "unexpected answer: page 1 holds nothing but says another follows"},
		{"webhook deliveries likewise", []string{"webhook", "deliveries", "1"}, func(int) int { return 0 }, nth, 1,
			"BAD_RESPONSE", "unexpected answer: page 1 holds nothing but says another follows"},
		{"audit: a cursor that comes back", []string{"audit"}, func(int) int { return 1 }, func(n int) string { return string(rune('a' + (n+1)%2)) }, 3,
			"BAD_RESPONSE", "unexpected answer: page 3 says the next page is one already read"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, requests := pagedLists(t, 45, c.nodes, c.cursor, nil)
			t.Setenv("BTK_SERVER", srv.URL)
			t.Setenv("BTK_TOKEN", "session-jwt")
			s, out, errOut := testStreams(pipe, "")
			code := runBounded(t, s, c.args...)
			want := "btk: " + c.msg
			if code != exitError || !strings.Contains(errOut.String(), want) || !strings.Contains(errOut.String(), "("+c.code+")") || out.Len() != 0 {
				t.Errorf("exit %d, stdout %d bytes, stderr %q; want exit 1, nothing, %q (%s)", code, out.Len(), errOut.String(), want, c.code)
			}
			if n := requests.Load(); n != c.pages {
				t.Errorf("%d pages asked for, want %d", n, c.pages)
			}
		})
	}
	t.Run("a limit above what a command keeps", func(t *testing.T) {
		for _, args := range [][]string{{"events"}, {"audit"}, {"whois"}, {"webhook", "deliveries", "1"}} {
			s, _, errOut := testStreams(pipe, "")
			if code := runBounded(t, s, append(args, "--limit", "100001")...); code != exitUsage || !strings.Contains(errOut.String(), "--limit must be 1-100000") {
				t.Errorf("btk %s: exit %d, %q; want a usage error", args[0], code, errOut.String())
			}
		}
	})
}

// btk list -o json and -o plain print the keys a page at a time and keep
// none: 100,000 revoked keys (which nothing bounds) are listed in full,
// the live heap never holding more than a page.
func TestListStreamsKeys(t *testing.T) {
	isolate(t)
	const perPage, pages = 5000, 20
	var heap atomic.Uint64
	srv, requests := pagedLists(t, pages, func(int) int { return perPage }, nth, &heap)
	t.Setenv("BTK_SERVER", srv.URL)
	t.Setenv("BTK_TOKEN", "session-jwt")

	s, _, errOut := testStreams(pipe, "")
	pr, pw := io.Pipe()
	s.Out = pw
	counted := make(chan int, 1)
	go func() { // reads the array as it comes, an element at a time
		dec := json.NewDecoder(pr)
		n := 0
		if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
			t.Errorf("output starts %v, %v; want [", tok, err)
		}
		for dec.More() {
			var k struct{ Hint string }
			if err := dec.Decode(&k); err != nil || k.Hint != "HCe4" {
				t.Errorf("element %d: %+v, %v", n, k, err)
				break
			}
			n++
		}
		if tok, err := dec.Token(); err != nil || tok != json.Delim(']') {
			t.Errorf("output ends %v, %v; want ]", tok, err)
		}
		io.Copy(io.Discard, pr)
		counted <- n
	}()
	code := runBounded(t, s, "list", "--all", "-o", "json")
	pw.Close()
	n := <-counted
	if code != exitOK || n != perPage*pages || requests.Load() != pages {
		t.Fatalf("exit %d (%s), %d keys printed after %d pages; want 0, %d keys, %d pages", code, errOut.String(), n, requests.Load(), perPage*pages, pages)
	}
	// When btk list held the keys, the heap reached 31 MiB by the 20th
	// page; a page is about 2.5 MB.
	if mb := heap.Load() >> 20; mb > 16 {
		t.Errorf("live heap reached %d MiB while listing; want a few pages at most", mb)
	}
	t.Logf("live heap at most %d MiB", heap.Load()>>20)
}
