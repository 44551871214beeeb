package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// Stored client strings are bounded (docs/security.md#what-a-client-can-make-the-server-hold):
// a caller's User-Agent is stored cut to 256 bytes, so
// twenty elevations with a 60 KB User-Agent cannot grow the audit (or the
// owner's audit page) by megabytes.
func TestClientStringsTruncatedBeforeStored(t *testing.T) {
	e, admin := newAdminEnv(t)
	admin.Header = map[string]string{"User-Agent": strings.Repeat("é", 30_000)} // 60 KB, two-byte characters
	for range 20 {
		e.elevated(admin, adminPassword)
	}
	var out struct {
		AuditEvents struct {
			Nodes []struct{ Action, Metadata string }
		}
	}
	admin.Header = nil
	e.must(admin, `{auditEvents(first:50, action:"session.elevated"){nodes{action metadata}}}`, nil, &out)
	if len(out.AuditEvents.Nodes) != 20 {
		t.Fatalf("%d session.elevated events, want 20", len(out.AuditEvents.Nodes))
	}
	total := 0
	for _, n := range out.AuditEvents.Nodes {
		var m struct{ UserAgent string }
		if err := json.Unmarshal([]byte(n.Metadata), &m); err != nil {
			t.Fatal(err)
		}
		if len(m.UserAgent) > 256 || !strings.HasPrefix(m.UserAgent, "éé") || strings.ContainsRune(m.UserAgent, '\uFFFD') {
			t.Fatalf("stored user agent of %d bytes: %.40q…", len(m.UserAgent), m.UserAgent)
		}
		total += len(n.Metadata)
	}
	if total > 20*512 {
		t.Fatalf("20 events' metadata take %d bytes", total)
	}
}

// Fields sharing one response name, and the errors of one answer, are bounded
// (docs/security.md#bounds-on-a-request): conflicting aliases made the validator report
// one error per conflicting pair: a logged-in member's 3.6 KB query got
// 27,225 errors (7 MB), an anonymous one 1,089. An answer now carries at
// most 100 errors and one saying how many were left out, and stays under
// 64 KiB, for every caller kind.
func TestConflictingAliasesErrorsBounded(t *testing.T) {
	e, admin := newAdminEnv(t)
	id := e.createAccount(admin, "member@example.com", "member-password-1", false)
	e.setMember(admin, e.adminWS, id, "MEMBER")
	member := cred{Bearer: e.login("member@example.com", "member-password-1", "")}
	key := cred{Key: e.createKey(admin, "aliases").Plaintext}
	for _, c := range []struct {
		name  string
		who   cred
		query string
	}{
		{"member", member, alternate(64, "me{id}", "__typename")},
		{"anonymous", cred{}, alternate(64, "workspaceBranding(publicKey:\"x\"){name}", "__typename")},
		{"key", key, alternate(64, "tenantInfo{name}", "__typename")},
		// Messages quote the alias: a 2,500-byte one is cut.
		{"member, long alias", member, alternateAs(strings.Repeat("b", 2500), 24, "me{id}", "__typename")},
	} {
		for _, accept := range []string{"application/json", "application/graphql-response+json"} {
			body, _ := json.Marshal(map[string]any{"query": c.query})
			status, out := e.postRaw(body, accept, c.who)
			raw, _ := json.Marshal(out)
			var errs []gqlError
			json.Unmarshal(out["errors"], &errs)
			if len(raw) > 64<<10 || len(errs) > 101 || len(errs) < 2 {
				t.Fatalf("%s (%s): HTTP %d, %d errors, %d bytes", c.name, accept, status, len(errs), len(raw))
			}
			last := errs[len(errs)-1].Message
			if !strings.Contains(last, "more errors were left out") || errs[0].Extensions["code"] != "GRAPHQL_VALIDATION_FAILED" {
				t.Fatalf("%s: the last error %q, the first %+v", c.name, last, errs[0])
			}
			t.Logf("%s: %d bytes sent, %d errors, %d bytes answered; %s", c.name, len(body), len(errs), len(raw), last)
		}
	}
	// More than 64 fields sharing a name are refused before validation,
	// which would compare each pair (320: 34 ms of CPU, 30 MB allocated).
	body, _ := json.Marshal(map[string]any{"query": alternate(320, "me{id}", "__typename")})
	if _, out := e.postRaw(body, "application/json", member); firstCode(t, out) != "COMPLEXITY_LIMIT_EXCEEDED" {
		t.Fatalf("320 fields named a: %s", out["errors"])
	}
}

// Attacker pass: a page cost the same whatever its size, so an owner's 45
// aliases of auditEvents(first: 100) read 4,500 rows into a 1.8 MB answer
// (113 ms of CPU). A page now costs its rows: that is refused, and the
// CLI's largest page (500 keys) still fits.
func TestPagesCostTheirRows(t *testing.T) {
	e, owner := newAdminEnv(t)
	if r := e.do(owner, aliasQuery(45, "auditEvents(first:100){nodes{id action metadata createdAt}}"), nil); r.Code() != "COMPLEXITY_LIMIT_EXCEEDED" {
		t.Fatalf("45 pages of 100 events: %q %+v", r.Code(), r.Errors)
	}
	var out struct {
		ApiKeys struct{ Nodes []struct{ ID string } }
	}
	e.must(owner, `{apiKeys(first:500){nodes{id name displayPrefix hint status rateLimitPerMinute rateLimitPerDay expiresAt lastUsedAt createdAt}}}`, nil, &out)
}

// Attacker pass: the query cache and the remembered operation costs kept
// any valid document with its source, so distinct 60 KB documents (a
// comment fills them) from an anonymous caller stayed in memory, 1,000 of
// them at a time (64 MB). Only small documents are kept now.
func TestQueryCacheHoldsOnlySmallDocuments(t *testing.T) {
	e := newEnv(t)
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	pad := strings.Repeat("x", 60_000)
	before := heap()
	for i := range 200 {
		r := e.do(cred{}, fmt.Sprintf("{__typename} #%d %s", i, pad), nil)
		if r.Status != http.StatusOK || len(r.Errors) > 0 {
			t.Fatalf("document %d: HTTP %d %+v", i, r.Status, r.Errors)
		}
	}
	if grew := heap() - before; grew > 4<<20 {
		t.Fatalf("200 documents of 60 KB left %d MB in memory", grew>>20)
	}
}
