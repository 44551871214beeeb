package server_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// Issue 15, row 8: a caller's User-Agent is stored cut to 256 bytes, so
// twenty elevations with a 60 KB User-Agent cannot grow the audit (or the
// owner's audit page) by megabytes.
func TestClientStringsTruncatedBeforeStored(t *testing.T) {
	e := newEnv(t)
	admin := e.admin()
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
