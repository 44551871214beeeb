package web_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// stepTimeout bounds every browser step (a navigation, a click and its page).
const stepTimeout = 20 * time.Second

// startChromium starts one headless Chromium for the whole test and returns
// the context of its first tab; it skips when Debian's chromium is absent.
func startChromium(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("browser tests need Chromium: install the Debian package chromium")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
	})
	// The first Run starts the browser and ties it to ctx, so it gets no
	// deadline of its own; it is bounded from outside instead.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start chromium: %v", err)
		}
	case <-time.After(60 * time.Second):
		cancelCtx()
		t.Fatal("chromium did not start within 60s")
	}
	return ctx
}

// do runs browser steps under stepTimeout.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// get runs one browser action that returns a value, under stepTimeout.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(sctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

func css(s string) chromedp.CSS { return chromedp.CSS(s) }

// screenshots writes PNGs of the dashboard when BTK_SCREENSHOTS is set:
// "1" writes the two the docs show (docs/dashboard-keys.png and
// docs/dashboard-audit.png, 1280 px wide); a directory receives every page
// at 1280 and 375 px, light and dark, for review.
type screenshots struct {
	dir    string
	readme bool
}

func newScreenshots(t *testing.T) screenshots {
	dir, readme := os.Getenv("BTK_SCREENSHOTS"), false
	if dir == "1" {
		dir, readme = filepath.Join("..", "..", "docs"), true
	}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return screenshots{dir: dir, readme: readme}
}

func (s screenshots) take(t *testing.T, ctx context.Context, name string, variants bool) {
	t.Helper()
	if s.dir == "" || s.readme && name != "dashboard-keys" && name != "dashboard-audit" {
		return
	}
	shoot := func(file string, width int64, dark bool) {
		scheme := "light"
		if dark {
			scheme = "dark"
		}
		do(t, ctx, "emulate "+file,
			chromedp.EmulateViewport(width, 800),
			chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
				_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
					Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
				})
				return err
			}),
		)
		png := get(t, ctx, "screenshot "+file, chromedp.FullScreenshot(100))
		if err := os.WriteFile(filepath.Join(s.dir, file), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shoot(name+".png", 1280, false)
	if variants && !s.readme {
		shoot(name+"-375.png", 375, false)
		shoot(name+"-dark.png", 1280, true)
		shoot(name+"-375-dark.png", 375, true)
	}
	do(t, ctx, "reset viewport", chromedp.EmulateViewport(1280, 800))
}

// TestBrowser drives the dashboard in a real headless Chromium, once started
// for all its subtests: the owner's whole key lifecycle, then an ADMIN's view.
func TestBrowser(t *testing.T) {
	ctx := startChromium(t)
	e := newEnv(t)
	shots := newScreenshots(t)
	owner := e.owner()
	// Two keys that already exist, one in use, so the page looks lived in.
	limit := func(n int) *int { return &n }
	if _, err := e.svc.CreateKey(context.Background(), owner, btk.CreateKeyInput{
		Name: "billing-worker", RateLimitPerMinute: limit(120), RateLimitPerDay: limit(50000),
	}); err != nil {
		t.Fatal(err)
	}
	used := e.createKey(owner, "nightly-export")
	if e.tenantInfo(used.Plaintext) != 200 {
		t.Fatal("a fresh key was refused")
	}
	if err := e.svc.FlushUsage(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.addUser(adminEmail, e.ws.ID, btk.RoleAdmin)
	base := e.srv.URL

	var first, second string
	t.Run("owner", func(t *testing.T) {
		do(t, ctx, "open the login page", chromedp.Navigate(base+"/keys"), chromedp.WaitVisible(css("#email")))
		if loc := get(t, ctx, "location", chromedp.Location()); !strings.HasSuffix(loc, "/login") {
			t.Fatalf("an anonymous /keys went to %s, want /login", loc)
		}
		shots.take(t, ctx, "dashboard-login", false)
		do(t, ctx, "log in",
			chromedp.SendKeys(css("#email"), ownerEmail),
			chromedp.SendKeys(css("#password"), ownerPassword),
			chromedp.Click(css("button[type=submit]")),
			chromedp.WaitVisible(css("#create-title")),
		)
		if c := get(t, ctx, "document.cookie", chromedp.Evaluate[string](`document.cookie`)); strings.Contains(c, "btk_session") {
			t.Errorf("the session cookie is readable from JavaScript: %q", c)
		}

		do(t, ctx, "create a key",
			chromedp.SendKeys(css("#name"), "ci-deploy"),
			chromedp.SendKeys(css("#per_minute"), "60"),
			chromedp.Click(css("form.create button[type=submit]")),
			chromedp.WaitVisible(css("#new-key")),
		)
		first = strings.TrimSpace(get(t, ctx, "read the new key", chromedp.Text(css("#new-key"))))
		if !btk.WellFormedKey(first) {
			t.Fatalf("the page shows %q, not a key", first)
		}
		if n := get(t, ctx, "copy button", chromedp.Evaluate[int](`document.querySelectorAll('button[data-copy]:not([hidden])').length`)); n != 1 {
			t.Errorf("visible copy buttons: %d, want 1 (copy.js enables it)", n)
		}
		shots.take(t, ctx, "dashboard-keys", true)
		if got := e.tenantInfo(first); got != 200 {
			t.Fatalf("tenantInfo with the new key: HTTP %d, want 200", got)
		}

		do(t, ctx, "reload the keys page", chromedp.Navigate(base+"/keys"), chromedp.WaitVisible(css("#list-title")))
		html := get(t, ctx, "page HTML", chromedp.OuterHTML(css("html")))
		if strings.Contains(html, first) || strings.Contains(html, `id="new-key"`) {
			t.Fatal("the plaintext is still on the keys page after a reload")
		}
		if !strings.Contains(html, "ci-deploy") {
			t.Fatal("the new key is not listed")
		}

		do(t, ctx, "open rotate", chromedp.Click(css(`a[aria-label="Rotate ci-deploy"]`)), chromedp.WaitVisible(css("#password")))
		do(t, ctx, "rotate with a wrong password",
			chromedp.SendKeys(css("#password"), "not-my-password"),
			chromedp.Click(css("button[type=submit].btn-primary")),
			chromedp.WaitVisible(css(".alert-error")),
		)
		shots.take(t, ctx, "dashboard-rotate", false)
		if got := e.tenantInfo(first); got != 200 {
			t.Fatalf("a refused rotation changed the key: HTTP %d", got)
		}
		do(t, ctx, "rotate with the password",
			chromedp.SendKeys(css("#password"), ownerPassword),
			chromedp.Click(css("button[type=submit].btn-primary")),
			chromedp.WaitVisible(css("#new-key")),
		)
		second = strings.TrimSpace(get(t, ctx, "read the rotated key", chromedp.Text(css("#new-key"))))
		if !btk.WellFormedKey(second) || second == first {
			t.Fatalf("after rotation the page shows %q", second)
		}
		if got := e.tenantInfo(first); got != 401 {
			t.Errorf("the old key after rotation: HTTP %d, want 401", got)
		}
		if got := e.tenantInfo(second); got != 200 {
			t.Errorf("the rotated key: HTTP %d, want 200", got)
		}
		do(t, ctx, "back to the list", chromedp.Navigate(base+"/keys"), chromedp.WaitVisible(css("#list-title")))
		if html := get(t, ctx, "page HTML", chromedp.OuterHTML(css("html"))); strings.Contains(html, second) {
			t.Fatal("the rotated plaintext is shown again")
		}

		do(t, ctx, "open revoke", chromedp.Click(css(`a[aria-label="Revoke ci-deploy"]`)), chromedp.WaitVisible(css("button.btn-danger")))
		shots.take(t, ctx, "dashboard-revoke", false)
		if got := e.tenantInfo(second); got != 200 {
			t.Fatalf("the confirmation page revoked already: HTTP %d", got)
		}
		do(t, ctx, "confirm revoke", chromedp.Click(css("button.btn-danger")), chromedp.WaitVisible(css(".alert-success")))
		if got := e.tenantInfo(second); got != 401 {
			t.Errorf("the revoked key: HTTP %d, want 401", got)
		}

		do(t, ctx, "open the audit log", chromedp.Click(css(`.nav a[href="/audit"]`)), chromedp.WaitVisible(css("table.audit")))
		text := get(t, ctx, "audit text", chromedp.Text(css("table.audit")))
		for _, want := range []string{"Created key", "Rotated key", "Revoked key", "ci-deploy", ownerEmail} {
			if !strings.Contains(text, want) {
				t.Errorf("the audit log does not show %q:\n%s", want, text)
			}
		}
		// Newest first: the revocation heads the table.
		firstRow := get(t, ctx, "first audit row", chromedp.Text(css("table.audit tbody tr")))
		if !strings.Contains(firstRow, "Revoked key") {
			t.Errorf("the newest event is not first: %q", firstRow)
		}
		shots.take(t, ctx, "dashboard-audit", true)

		// Keyboard only: Tab from the top of the page reaches the Name field,
		// and Enter creates the key.
		do(t, ctx, "keys page for the keyboard", chromedp.Navigate(base+"/keys"), chromedp.WaitVisible(css("#name")))
		reached := false
		for range 20 {
			do(t, ctx, "Tab", chromedp.KeyEvent(kb.Tab))
			if id := get(t, ctx, "focus", chromedp.Evaluate[string](`document.activeElement.id`)); id == "name" {
				reached = true
				break
			}
		}
		if !reached {
			t.Fatal("20 Tabs did not reach the Name field")
		}
		do(t, ctx, "create with the keyboard", chromedp.KeyEvent("kbd-key"), chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(css("#new-key")))
		if k := strings.TrimSpace(get(t, ctx, "keyboard key", chromedp.Text(css("#new-key")))); e.tenantInfo(k) != 200 {
			t.Errorf("the key created with the keyboard does not work: %q", k)
		}

		if shots.dir != "" {
			do(t, ctx, "workspaces", chromedp.Navigate(base+"/workspaces"), chromedp.WaitVisible(css("table")))
			shots.take(t, ctx, "dashboard-workspaces", true)
		}

		do(t, ctx, "log out", chromedp.Click(css(`form[action="/logout"] button`)), chromedp.WaitVisible(css("#email")))
		do(t, ctx, "keys after logout", chromedp.Navigate(base+"/keys"), chromedp.WaitVisible(css("#email")))
	})

	t.Run("admin sees no controls", func(t *testing.T) {
		do(t, ctx, "log in as ADMIN",
			chromedp.Navigate(base+"/login"),
			chromedp.WaitVisible(css("#email")),
			chromedp.SendKeys(css("#email"), adminEmail),
			chromedp.SendKeys(css("#password"), userPassword),
			chromedp.Click(css("button[type=submit]")),
			chromedp.WaitVisible(css("#list-title")),
		)
		text := get(t, ctx, "keys text", chromedp.Text(css("main")))
		if !strings.Contains(text, "billing-worker") || !strings.Contains(text, "nightly-export") {
			t.Errorf("the ADMIN does not see the keys:\n%s", text)
		}
		controls := get(t, ctx, "controls", chromedp.Evaluate[int](
			`document.querySelectorAll('form[action="/keys"], a[href$="/rotate"], a[href$="/revoke"], form[action$="/revoke"], #create-title').length`))
		if controls != 0 {
			t.Errorf("the ADMIN sees %d key controls, want none", controls)
		}
		shots.take(t, ctx, "dashboard-keys-admin", false)
	})
}
