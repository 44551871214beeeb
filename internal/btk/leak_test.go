package btk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/leaktest"
	"github.com/btk-project/btk/internal/store/sqlite"
)

type leakEnv struct {
	svc   *btk.Service
	db    *sqlite.DB
	owner *btk.Actor
	admin *btk.Actor
	other *btk.Actor // owner of another workspace
	mu    sync.Mutex
	now   time.Time
}

func newLeakEnv(t *testing.T, opts ...func(*btk.Config)) *leakEnv {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "btk.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	e := &leakEnv{db: db, now: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)}
	cfg := btk.Config{Now: func() time.Time {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.now
	}}
	for _, o := range opts {
		o(&cfg)
	}
	e.svc, err = btk.NewService(ctx, db, []byte(strings.Repeat("s", 32)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := e.svc.Bootstrap(ctx, "admin@example.com", "correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	info, err := e.svc.Login(ctx, "admin@example.com", "correct horse battery", "")
	if err != nil {
		t.Fatal(err)
	}
	e.owner, err = e.svc.ResolveSession(ctx, info.Token)
	if err != nil {
		t.Fatal(err)
	}
	e.admin = &btk.Actor{AccountID: e.owner.AccountID, Email: e.owner.Email, PlatformAdmin: true}
	ws, err := e.svc.CreateWorkspace(ctx, e.owner, "Other", btk.PlanSelfHosted)
	if err != nil {
		t.Fatal(err)
	}
	_ = boot
	e.other = &btk.Actor{AccountID: "someone", Email: "o@example.com", WorkspaceID: ws.ID, Role: btk.RoleOwner}
	return e
}

func (e *leakEnv) advance(d time.Duration) {
	e.mu.Lock()
	e.now = e.now.Add(d)
	e.mu.Unlock()
}

func TestKeyByHashVisibility(t *testing.T) {
	e := newLeakEnv(t)
	ctx := context.Background()
	res, err := e.svc.CreateKey(ctx, e.owner, btk.CreateKeyInput{Name: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	h := leaktest.Hash(res.Plaintext)
	k, w, err := e.svc.KeyByHash(ctx, e.owner, strings.ToUpper(h))
	if err != nil || k == nil || k.ID != res.Key.ID || w.ID != e.owner.WorkspaceID {
		t.Fatalf("owner: %v %v %v", k, w, err)
	}
	if k, _, err := e.svc.KeyByHash(ctx, e.admin, h); err != nil || k == nil {
		t.Fatalf("platform admin: %v %v", k, err)
	}
	admin := *e.owner
	admin.Role, admin.PlatformAdmin = btk.RoleAdmin, false
	for name, a := range map[string]*btk.Actor{
		"other workspace": e.other, "ADMIN role": &admin,
		"api key": {WorkspaceID: e.owner.WorkspaceID, KeyID: res.Key.ID},
	} {
		if k, _, err := e.svc.KeyByHash(ctx, a, h); err != nil || k != nil {
			t.Errorf("%s: %v %v; want nil, nil", name, k, err)
		}
	}
	if k, _, err := e.svc.KeyByHash(ctx, e.owner, leaktest.Hash("btk_nothing")); err != nil || k != nil {
		t.Errorf("unknown: %v %v", k, err)
	}
	for _, bad := range []string{"", "zz", h[:63], h + "00"} {
		if _, _, err := e.svc.KeyByHash(ctx, e.owner, bad); btk.ErrorCode(err) != btk.CodeBadUserInput {
			t.Errorf("%q: %v; want BAD_USER_INPUT", bad, err)
		}
	}
	if _, _, err := e.svc.KeyByHash(ctx, nil, h); btk.ErrorCode(err) != btk.CodeUnauthenticated {
		t.Errorf("anonymous: %v", err)
	}
}

func TestReportLeaksRevokesAndReplays(t *testing.T) {
	e := newLeakEnv(t)
	ctx := context.Background()
	active, _ := e.svc.CreateKey(ctx, e.owner, btk.CreateKeyInput{Name: "active"})
	gone, _ := e.svc.CreateKey(ctx, e.owner, btk.CreateKeyInput{Name: "gone"})
	if _, err := e.svc.RevokeKey(ctx, e.owner, gone.Key.ID); err != nil {
		t.Fatal(err)
	}
	canary, _ := e.svc.CreateKey(ctx, e.owner, btk.CreateKeyInput{Name: "trap", Canary: true})
	if _, _, err := e.svc.AuthenticateKey(ctx, active.Plaintext); err != nil {
		t.Fatal(err)
	}
	reports := []btk.LeakReport{
		{Token: active.Plaintext, Type: "btk_api_key", URL: "https://github.com/o/r/blob/x/.env", Source: "content"},
		{Token: gone.Plaintext, Type: "btk_api_key"},
		{Token: canary.Plaintext, Type: "btk_api_key"},
		{Token: "btk_00000000_" + strings.Repeat("A", 43), Type: "btk_api_key"},
		{Token: "not a key", Type: "other"},
		{Token: active.Plaintext, Type: "btk_api_key"}, // twice in one report
	}
	want := []string{"true_positive", "true_positive", "true_positive", "false_positive", "false_positive", "true_positive"}
	by := btk.Reporter{KeyID: "github", IP: "192.0.2.7", UserAgent: "GitHub-Hookshot"}
	for round := range 2 {
		labels, err := e.svc.ReportLeaks(ctx, by, reports)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range labels {
			if l.Label != want[i] || l.TokenHash != leaktest.Hash(reports[i].Token) {
				t.Errorf("round %d, entry %d: %+v; want %s", round, i, l, want[i])
			}
		}
		b, _ := json.Marshal(labels)
		for _, r := range reports {
			if strings.Contains(string(b), r.Token) {
				t.Fatal("the answer carries a plaintext token")
			}
		}
	}
	if _, _, err := e.svc.AuthenticateKey(ctx, active.Plaintext); err != btk.ErrKeyRevokedOrExpired {
		t.Errorf("the leaked key still authenticates: %v", err)
	}
	if _, _, err := e.svc.AuthenticateKey(ctx, canary.Plaintext); !errors.Is(err, btk.ErrInvalidKey) {
		t.Errorf("canary: %v", err)
	}
	log, err := e.svc.KeyAuditLog(ctx, e.owner, btk.AuditFilter{Action: btk.AuditRevoked, Page: btk.Page{First: 50}})
	if err != nil {
		t.Fatal(err)
	}
	leaked := 0
	for _, en := range log.Entries {
		if en.APIKeyID == active.Key.ID {
			leaked++
			if en.ActorEmail != "leak report" || en.IP != "192.0.2.7" {
				t.Errorf("entry: %+v", en)
			}
		}
	}
	if leaked != 1 {
		t.Errorf("%d REVOKED entries for the leaked key; want 1 (the replay changes nothing)", leaked)
	}
	events, _, err := e.svc.AuditEvents(ctx, e.owner, btk.AuditFilter{EventAction: btk.EventKeyLeaked, Page: btk.Page{First: 50}})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || !strings.Contains(events[0].Metadata, `"url":"https://github.com/o/r/blob/x/.env"`) ||
		!strings.Contains(events[0].Metadata, `"source":"content"`) || strings.Contains(events[0].Metadata, active.Plaintext) {
		t.Errorf("api_key.leaked events: %+v", events)
	}
	// Nobody else may report unsigned.
	if _, err := e.svc.ReportLeaks(ctx, btk.Reporter{Actor: e.other}, reports); btk.ErrorCode(err) != btk.CodeUnauthenticated {
		t.Errorf("an owner's report: %v", err)
	}
	if _, err := e.svc.ReportLeaks(ctx, btk.Reporter{Actor: e.admin}, reports[:1]); err != nil {
		t.Errorf("a platform admin's report: %v", err)
	}
}

func TestParseLeakReports(t *testing.T) {
	for _, bad := range []string{``, `{}`, `[{"type":"x"}]`, `[1]`, `[{"token":"` + strings.Repeat("a", 2000) + `"}]`,
		`[` + strings.Repeat(`{"token":"a"},`, 1000) + `{"token":"a"}]`} {
		if _, err := btk.ParseLeakReports([]byte(bad)); btk.ErrorCode(err) != btk.CodeBadUserInput {
			t.Errorf("%.40q: %v", bad, err)
		}
	}
	r, err := btk.ParseLeakReports([]byte(`[{"token":"t","type":"y","url":"u","source":"content"}]`))
	if err != nil || len(r) != 1 || r[0] != (btk.LeakReport{Token: "t", Type: "y", URL: "u", Source: "content"}) {
		t.Errorf("%+v %v", r, err)
	}
}

// A report signed as GitHub signs (ECDSA P-256, SHA-256, base64 DER) by a
// listed key verifies; any other signature, key or body does not.
func TestLeakReportKeysVerify(t *testing.T) {
	signer, other := leaktest.NewSigner(t), leaktest.NewSigner(t)
	keys, err := btk.ParseLeakReportKeys([]byte(string(signer.PEM) + "# id: github-2\n" + string(other.PEM)))
	if err != nil || keys.Len() != 2 {
		t.Fatalf("%v %d", err, keys.Len())
	}
	id := signer.ID
	body := []byte(`[{"token":"x","type":"btk_api_key","url":"u","source":"content"}]`)
	if !keys.Verify(id, signer.Sign(body), body) {
		t.Error("a good signature was refused")
	}
	if !keys.Verify("github-2", other.Sign(body), body) {
		t.Error("a good signature under a # id: name was refused")
	}
	for name, ok := range map[string]bool{
		"wrong key":      keys.Verify(id, other.Sign(body), body),
		"wrong body":     keys.Verify(id, signer.Sign(body), append(body, ' ')),
		"unknown id":     keys.Verify("nope", signer.Sign(body), body),
		"no signature":   keys.Verify(id, "", body),
		"garbage":        keys.Verify(id, "!!!", body),
		"no id":          keys.Verify("", signer.Sign(body), body),
		"id of other":    keys.Verify("github-2", signer.Sign(body), body),
		"no keys loaded": (*btk.LeakReportKeys)(nil).Verify(id, signer.Sign(body), body),
	} {
		if ok {
			t.Errorf("%s: accepted", name)
		}
	}
	for _, bad := range []string{"junk", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"} {
		if _, err := btk.ParseLeakReportKeys([]byte(bad)); err == nil {
			t.Errorf("%q: parsed", bad)
		}
	}
}

// A canary key is never accepted and answers as an unknown key; its use is
// recorded with address, user agent and path, at most once a minute, with
// the count of uses since the last record.
func TestCanaryKey(t *testing.T) {
	e := newLeakEnv(t)
	ctx := context.Background()
	c, err := e.svc.CreateKey(ctx, e.owner, btk.CreateKeyInput{Name: "trap", Canary: true})
	if err != nil || !c.Key.Canary {
		t.Fatal(c, err)
	}
	use := func(plaintext string) {
		t.Helper()
		_, _, err := e.svc.AuthenticateKey(ctx, plaintext)
		if !errors.Is(err, btk.ErrInvalidKey) || btk.ErrorCode(err) != btk.CodeUnauthenticated || btk.ErrorMessage(err) != "invalid API key" {
			t.Fatalf("canary: %v; want %v", err, btk.ErrInvalidKey)
		}
		e.svc.RecordCanaryUse(ctx, err, "198.51.100.9", "curl/8.5", "/v1/orders")
	}
	for range 3 {
		use(c.Plaintext)
	}
	used := func() []*btk.AuditEvent {
		ev, _, err := e.svc.AuditEvents(ctx, e.owner, btk.AuditFilter{EventAction: btk.EventCanaryUsed, Page: btk.Page{First: 50}})
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	ev := used()
	if len(ev) != 1 || ev[0].TargetID != c.Key.ID {
		t.Fatalf("events: %+v", ev)
	}
	var meta map[string]any
	json.Unmarshal([]byte(ev[0].Metadata), &meta)
	if meta["ip"] != "198.51.100.9" || meta["userAgent"] != "curl/8.5" || meta["path"] != "/v1/orders" || meta["count"] != 1.0 {
		t.Errorf("metadata: %v", meta)
	}
	e.advance(61 * time.Second)
	use(c.Plaintext)
	ev = used()
	if len(ev) != 2 {
		t.Fatalf("%d events after a minute; want 2", len(ev))
	}
	meta = nil
	json.Unmarshal([]byte(ev[0].Metadata), &meta)
	if meta["count"] != 3.0 { // the two uses within the minute, and this one
		t.Errorf("count %v; want 3", meta["count"])
	}
	// Rotation keeps it a canary.
	e.owner.Elevated = true
	r, err := e.svc.RotateKey(ctx, e.owner, c.Key.ID, btk.RotateKeyInput{})
	if err != nil || !r.Key.Canary {
		t.Fatalf("rotated: %v %v", r, err)
	}
	use(r.Plaintext)
}

// A canary key meets what an unknown key presented from the same address
// meets, the address's budget of unknown keys included: refused 429 from an
// address over it, 401 otherwise (and 401 within the negative cache's 30 s).
func TestCanaryAnswersAsUnknownUnderTheUnknownKeyBudget(t *testing.T) {
	e := newLeakEnv(t)
	ctx := context.Background()
	from := func(ip string) btk.Client { return btk.Client{IP: netip.MustParseAddr(ip)} }
	c, _ := e.svc.CreateKey(ctx, e.owner, btk.CreateKeyInput{Name: "trap", Canary: true})
	unknown := func(i int) string { return c.Plaintext[:13] + fmt.Sprintf("%042dA", i) }
	answer := func(key, ip string) string {
		_, _, err := e.svc.AuthenticateKeyFrom(ctx, key, from(ip))
		return fmt.Sprintf("%s %s", btk.ErrorCode(err), btk.ErrorMessage(err))
	}
	// Both known to this node (the canary cached, the unknown key in the
	// negative cache), then both forgotten by the negative cache.
	if a, b := answer(c.Plaintext, "192.0.2.9"), answer(unknown(0), "192.0.2.9"); a != b {
		t.Fatalf("first use: canary %q, unknown %q", a, b)
	}
	e.advance(31 * time.Second)
	// Block 192.0.2.1: too many distinct unknown keys.
	blocked := false
	for i := 1; i < 200 && !blocked; i++ {
		blocked = strings.HasPrefix(answer(unknown(i), "192.0.2.1"), "RATE_LIMITED")
	}
	if !blocked {
		t.Fatal("the address was never refused for unknown keys")
	}
	a, b := answer(c.Plaintext, "192.0.2.1"), answer(unknown(0), "192.0.2.1")
	if a != b || !strings.HasPrefix(a, "RATE_LIMITED") {
		t.Errorf("from a refused address: canary %q, unknown %q; want the same 429", a, b)
	}
	// From a clean address both are invalid keys, and then, within 30 s,
	// invalid also from the refused address (the negative cache answers).
	if a, b := answer(c.Plaintext, "192.0.2.2"), answer(unknown(0), "192.0.2.2"); a != b || !strings.HasPrefix(a, "UNAUTHENTICATED") {
		t.Errorf("from a clean address: canary %q, unknown %q", a, b)
	}
	if a, b := answer(c.Plaintext, "192.0.2.1"), answer(unknown(0), "192.0.2.1"); a != b || !strings.HasPrefix(a, "UNAUTHENTICATED") {
		t.Errorf("within the negative cache: canary %q, unknown %q", a, b)
	}
}
