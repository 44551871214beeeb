package events_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/events"
	"github.com/btk-project/btk/internal/store/sqlite"
)

var ctx = context.Background()

// clock is the service's clock, moved forward by tests to make retries due.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

type harness struct {
	svc   *btk.Service
	owner *btk.Actor
	clock *clock
}

func newHarness(t testing.TB, store btk.Store, cfg btk.Config) *harness {
	t.Helper()
	c := &clock{}
	cfg.Now = c.now
	svc, err := btk.NewService(ctx, store, []byte("0123456789abcdef0123456789abcdef"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := svc.Bootstrap(ctx, "owner@example.com", "correct horse battery staple")
	if err != nil {
		t.Fatal(err)
	}
	var acct *btk.Account
	if err := store.Read(ctx, func(tx btk.Tx) (err error) {
		acct, err = tx.AccountByEmail(ctx, "owner@example.com")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ws := ""
	if boot.Workspace != nil {
		ws = boot.Workspace.ID
	}
	return &harness{svc: svc, clock: c, owner: &btk.Actor{AccountID: acct.ID, Email: acct.Email, WorkspaceID: ws,
		Role: btk.RoleOwner, Elevated: true, IP: "192.0.2.1", UserAgent: "test"}}
}

func newSQLite(t testing.TB) btk.Store {
	t.Helper()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "btk.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// received is one request a receiver got.
type received struct {
	id, ts, sig string
	body        []byte
}

// receiver is a real HTTP receiver that records what it gets and answers
// with status() (2xx = delivered).
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []received
	status atomic.Int32
	hang   chan struct{} // when non-nil, requests wait on it
	open   atomic.Int32  // requests in progress
	most   atomic.Int32  // the most in progress at once
}

func newReceiver(t testing.TB) *receiver {
	r := &receiver{}
	r.status.Store(204)
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n := r.open.Add(1)
		defer r.open.Add(-1)
		for {
			m := r.most.Load()
			if n <= m || r.most.CompareAndSwap(m, n) {
				break
			}
		}
		body, _ := io.ReadAll(req.Body)
		if r.hang != nil {
			select {
			case <-r.hang:
			case <-req.Context().Done():
				return
			}
		}
		r.mu.Lock()
		r.got = append(r.got, received{req.Header.Get("webhook-id"), req.Header.Get("webhook-timestamp"),
			req.Header.Get("webhook-signature"), body})
		r.mu.Unlock()
		w.WriteHeader(int(r.status.Load()))
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// verify checks a request's signature as a receiver would, following the
// Standard Webhooks specification with its own code (not btk's):
// HMAC-SHA256 keyed with the base64-decoded secret after "whsec_", over
// "id.timestamp.body", base64, prefixed "v1,"; several signatures may be
// sent separated by spaces.
func verify(secret string, r received) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || r.id == "" || r.ts == "" {
		return false
	}
	if _, err := strconv.ParseInt(r.ts, 10, 64); err != nil {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(r.id + "." + r.ts + "."))
	mac.Write(r.body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(r.sig) {
		v, b64, ok := strings.Cut(s, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return true
		}
	}
	return false
}

// waitFor polls cond for at most a minute.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func runWorker(t testing.TB, svc *btk.Service, cfg events.Config) *events.Worker {
	t.Helper()
	if cfg.Poll == 0 {
		cfg.Poll = 20 * time.Millisecond
	}
	w := events.New(svc, cfg)
	c, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(c) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func pending(t testing.TB, svc *btk.Service) int64 {
	st, err := svc.OutboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st.Pending
}

// Every event type of a workspace arrives once, signed so that a receiver's
// own verification accepts it, and never with a plaintext key.
func TestEachEventArrivesOnceSigned(t *testing.T) {
	h := newHarness(t, newSQLite(t), btk.Config{WebhookAllowPrivate: true})
	rcv := newReceiver(t)
	hook, err := h.svc.CreateWebhook(ctx, h.owner, rcv.srv.URL+"/hook", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(hook.Secret, "whsec_") {
		t.Fatalf("secret %q", hook.Secret)
	}
	// A second webhook subscribed to revocations only.
	rcv2 := newReceiver(t)
	only, err := h.svc.CreateWebhook(ctx, h.owner, rcv2.srv.URL, []string{"api_key.revoked"})
	if err != nil {
		t.Fatal(err)
	}

	var plaintexts []string
	k, err := h.svc.CreateKey(ctx, h.owner, btk.CreateKeyInput{Name: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	plaintexts = append(plaintexts, k.Plaintext)
	rot, err := h.svc.RotateKey(ctx, h.owner, k.Key.ID, btk.RotateKeyInput{})
	if err != nil {
		t.Fatal(err)
	}
	plaintexts = append(plaintexts, rot.Plaintext)
	if _, err := h.svc.RevokeKey(ctx, h.owner, rot.Key.ID); err != nil {
		t.Fatal(err)
	}
	exp := h.clock.now().Add(3 * 24 * time.Hour)
	k2, err := h.svc.CreateKey(ctx, h.owner, btk.CreateKeyInput{Name: "expiring", ExpiresAt: &exp})
	if err != nil {
		t.Fatal(err)
	}
	plaintexts = append(plaintexts, k2.Plaintext)
	if n, err := h.svc.SweepExpiringKeys(ctx); err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	if n, err := h.svc.SweepExpiringKeys(ctx); err != nil || n != 0 {
		t.Fatalf("second sweep: %d %v (the notice is sent once)", n, err)
	}
	if _, err := h.svc.RevokeAllKeys(ctx, h.owner); err != nil {
		t.Fatal(err)
	}
	perMinute := 100
	if _, err := h.svc.SetWorkspaceRateLimits(ctx, h.owner, h.owner.WorkspaceID, &perMinute, nil); err != nil {
		t.Fatal(err)
	}
	want := []string{"webhook.created", "webhook.created", "api_key.created", "api_key.rotated", "api_key.revoked",
		"api_key.created", "api_key.expiring", "api_key.revoked_all", "workspace.limits_changed"}

	runWorker(t, h.svc, events.Config{AllowPrivate: true})
	waitFor(t, "every delivery", func() bool { return pending(t, h.svc) == 0 })

	got := rcv.requests()
	if len(got) != len(want) {
		t.Fatalf("receiver got %d requests, want %d", len(got), len(want))
	}
	ids := map[string]int{}
	var types []string
	for _, r := range got {
		ids[r.id]++
		if !verify(hook.Secret, r) {
			t.Errorf("request %s does not verify with the secret", r.id)
		}
		if verify(only.Secret, r) {
			t.Errorf("request %s verifies with another webhook's secret", r.id)
		}
		var body struct {
			Type      string         `json:"type"`
			Timestamp string         `json:"timestamp"`
			Data      map[string]any `json:"data"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil || body.Type == "" || body.Timestamp == "" || body.Data["id"] == nil {
			t.Errorf("body %s: %v", r.body, err)
		}
		if "msg_"+body.Data["id"].(string) != r.id {
			t.Errorf("webhook-id %s is not the event's", r.id)
		}
		types = append(types, body.Type)
		if !slices.Contains(btk.WebhookEventTypes(), body.Type) {
			t.Errorf("event type %s is not one a webhook may subscribe to", body.Type)
		}
		for _, p := range plaintexts {
			if strings.Contains(string(r.body), p) {
				t.Errorf("a plaintext key was sent in %s", body.Type)
			}
		}
	}
	for id, n := range ids {
		if n != 1 {
			t.Errorf("event %s arrived %d times", id, n)
		}
	}
	counts := map[string]int{}
	for _, ty := range types {
		counts[ty]++
	}
	for _, ty := range want {
		counts[ty]--
	}
	for ty, n := range counts {
		if n != 0 {
			t.Errorf("event type %s: %+d arrivals against what was expected (got %v)", ty, n, types)
		}
	}
	// The filtered webhook got only the revocation, and verifies with its own secret.
	got2 := rcv2.requests()
	if len(got2) != 1 || !verify(only.Secret, got2[0]) || !strings.Contains(string(got2[0].body), `"type":"api_key.revoked"`) {
		t.Errorf("filtered webhook got %d requests: %v", len(got2), got2)
	}
	// The delivery log says delivered.
	ds, _, err := h.svc.WebhookDeliveries(ctx, h.owner, hook.Webhook.ID, btk.Page{First: 50})
	if err != nil || len(ds) != len(want) {
		t.Fatalf("deliveries %d %v", len(ds), err)
	}
	for _, d := range ds {
		if d.Status != btk.DeliveryDelivered || d.LastStatusCode != 204 || d.Attempts != 1 || d.DeliveredAt == nil {
			t.Errorf("delivery %+v", d)
		}
	}
}

// A receiver that is down for a while gets everything once it is back.
func TestReceiverDownThenBack(t *testing.T) {
	h := newHarness(t, newSQLite(t), btk.Config{WebhookAllowPrivate: true})
	rcv := newReceiver(t)
	rcv.status.Store(503)
	hook, err := h.svc.CreateWebhook(ctx, h.owner, rcv.srv.URL, []string{"api_key.created"})
	if err != nil {
		t.Fatal(err)
	}
	runWorker(t, h.svc, events.Config{AllowPrivate: true})
	for i := range 10 {
		if _, err := h.svc.CreateKey(ctx, h.owner, btk.CreateKeyInput{Name: "k" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	failedOnce := func() bool {
		ds, _, err := h.svc.WebhookDeliveries(ctx, h.owner, hook.Webhook.ID, btk.Page{First: 50})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Attempts < 1 {
				return false
			}
		}
		return len(ds) == 10
	}
	waitFor(t, "a failed attempt at each delivery", failedOnce)
	ds, _, _ := h.svc.WebhookDeliveries(ctx, h.owner, hook.Webhook.ID, btk.Page{First: 50})
	for _, d := range ds {
		if d.Status != btk.DeliveryPending || d.LastStatusCode != 503 || !d.NextAttemptAt.After(h.clock.now()) {
			t.Errorf("after a 503: %+v", d)
		}
	}
	// An hour later (backoff), the receiver is back.
	rcv.status.Store(200)
	h.clock.advance(2 * time.Hour)
	waitFor(t, "every delivery after the receiver came back", func() bool { return pending(t, h.svc) == 0 })
	ids := map[string]bool{}
	for _, r := range rcv.requests() {
		if verify(hook.Secret, r) {
			ids[r.id] = true
		}
	}
	if len(ids) != 10 {
		t.Errorf("%d distinct events verified, want 10", len(ids))
	}
	// Past 24 hours a delivery is given up.
	rcv.status.Store(500)
	if _, err := h.svc.CreateKey(ctx, h.owner, btk.CreateKeyInput{Name: "late"}); err != nil {
		t.Fatal(err)
	}
	// Each step makes the next attempt due and waits for it, so that the
	// clock never runs past an attempt a loaded machine had not made yet.
	latest := func() *btk.WebhookDelivery {
		ds, _, err := h.svc.WebhookDeliveries(ctx, h.owner, hook.Webhook.ID, btk.Page{First: 1})
		if err != nil || len(ds) != 1 {
			t.Fatalf("deliveries: %v %v", ds, err)
		}
		return ds[0]
	}
	waitFor(t, "the first attempt at the late event", func() bool { return latest().Attempts >= 1 })
	for i := 0; latest().Status == btk.DeliveryPending; i++ {
		if i > 200 {
			t.Fatal("the delivery was never given up")
		}
		d := latest()
		h.clock.advance(d.NextAttemptAt.Sub(h.clock.now()) + time.Second)
		waitFor(t, "the next attempt", func() bool { n := latest(); return n.Attempts > d.Attempts || n.Status != btk.DeliveryPending })
	}
	ds, _, _ = h.svc.WebhookDeliveries(ctx, h.owner, hook.Webhook.ID, btk.Page{First: 1})
	if ds[0].Status != btk.DeliveryFailed || ds[0].Attempts < 2 {
		t.Errorf("after 24 h: %+v", ds[0])
	}
}

// A busy webhook is delivered to as fast as its receiver answers: at most
// 2 deliveries in flight (its cap), the next claimed as soon as one is
// recorded, not at the next poll. Waiting for the poll held a webhook to
// 2 deliveries a second, and a workspace with more events than that built
// an outbox that never drained. The poll here is an hour: every delivery
// after the first two is claimed because one was recorded.
func TestBusyWebhookNotHeldToThePoll(t *testing.T) {
	h := newHarness(t, newSQLite(t), btk.Config{WebhookAllowPrivate: true})
	rcv := newReceiver(t)
	if _, err := h.svc.CreateWebhook(ctx, h.owner, rcv.srv.URL, []string{"api_key.created"}); err != nil {
		t.Fatal(err)
	}
	const sent = 20
	for i := range sent {
		if _, err := h.svc.CreateKey(ctx, h.owner, btk.CreateKeyInput{Name: "k" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	runWorker(t, h.svc, events.Config{AllowPrivate: true, Poll: time.Hour})
	waitFor(t, "every delivery without a poll", func() bool { return pending(t, h.svc) == 0 })
	if n := len(rcv.requests()); n != sent {
		t.Errorf("%d deliveries, want %d", n, sent)
	}
}

// A receiver that hangs occupies at most 2 workers at once (the cap per
// webhook, btk.MaxInFlightPerWebhook), and nothing else waits for it.
func TestHangingReceiverIsBounded(t *testing.T) {
	h := newHarness(t, newSQLite(t), btk.Config{WebhookAllowPrivate: true})
	rcv := newReceiver(t)
	rcv.hang = make(chan struct{})
	defer close(rcv.hang)
	if _, err := h.svc.CreateWebhook(ctx, h.owner, rcv.srv.URL, nil); err != nil {
		t.Fatal(err)
	}
	runWorker(t, h.svc, events.Config{AllowPrivate: true, Workers: 3, Timeout: 2 * time.Second})
	for i := range 20 {
		if _, err := h.svc.CreateKey(ctx, h.owner, btk.CreateKeyInput{Name: "k" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the workers to be busy", func() bool { return rcv.open.Load() == btk.MaxInFlightPerWebhook })
	time.Sleep(100 * time.Millisecond)
	if n := rcv.most.Load(); n > btk.MaxInFlightPerWebhook {
		t.Errorf("%d requests at once, want at most %d (the cap per webhook)", n, btk.MaxInFlightPerWebhook)
	}
}

// Without --webhook-allow-private: private receivers are refused at
// creation, and the delivery client refuses them after DNS resolution and
// never follows a redirect.
func TestPrivateReceiversRefused(t *testing.T) {
	h := newHarness(t, newSQLite(t), btk.Config{})
	for _, u := range []string{"http://127.0.0.1/x", "http://localhost:8080/", "https://10.1.2.3/", "http://[::1]/",
		"http://169.254.169.254/latest", "http://192.168.1.1", "http://[::ffff:127.0.0.1]/", "ftp://example.com/",
		"http://user:pw@example.com/", "not a url", "http://100.64.0.1/", "http://0.0.0.0/"} {
		_, err := h.svc.CreateWebhook(ctx, h.owner, u, nil)
		if btk.ErrorCode(err) != btk.CodeBadUserInput {
			t.Errorf("%s: err %v, want BAD_USER_INPUT", u, err)
		}
	}
	if _, err := h.svc.CreateWebhook(ctx, h.owner, "https://93.184.215.14/hook", []string{"nope"}); btk.ErrorCode(err) != btk.CodeBadUserInput {
		t.Errorf("a malformed event name: %v", err)
	}

	rcv := newReceiver(t)
	client := events.NewClient(false, 5*time.Second)
	port := rcv.srv.URL[strings.LastIndex(rcv.srv.URL, ":"):]
	for _, u := range []string{rcv.srv.URL, "http://localhost" + port} {
		resp, err := client.Get(u)
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: the client reached a loopback receiver", u)
		}
	}
	if len(rcv.requests()) != 0 {
		t.Error("the loopback receiver was reached")
	}
	// Redirects are not followed (here with private receivers allowed).
	target := newReceiver(t)
	redirector := httptest.NewServer(http.RedirectHandler(target.srv.URL, http.StatusTemporaryRedirect))
	defer redirector.Close()
	resp, err := events.NewClient(true, 5*time.Second).Post(redirector.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || len(target.requests()) != 0 {
		t.Errorf("redirect: status %d, target got %d requests", resp.StatusCode, len(target.requests()))
	}
}

// The webhook API's rules: owner tier, bounded count, another workspace's
// webhook is NOT_FOUND, the secret is stored sealed.
func TestWebhookRules(t *testing.T) {
	store := newSQLite(t)
	h := newHarness(t, store, btk.Config{WebhookAllowPrivate: true})
	admin := *h.owner
	admin.Role = btk.RoleAdmin
	if _, err := h.svc.CreateWebhook(ctx, &admin, "https://example.com", nil); btk.ErrorCode(err) != btk.CodeForbidden {
		t.Errorf("ADMIN creating a webhook: %v", err)
	}
	if _, err := h.svc.Webhooks(ctx, &btk.Actor{WorkspaceID: h.owner.WorkspaceID, KeyID: "k"}); btk.ErrorCode(err) != btk.CodeUnauthenticated {
		t.Errorf("an API key listing webhooks: %v", err)
	}
	var first *btk.CreateWebhookResult
	for i := range btk.MaxWebhooksPerWorkspace {
		// A receiver's secret in the path and the query, as Slack's hooks
		// and others carry it.
		r, err := h.svc.CreateWebhook(ctx, h.owner, "https://example.com/hooks/T0/RECEIVERSECRET"+strconv.Itoa(i)+"?token=s3cr3t", []string{"api_key.created", "*"})
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = r
		}
	}
	if _, err := h.svc.CreateWebhook(ctx, h.owner, "https://example.com/x", nil); btk.ErrorCode(err) != btk.CodeBadUserInput {
		t.Errorf("one webhook too many: %v", err)
	}
	hooks, err := h.svc.Webhooks(ctx, h.owner)
	if err != nil || len(hooks) != btk.MaxWebhooksPerWorkspace || len(hooks[0].Events) != 0 {
		t.Fatalf("webhooks: %d %v", len(hooks), err)
	}
	if strings.Contains(hooks[0].Sealed, first.Secret) || strings.Contains(hooks[0].Sealed, strings.TrimPrefix(first.Secret, "whsec_")) {
		t.Error("the secret is stored in the clear")
	}
	if s, err := h.svc.OpenWebhookSecret(hooks[0].ID, hooks[0].Sealed); err != nil || s != first.Secret {
		t.Errorf("opened secret %v", err)
	}
	if _, err := h.svc.OpenWebhookSecret(hooks[1].ID, hooks[0].Sealed); !errors.Is(err, btk.ErrWebhookSecret) {
		t.Errorf("a sealed secret opened under another webhook's id: %v", err)
	}
	other := &btk.Actor{AccountID: h.owner.AccountID, WorkspaceID: "00000000-0000-4000-8000-000000000000", Role: btk.RoleOwner}
	if err := h.svc.DeleteWebhook(ctx, other, first.Webhook.ID); btk.ErrorCode(err) != btk.CodeNotFound {
		t.Errorf("deleting another workspace's webhook: %v", err)
	}
	if err := h.svc.DeleteWebhook(ctx, h.owner, first.Webhook.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.DeleteWebhook(ctx, h.owner, first.Webhook.ID); btk.ErrorCode(err) != btk.CodeNotFound {
		t.Errorf("deleting twice: %v", err)
	}
	evs, _, err := h.svc.AuditEvents(ctx, h.owner, btk.AuditFilter{Page: btk.Page{First: 100}})
	if err != nil {
		t.Fatal(err)
	}
	var created, deleted int
	for _, ev := range evs {
		switch ev.Action {
		case btk.EventWebhookCreated:
			created++
		case btk.EventWebhookDeleted:
			deleted++
		}
		if strings.Contains(ev.Metadata, "whsec_") {
			t.Error("a secret in the audit log")
		}
		// The receiver's URL is recorded (and sent to every receiver) as
		// its origin only: the audit chain keeps it for ever.
		if ev.Action == btk.EventWebhookCreated || ev.Action == btk.EventWebhookDeleted {
			if strings.Contains(ev.Metadata, "RECEIVERSECRET") || strings.Contains(ev.Metadata, "s3cr3t") ||
				!strings.Contains(ev.Metadata, `"url":"https://example.com/…"`) {
				t.Errorf("%s metadata %s: want the URL as its origin only", ev.Action, ev.Metadata)
			}
		}
	}
	if created != btk.MaxWebhooksPerWorkspace || deleted != 1 {
		t.Errorf("audited %d creations, %d deletions", created, deleted)
	}
}
