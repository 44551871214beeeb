package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/btk-project/btk/internal/btk"
)

// overflowJS lists what overflows horizontally: the page, or any card or
// scroll container inside one (a hidden horizontal scroll counts).
const overflowJS = `(() => {
  const bad = [];
  const d = document.documentElement;
  if (d.scrollWidth > d.clientWidth) bad.push("page " + d.scrollWidth + ">" + d.clientWidth);
  document.querySelectorAll(".card, .table-wrap").forEach(el => {
    if (el.scrollWidth > el.clientWidth) bad.push((el.getAttribute("aria-labelledby") || el.className) + " " + el.scrollWidth + ">" + el.clientWidth);
  });
  return bad.join("; ");
})()`

// axeViolation is what the test keeps of an axe-core violation.
type axeViolation struct {
	ID    string `json:"id"`
	Help  string `json:"help"`
	Nodes []struct {
		Target []any `json:"target"`
	} `json:"nodes"`
}

// TestBrowserLayout (docs/design.md#dashboard, docs/usage.md): with five keys in use,
// the keys list, a key's page and the audit log fit at 1440, 1280, 1024 and
// 375 px (no horizontal overflow of the page or of any card), the key page
// can be used with the keyboard alone, and axe-core reports no violation on
// any of them (BTK_TEST_AXE: the path of axe.min.js; .ci/run installs it).
// With BTK_SCREENSHOTS=1 the pages are written to docs/screenshots/.
func TestBrowserLayout(t *testing.T) {
	ctx := startChromium(t)
	e := newEnv(t)
	owner := e.owner()
	names := []string{"billing-worker-eu-west", "nightly-export", "ci-deploy-production", "analytics ingest pipeline", "partner-webhooks"}
	var keys []*btk.NewKeyResult
	for i, n := range names {
		per := 100000 + i
		k, err := e.svc.CreateKey(context.Background(), owner, btk.CreateKeyInput{Name: n, RateLimitPerMinute: &per, RateLimitPerDay: &per})
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
		for range i + 1 {
			e.tenantInfo(k.Plaintext)
		}
	}
	if _, err := e.svc.RevokeKey(context.Background(), owner, keys[4].Key.ID); err != nil {
		t.Fatal(err)
	}
	e.tenantInfo(keys[4].Plaintext) // refused: counted against the revoked key
	if err := e.svc.FlushUsage(context.Background()); err != nil {
		t.Fatal(err)
	}
	base := e.srv.URL
	shotDir := ""
	if os.Getenv("BTK_SCREENSHOTS") != "" {
		shotDir = filepath.Join("..", "..", "docs", "screenshots")
		if err := os.MkdirAll(shotDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var axeSrc string
	if p := os.Getenv("BTK_TEST_AXE"); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("BTK_TEST_AXE: %v", err)
		}
		axeSrc = string(b)
	}

	do(t, ctx, "log in",
		chromedp.EmulateViewport(1280, 800),
		chromedp.Navigate(base+"/login"), chromedp.WaitVisible(css("#email")),
		chromedp.SendKeys(css("#email"), ownerEmail),
		chromedp.SendKeys(css("#password"), ownerPassword),
		chromedp.Click(css("button[type=submit]")),
		chromedp.WaitVisible(css("#list-title")),
	)
	if n := get(t, ctx, "sparklines", chromedp.Evaluate[int](`document.querySelectorAll("svg.spark").length`)); n != 4 {
		t.Errorf("%d sparklines on the active keys list, want 4", n)
	}
	pages := []struct{ name, path, ready string }{
		{"keys", "/keys?status=all", "#list-title"},
		{"key", "/keys/" + keys[2].Key.ID, "#usage-title"},
		{"key-hours", "/keys/" + keys[4].Key.ID + "?by=hour", "#usage-title"},
		{"audit", "/audit", "table.audit"},
	}
	for _, width := range []int64{1440, 1280, 1024, 375} {
		for _, p := range pages {
			what := fmt.Sprintf("%s at %d px", p.name, width)
			do(t, ctx, what, chromedp.EmulateViewport(width, 900), chromedp.Navigate(base+p.path), chromedp.WaitVisible(css(p.ready)))
			if bad := get(t, ctx, "overflow "+what, chromedp.Evaluate[string](overflowJS)); bad != "" {
				t.Errorf("%s overflows horizontally: %s", what, bad)
			}
			if shotDir != "" {
				png := get(t, ctx, "screenshot "+what, chromedp.FullScreenshot(100))
				if err := os.WriteFile(filepath.Join(shotDir, fmt.Sprintf("%s-%d.png", p.name, width)), png, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if axeSrc != "" && (width == 1280 || width == 375) {
				checkAxe(t, ctx, what, axeSrc)
			}
		}
	}
	if axeSrc == "" {
		t.Log("axe-core not run: set BTK_TEST_AXE to the path of axe.min.js (npm install axe-core; .ci/run does)")
	}

	// The key page and its numbers: the chart's table carries the counts.
	do(t, ctx, "key page", chromedp.EmulateViewport(1280, 900), chromedp.Navigate(base+"/keys/"+keys[2].Key.ID), chromedp.WaitVisible(css("#usage-title")))
	table := get(t, ctx, "usage table", chromedp.Text(css(".usage-table tbody tr")))
	if !strings.Contains(table, "3") {
		t.Errorf("today's row does not show the 3 accepted uses: %q", table)
	}
	text := get(t, ctx, "key page text", chromedp.Text(css("main")))
	for _, want := range []string{"ci-deploy-production", "Restrictions", "Scopes", "History", "Created", ownerEmail, "127.0.0.1"} {
		if !strings.Contains(text, want) {
			t.Errorf("the key page does not show %q", want)
		}
	}

	// Keyboard only: from the top of the key page, Tab reaches the period
	// switch, Enter follows it, and Tab reaches the Revoke action.
	do(t, ctx, "key page for the keyboard", chromedp.Navigate(base+"/keys/"+keys[2].Key.ID), chromedp.WaitVisible(css("#usage-title")))
	tabTo := func(what, js string) {
		t.Helper()
		for range 40 {
			do(t, ctx, "Tab", chromedp.KeyEvent(kb.Tab))
			if get(t, ctx, "focus", chromedp.Evaluate[bool](js)) {
				return
			}
		}
		t.Fatalf("40 Tabs did not reach %s", what)
	}
	tabTo("the 48 hours tab", `document.activeElement.matches('a[href$="?by=hour"]')`)
	do(t, ctx, "follow with Enter", chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(css(`a[href$="?by=hour"][aria-current="true"]`)))
	tabTo("the usage table", `document.activeElement.matches('.usage-table')`)
	tabTo("Revoke", `document.activeElement.matches('a[href$="/revoke"]')`)
	do(t, ctx, "open revoke with Enter", chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(css("button.btn-danger")))

	// After creating a key, focus is on its plaintext, which the alert
	// above it describes.
	do(t, ctx, "create a key", chromedp.Navigate(base+"/keys"), chromedp.WaitVisible(css("#name")),
		chromedp.SendKeys(css("#name"), "focus-check"), chromedp.Click(css("form.create button[type=submit]")), chromedp.WaitVisible(css("#new-key")))
	if id := get(t, ctx, "focus after create", chromedp.Evaluate[string](`document.activeElement.id`)); id != "new-key" {
		t.Errorf("after creating a key the focus is on %q, want the new key", id)
	}
	if role := get(t, ctx, "announcement", chromedp.Evaluate[string](`document.getElementById(document.getElementById("new-key").getAttribute("aria-describedby")).getAttribute("role")`)); role != "alert" {
		t.Errorf("the new key's description has role %q, want alert", role)
	}
}

// checkAxe runs axe-core on the current page and fails on any violation.
func checkAxe(t *testing.T, ctx context.Context, what, src string) {
	t.Helper()
	if !get(t, ctx, "axe present", chromedp.Evaluate[bool](`typeof axe !== "undefined"`)) {
		get(t, ctx, "inject axe", chromedp.Evaluate[bool](src+";true"))
	}
	raw := get(t, ctx, "axe "+what, chromedp.Evaluate[string](
		`axe.run(document, {resultTypes: ["violations"]}).then(r => JSON.stringify(r.violations))`, chromedp.EvalAwaitPromise))
	var vs []axeViolation
	if err := json.Unmarshal([]byte(raw), &vs); err != nil {
		t.Fatalf("axe %s: %v", what, err)
	}
	for _, v := range vs {
		var targets []string
		for _, n := range v.Nodes {
			targets = append(targets, fmt.Sprint(n.Target...))
		}
		t.Errorf("axe %s: %s (%s) at %s", what, v.ID, v.Help, strings.Join(targets, ", "))
	}
}
