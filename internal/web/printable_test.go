package web_test

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// Text someone else chose is shown with its bidi overrides and invisible
// characters escaped, as the CLI shows it: a key holder's User-Agent
// "uaX\u202egnp.exe" showed on the key page as "uaXexe.png". The same goes
// for a webhook URL and a filter a link put in the audit page's form.
func TestClientTextShownEscaped(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const ua, shown = "uaX\u202egnp.exe", `uaX\u202egnp.exe`
	use := func(key string) int {
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/graphql", strings.NewReader(`{"query":"{ tenantInfo { id } }"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Api-Key", key)
		req.Header.Set("User-Agent", ua)
		res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	key := e.createKey(e.owner(), "plain")
	if code := use(key.Plaintext); code != http.StatusOK {
		t.Fatalf("the key's use: %d", code)
	}
	if err := e.svc.FlushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.CreateWebhook(ctx, e.owner(), "https://93.184.215.14/hook?x=\u2067gnp.exe", nil); err != nil {
		t.Fatal(err)
	}

	b := e.loggedIn(ownerEmail, ownerPassword)
	for _, c := range []struct{ path, want string }{
		{"/keys/" + key.Key.ID, shown},
		{"/audit?actor=" + url.QueryEscape(ua), shown},
		{"/webhooks", `x=\u2067gnp.exe`},
	} {
		r := b.get(c.path)
		if r.Status != http.StatusOK {
			t.Fatalf("%s: %d", c.path, r.Status)
		}
		if strings.ContainsAny(r.Body, "\u202e\u2067") {
			t.Errorf("%s shows a bidi override unescaped", c.path)
		}
		if !strings.Contains(r.Body, c.want) {
			t.Errorf("%s does not show %s", c.path, c.want)
		}
	}
}

// The dashboard escapes what Printable escapes in the whole page, so its
// own templates must have none of it: nothing of btk's changes.
func TestTemplatesPrintable(t *testing.T) {
	files, err := filepath.Glob("templates/*.html")
	if err != nil || len(files) == 0 {
		t.Fatalf("templates: %v %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if s := string(b); btk.Printable(s) != s {
			t.Errorf("%s has characters Printable escapes", f)
		}
	}
}
