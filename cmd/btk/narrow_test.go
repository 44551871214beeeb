package main

import (
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/btk-project/btk/internal/client"
)

// narrow renders with a printer on a fake terminal of the given width.
func narrow(t *testing.T, width int, draw func(p *printer)) []string {
	t.Helper()
	s, out, _ := testStreams(fakeTerminal, "")
	s.width = func() int { return width }
	p := newPrinter(s, formatTable, func() time.Time { return testNow })
	draw(p)
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	for _, l := range lines {
		if w := ansi.StringWidth(l); w > width {
			t.Errorf("line %d cells wide on a %d-column terminal: %q", w, width, ansi.Strip(l))
		}
	}
	for i, l := range lines {
		lines[i] = ansi.Strip(l)
	}
	t.Logf("at %d columns:\n%s", width, strings.Join(lines, "\n"))
	return lines
}

func testKeys() []client.ApiKey {
	used := testNow.Add(-3 * time.Minute)
	expires := testNow.Add(90 * 24 * time.Hour)
	mk := func(name, id, hint string) client.ApiKey {
		return client.ApiKey{Id: id, Name: name, DisplayPrefix: "btk_fc25ecba", Hint: hint, Status: client.ApiKeyStatusActive,
			Scopes: []string{}, CreatedAt: testNow.Add(-48 * time.Hour), LastUsedAt: &used, ExpiresAt: &expires}
	}
	return []client.ApiKey{
		mk("payments-backend-production-eu-west", "6f1c8f5e-2b0e-4d8a-9a51-0c9a7c3e4b21", "HCe4"),
		mk("payments-backend-production-eu-west-2", "0e5cc711-5031-47a3-b439-38d114385258", "9hbY"),
		mk("nightly-export", "15ae225b-cee5-4b71-beaa-28dbc73112eb", "onP0"),
	}
}

// docs/design.md#narrow-terminals: at 80 columns `btk list` keeps NAME, the hint that tells keys
// apart, and STATUS, whole; the shared display prefix goes first, then
// whole columns of low priority, and only then are names cut.
func TestListAt80Columns(t *testing.T) {
	isolate(t)
	lines := narrow(t, 80, func(p *printer) { p.apiKeyTable(testKeys()) })
	header := strings.Fields(lines[0])
	if header[0] != "NAME" || !strings.Contains(lines[0], "KEY") || !strings.Contains(lines[0], "STATUS") {
		t.Fatalf("header %q: want NAME, KEY and STATUS kept", lines[0])
	}
	if strings.Contains(lines[0], " ID ") || strings.HasSuffix(lines[0], " ID") {
		t.Errorf("the ID column should be dropped before names are cut: %q", lines[0])
	}
	body := strings.Join(lines[2:], "\n")
	for _, want := range []string{"…HCe4", "…9hbY", "…onP0", "ACTIVE", "payments-backend-production-eu-west-2", "nightly-export"} {
		if !strings.Contains(body, want) {
			t.Errorf("lacks %q at 80 columns:\n%s", want, strings.Join(lines, "\n"))
		}
	}
	if strings.Contains(body, "btk_fc25ecba") {
		t.Errorf("the shared display prefix should go first:\n%s", body)
	}

	// Wide enough for everything: nothing changes.
	wide := narrow(t, 200, func(p *printer) { p.apiKeyTable(testKeys()) })
	if !strings.Contains(wide[0], "ID") || !strings.Contains(wide[2], "btk_fc25ecba_…HCe4") || !strings.Contains(wide[0], "LAST USED") {
		t.Errorf("at 200 columns every column in full:\n%s", strings.Join(wide, "\n"))
	}

	// Very narrow: NAME is cut before KEY or STATUS.
	tiny := narrow(t, 40, func(p *printer) { p.apiKeyTable(testKeys()) })
	if f := strings.Fields(tiny[0]); len(f) != 3 || f[0] != "NAME" || f[1] != "KEY" || f[2] != "STATUS" {
		t.Errorf("at 40 columns want NAME KEY STATUS, got %q", tiny[0])
	}
	if !strings.Contains(tiny[2], "…HCe4") || !strings.Contains(tiny[2], "ACTIVE") {
		t.Errorf("at 40 columns the hint and status stay whole: %q", tiny[2])
	}
}

func testEvents() []client.AuditEvent {
	ws := "b8fdd70b-25e4-42be-bf0a-45b876933b9f"
	mk := func(action, typ, id, meta string) client.AuditEvent {
		return client.AuditEvent{Id: "e", WorkspaceId: ws, Action: action, ActorEmail: "admin@example.com",
			TargetType: typ, TargetId: id, Metadata: meta, CreatedAt: testNow.Add(-5 * time.Minute)}
	}
	return []client.AuditEvent{
		mk("api_key.rotated", "api_key", "6f1c8f5e-2b0e-4d8a-9a51-0c9a7c3e4b21", `{"name":"payments-backend","newApiKeyId":"0e5cc711-5031-47a3-b439-38d114385258"}`),
		mk("session.login", "session", "15ae225b-cee5-4b71-beaa-28dbc73112eb", `{"ip":"127.0.0.1","userAgent":"btk/dev"}`),
		mk("workspace.limits_changed", "workspace", ws, `{"perDay":5000,"perMinute":30}`),
	}
}

// docs/design.md#narrow-terminals: at 80 columns `btk events` drops the repeated workspace id
// first, then the target (a key event's DETAIL names the key), and keeps
// TIME, ACTION and ACTOR whole.
func TestEventsAt80Columns(t *testing.T) {
	isolate(t)
	lines := narrow(t, 80, func(p *printer) { p.eventTable(testEvents()) })
	if f := strings.Fields(lines[0]); strings.Join(f, " ") != "TIME ACTION ACTOR DETAIL" {
		t.Errorf("header at 80 columns %q, want TIME ACTION ACTOR DETAIL", lines[0])
	}
	body := strings.Join(lines[2:], "\n")
	for _, want := range []string{"5 minutes ago", "api_key.rotated", "workspace.limits_changed", "admin@example.com", "name=payments"} {
		if !strings.Contains(body, want) {
			t.Errorf("lacks %q at 80 columns:\n%s", want, strings.Join(lines, "\n"))
		}
	}
	if strings.Contains(body, "b8fdd70b") {
		t.Errorf("the workspace id is still shown:\n%s", body)
	}

	// A little wider: the workspace still goes first, the target stays
	// with its id shortened.
	mid := narrow(t, 110, func(p *printer) { p.eventTable(testEvents()) })
	if f := strings.Fields(mid[0]); strings.Join(f, " ") != "TIME ACTION ACTOR TARGET DETAIL" {
		t.Errorf("header at 110 columns %q, want the workspace dropped only", mid[0])
	}
	if !strings.Contains(mid[2], "api_key 6f1c8f5e ") || strings.Contains(mid[2], "6f1c8f5e-") {
		t.Errorf("at 110 columns the target's id shortened: %q", mid[2])
	}

	wide := narrow(t, 250, func(p *printer) { p.eventTable(testEvents()) })
	if !strings.Contains(wide[0], "WORKSPACE") || !strings.Contains(wide[2], "6f1c8f5e-2b0e-4d8a-9a51-0c9a7c3e4b21") {
		t.Errorf("at 250 columns every column in full:\n%s", strings.Join(wide, "\n"))
	}
}

// Off a terminal (and with -o plain) nothing is dropped or shortened.
func TestNarrowOnlyOnATerminal(t *testing.T) {
	isolate(t)
	s, out, _ := testStreams(pipe, "")
	s.width = func() int { return 40 }
	p := newPrinter(s, formatTable, func() time.Time { return testNow })
	p.apiKeyTable(testKeys())
	if !strings.Contains(out.String(), "btk_fc25ecba_…HCe4") || !strings.Contains(out.String(), "6f1c8f5e-2b0e-4d8a-9a51-0c9a7c3e4b21") {
		t.Errorf("piped output changed:\n%s", out.String())
	}
}
