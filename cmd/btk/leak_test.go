package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/leaktest"
	"github.com/btk-project/btk/internal/server"
	"github.com/btk-project/btk/internal/store"
)

// leakServer is a real btk server (SQLite) behind a recorder of every
// request body it receives, with the CLI pointed at it as its owner (the
// bootstrap platform admin).
type leakServer struct {
	svc    *btk.Service
	owner  *btk.Actor
	mu     sync.Mutex
	bodies [][]byte
}

func newLeakServer(t *testing.T) *leakServer {
	t.Helper()
	isolate(t)
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "btk.db"), false)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := btk.NewService(ctx, db, nil, btk.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Bootstrap(ctx, procAdminEmail, procAdminPassword); err != nil {
		t.Fatal(err)
	}
	info, err := svc.Login(ctx, procAdminEmail, procAdminPassword, "")
	if err != nil {
		t.Fatal(err)
	}
	ls := &leakServer{svc: svc}
	if ls.owner, err = svc.ResolveSession(ctx, info.Token); err != nil {
		t.Fatal(err)
	}
	h := server.New(svc, db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ls.mu.Lock()
		ls.bodies = append(ls.bodies, append(b, []byte(r.URL.String()+" "+strings.Join(r.Header.Values("X-Api-Key"), " "))...))
		ls.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		db.Close()
	})
	t.Setenv("BTK_SERVER", srv.URL)
	t.Setenv("BTK_TOKEN", info.Token)
	return ls
}

func (ls *leakServer) createKey(t *testing.T, name string, canary bool) *btk.NewKeyResult {
	t.Helper()
	res, err := ls.svc.CreateKey(context.Background(), ls.owner, btk.CreateKeyInput{Name: name, Canary: canary})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// sent fails the test if any request the server received holds a plaintext.
func (ls *leakServer) neverSent(t *testing.T, plaintexts ...string) {
	t.Helper()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(ls.bodies) == 0 {
		t.Fatal("the server received nothing")
	}
	for _, b := range ls.bodies {
		for _, p := range plaintexts {
			if bytes.Contains(b, []byte(p)) || bytes.Contains(b, []byte(p[13:])) {
				t.Fatalf("the server received a plaintext key: %.200s", b)
			}
		}
	}
}

func (ls *leakServer) received(t *testing.T, s string) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, b := range ls.bodies {
		if bytes.Contains(b, []byte(s)) {
			return true
		}
	}
	return false
}

// btk whois reads the key from standard input (piped text holding it, or a
// prompt on a terminal), asks by hash only, and tells whose key it is.
func TestWhoisNeverSendsThePlaintext(t *testing.T) {
	ls := newLeakServer(t)
	k := ls.createKey(t, "payments-backend", false)
	s, out, errOut := testStreams(pipe, "2026-11-24T03:00:00Z GET /orders api_key="+k.Plaintext+" 200\n")
	if code := btkRun(s, "whois"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"Default", "payments-backend", k.Key.ID, "ACTIVE", procAdminEmail, "CREATED"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("whois output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out.String(), k.Plaintext) {
		t.Error("whois printed the plaintext")
	}
	s, out, errOut = testStreams(fakeTerminal, k.Plaintext+"\n")
	if code := btkRun(s, "whois", "-o", "json"); code != 0 {
		t.Fatalf("on a terminal: exit %d: %s", code, errOut)
	}
	var doc struct {
		ApiKey struct {
			ID        string `json:"id"`
			Workspace struct{ Name string }
		} `json:"apiKey"`
		CreatedBy string `json:"createdBy"`
		History   []any  `json:"history"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || doc.ApiKey.ID != k.Key.ID || doc.CreatedBy != procAdminEmail ||
		doc.ApiKey.Workspace.Name != "Default" || len(doc.History) != 1 {
		t.Errorf("-o json: %v %+v\n%s", err, doc, out)
	}
	// Not a key of this server: exit 5, and nothing said about it.
	other, _, _, _ := btk.NewKey("3f2a9c1e-0000-4000-8000-000000000000")
	s, _, errOut = testStreams(pipe, other)
	if code := btkRun(s, "whois"); code != exitNotFound {
		t.Errorf("an unknown key: exit %d; want 5 (%s)", code, errOut)
	}
	s, _, _ = testStreams(pipe, "no key here")
	if code := btkRun(s, "whois"); code != exitUsage {
		t.Errorf("no key on stdin: exit %d; want 2", code)
	}
	ls.neverSent(t, k.Plaintext, other)
	if !ls.received(t, leaktest.Hash(k.Plaintext)) {
		t.Error("the server never received the key's hash")
	}
}

// btk revoke - revokes the key read from standard input, found by hash.
func TestRevokeFromStdin(t *testing.T) {
	ls := newLeakServer(t)
	k := ls.createKey(t, "leaky", false)
	s, _, errOut := testStreams(pipe, k.Plaintext)
	if code := btkRun(s, "revoke", "-"); code != exitUsage {
		t.Fatalf("without --yes and a terminal: exit %d; want 2 (%s)", code, errOut)
	}
	s, _, errOut = testStreams(pipe, k.Plaintext+"\n")
	if code := btkRun(s, "revoke", "-", "--yes"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if _, _, err := ls.svc.AuthenticateKey(context.Background(), k.Plaintext); err != btk.ErrKeyRevokedOrExpired {
		t.Errorf("after revoke -: %v", err)
	}
	// On a terminal: the key at a prompt without echo, then the confirmation.
	k2 := ls.createKey(t, "leaky-2", false)
	s, _, errOut = testStreams(fakeTerminal, k2.Plaintext+"\ny\n")
	if code := btkRun(s, "revoke", "-"); code != 0 {
		t.Fatalf("on a terminal: exit %d: %s", code, errOut)
	}
	if _, _, err := ls.svc.AuthenticateKey(context.Background(), k2.Plaintext); err != btk.ErrKeyRevokedOrExpired {
		t.Errorf("after revoke - on a terminal: %v", err)
	}
	ls.neverSent(t, k.Plaintext, k2.Plaintext)
}

// btk audit --key NAME finds a name whose keys are all revoked.
func TestAuditKeyNameAllRevoked(t *testing.T) {
	ls := newLeakServer(t)
	k := ls.createKey(t, "gone", false)
	if _, err := ls.svc.RevokeKey(context.Background(), ls.owner, k.Key.ID); err != nil {
		t.Fatal(err)
	}
	s, out, errOut := testStreams(pipe, "")
	if code := btkRun(s, "audit", "--key", "gone", "-o", "json"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var entries []struct{ Action, ApiKeyId string }
	if err := json.Unmarshal(out.Bytes(), &entries); err != nil || len(entries) != 2 || entries[0].Action != "REVOKED" || entries[1].Action != "CREATED" {
		t.Errorf("audit --key of an all-revoked name: %v %s", err, out)
	}
	s, _, _ = testStreams(pipe, "")
	if code := btkRun(s, "audit", "--key", "never-was"); code != exitNotFound {
		t.Errorf("an unknown name: exit %d; want 5", code)
	}
}

// btk scan finds keys without printing them; --check asks by hash only and
// exits 0 when nothing found is active; --revoke revokes the active ones.
func TestScanCheckAndRevoke(t *testing.T) {
	ls := newLeakServer(t)
	active := ls.createKey(t, "live", false)
	gone := ls.createKey(t, "dead", false)
	if _, err := ls.svc.RevokeKey(context.Background(), ls.owner, gone.Key.ID); err != nil {
		t.Fatal(err)
	}
	stranger, _, _, _ := btk.NewKey("3f2a9c1e-0000-4000-8000-000000000000")
	dir := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("app/.env", "A=1\nBTK_KEY="+active.Plaintext+"\n")
	write("docs/old.md", "revoked: `"+gone.Plaintext+"`, someone else's: "+stranger+"\n")
	write(".git/config", active.Plaintext)
	write("logo.png", "\x00\x01"+active.Plaintext)

	s, out, errOut := testStreams(pipe, "")
	if code := btkRun(s, "scan", dir); code != exitKeysFound {
		t.Fatalf("scan: exit %d; want 9 (%s)", code, errOut)
	}
	want := filepath.Join(dir, "app", ".env") + ":2:9: " + active.Plaintext[:12] + "_…" + active.Plaintext[52:]
	if !strings.Contains(out.String(), want) || strings.Count(out.String(), "\n") != 3 {
		t.Errorf("scan output:\n%s\nwant a line %q and 3 lines", out, want)
	}
	for _, p := range []string{active.Plaintext, gone.Plaintext, stranger} {
		if strings.Contains(out.String()+errOut.String(), p[13:]) {
			t.Fatal("scan printed a key")
		}
	}

	s, out, errOut = testStreams(pipe, "")
	if code := btkRun(s, "scan", dir, "--check", "-o", "json"); code != exitKeysFound {
		t.Fatalf("scan --check: exit %d; want 9 (%s)", code, errOut)
	}
	var findings []struct {
		Path, DisplayPrefix, Hint, Status string
		Line, Column                      int
	}
	if err := json.Unmarshal(out.Bytes(), &findings); err != nil || len(findings) != 3 {
		t.Fatalf("-o json: %v %s", err, out)
	}
	status := map[string]string{}
	for _, f := range findings {
		status[f.Hint] = f.Status
	}
	if status[active.Plaintext[52:]] != "ACTIVE" || status[gone.Plaintext[52:]] != "REVOKED" || status[stranger[52:]] != "UNKNOWN" {
		t.Errorf("statuses: %v", status)
	}

	s, _, errOut = testStreams(pipe, "")
	if code := btkRun(s, "scan", dir, "--revoke"); code != exitUsage {
		t.Errorf("--revoke without a terminal or --yes: exit %d; want 2 (%s)", code, errOut)
	}
	s, _, errOut = testStreams(pipe, "")
	if code := btkRun(s, "scan", dir, "--revoke", "--yes"); code != exitKeysFound {
		t.Fatalf("--revoke --yes: exit %d (%s)", code, errOut)
	}
	if _, _, err := ls.svc.AuthenticateKey(context.Background(), active.Plaintext); err != btk.ErrKeyRevokedOrExpired {
		t.Errorf("after --revoke: %v", err)
	}
	// Nothing active any more: --check exits 0.
	s, _, errOut = testStreams(pipe, "")
	if code := btkRun(s, "scan", dir, "--check"); code != 0 {
		t.Errorf("--check with nothing active: exit %d (%s)", code, errOut)
	}
	// Standard input, and a clean tree.
	s, out, _ = testStreams(pipe, "log line key="+stranger+"\n")
	if code := btkRun(s, "scan", "-"); code != exitKeysFound || !strings.HasPrefix(out.String(), "-:1:14: ") {
		t.Errorf("scan -: exit %d, %q", code, out)
	}
	clean := t.TempDir()
	os.WriteFile(filepath.Join(clean, "a.go"), []byte("package a // btk_ keys look like btk_xxxxxxxx_…\n"), 0o644)
	s, out, _ = testStreams(pipe, "")
	if code := btkRun(s, "scan", clean); code != 0 || out.Len() != 0 {
		t.Errorf("a clean tree: exit %d, %q", code, out)
	}
	ls.neverSent(t, active.Plaintext, gone.Plaintext, stranger)
	if !ls.received(t, leaktest.Hash(stranger)) {
		t.Error("--check never asked about the stranger's key by its hash")
	}
}

// btk create --canary issues a canary key.
func TestCreateCanary(t *testing.T) {
	ls := newLeakServer(t)
	s, out, errOut := testStreams(pipe, "")
	if code := btkRun(s, "create", "trap", "--canary", "-o", "json"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var payload struct {
		ApiKey       struct{ Canary bool }
		PlaintextKey string
	}
	if err := json.Unmarshal(out.Bytes(), &payload); err != nil || !payload.ApiKey.Canary {
		t.Fatalf("%v %s", err, out)
	}
	if _, _, err := ls.svc.AuthenticateKey(context.Background(), payload.PlaintextKey); btk.ErrorMessage(err) != "invalid API key" {
		t.Errorf("the canary key: %v", err)
	}
}

// whois and revoke - read all of standard input, in bounded memory: a key
// after more than 1 MiB of text is found, and a second, different key
// anywhere refuses the input (it used to be cut at 1 MiB, and the first key
// revoked).
func TestKeyOnInputReadsItAll(t *testing.T) {
	ls := newLeakServer(t)
	k1 := ls.createKey(t, "first", false)
	k2 := ls.createKey(t, "second", false)
	logText := strings.Repeat("2026-11-24T04:21:30Z GET /orders 200 0.012s ua=curl/8.5\n", 24_000) // 1.3 MB
	s, _, errOut := testStreams(pipe, k1.Plaintext+"\n"+logText+k2.Plaintext+"\n")
	if code := btkRun(s, "revoke", "-", "--yes"); code != exitUsage || !strings.Contains(errOut.String(), "more than one key") {
		t.Fatalf("two keys 1.3 MB apart: exit %d; want 2 (%s)", code, errOut)
	}
	if _, _, err := ls.svc.AuthenticateKey(context.Background(), k1.Plaintext); err != nil {
		t.Fatalf("the first key was revoked: %v", err)
	}
	s, out, errOut := testStreams(pipe, logText+k2.Plaintext+"\n"+logText+k2.Plaintext+"\n")
	if code := btkRun(s, "whois"); code != 0 || !strings.Contains(out.String(), "second") {
		t.Fatalf("a key after 1.3 MB, twice: exit %d (%s)", code, errOut)
	}
	// 64 MiB of text before the key: the live heap, measured as the input
	// is read, stays within a few chunks.
	in := &textThenKey{left: 64 << 20, key: k2.Plaintext, before: liveHeap()}
	s, out, errOut = testStreams(pipe, "")
	s.In = in
	if code := btkRun(s, "whois", "-o", "json"); code != 0 || !strings.Contains(out.String(), k2.Key.ID) {
		t.Fatalf("a key after 64 MiB: exit %d (%s)", code, errOut)
	}
	if in.peak > in.before && in.peak-in.before > 4<<20 {
		t.Errorf("the live heap grew by %d bytes while standard input was read; want at most 4 MiB", in.peak-in.before)
	}
	ls.neverSent(t, k1.Plaintext, k2.Plaintext)
}

// textThenKey is left bytes of log text, then key; it measures the live
// heap every 4 MiB.
type textThenKey struct {
	left, read   int
	key          string
	before, peak uint64
}

func (r *textThenKey) Read(p []byte) (int, error) {
	if r.left == 0 {
		if r.key == "" {
			return 0, io.EOF
		}
		n := copy(p, r.key)
		r.key = r.key[n:]
		return n, nil
	}
	n := min(len(p), r.left)
	for i := range n {
		p[i] = "log text\n"[(r.read+i)%9]
	}
	if (r.read+n)/(4<<20) != r.read/(4<<20) {
		r.peak = max(r.peak, liveHeap())
	}
	r.left -= n
	r.read += n
	return n, nil
}
