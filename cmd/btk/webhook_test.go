package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// webhookReceiver is a real HTTP receiver verifying each request as the
// Standard Webhooks specification says, with its own code.
type webhookReceiver struct {
	*httptest.Server
	mu     sync.Mutex
	secret string
	ids    map[string]int
	types  map[string]string
	bad    int
	down   bool // answer 503 to everything
}

func newWebhookReceiver(t *testing.T) *webhookReceiver {
	r := &webhookReceiver{ids: map[string]int{}, types: map[string]string{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		id, ts := req.Header.Get("webhook-id"), req.Header.Get("webhook-timestamp")
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.down {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(r.secret, "whsec_"))
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + ts + "." + string(body)))
		if req.Header.Get("webhook-signature") != "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)) {
			r.bad++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var ev struct{ Type string }
		json.Unmarshal(body, &ev)
		r.ids[id]++
		r.types[id] = ev.Type
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *webhookReceiver) count() (distinct, total, bad int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.ids {
		total += n
	}
	return len(r.ids), total, r.bad
}

// docs/webhooks.md: events committed before a kill -9 of btk serve are all
// delivered after it starts again: the outbox is in the database.
func TestServeKillLosesNoWebhook(t *testing.T) {
	parallelUnlessShort(t, "starts btk serve processes")
	db := filepath.Join(t.TempDir(), "btk.db")
	rcv := newWebhookReceiver(t)
	rcv.down = true // nothing is delivered before the kill
	p := startServe(t, db, "--webhook-allow-private")
	token := p.login()
	var created struct{ CreateWebhook struct{ Secret string } }
	p.must(token, `mutation($u:String!){createWebhook(input:{url:$u, events:["api_key.created","api_key.revoked"]}){secret webhook{id}}}`,
		map[string]any{"u": rcv.URL}, &created)
	rcv.mu.Lock()
	rcv.secret = created.CreateWebhook.Secret
	rcv.mu.Unlock()
	const n = 30
	for i := range n {
		k := p.createKey(token, "k"+strconv.Itoa(i))
		if i%10 == 0 {
			p.must(token, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": k.ID}, &struct{}{})
		}
	}
	p.kill() // right after the last commit: every delivery is still in the outbox
	if before, _, _ := rcv.count(); before != 0 {
		t.Fatalf("%d events delivered while the receiver was down", before)
	}
	rcv.mu.Lock()
	rcv.down = false
	rcv.mu.Unlock()

	startServe(t, db, "--webhook-allow-private")
	// Attempts made before the kill are retried after their backoff (5-6 s);
	// a delivery cut by the kill waits for its lease (50 s).
	deadline := time.Now().Add(2 * time.Minute)
	for {
		distinct, _, bad := rcv.count()
		if bad > 0 {
			t.Fatalf("%d requests failed verification", bad)
		}
		if distinct == n+3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events delivered after the restart", distinct, n+3)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, total, _ := rcv.count()
	if total != n+3 {
		t.Logf("%d requests for %d events: a delivery cut by the kill was sent again (same webhook-id)", total, n+3)
	}
}

// docs/webhooks.md#the-audit-chain: rows edited, deleted or inserted in the
// database behind btk's back are named by `btk audit verify` (exit 1).
func TestAuditVerifyNamesTamperedRow(t *testing.T) {
	skipIfShort(t, "starts btk serve processes")
	isolate(t)
	db := filepath.Join(t.TempDir(), "btk.db")
	p := startServe(t, db)
	token := p.login()
	for i := range 4 {
		p.createKey(token, "k"+strconv.Itoa(i))
	}
	verify := func() (int, string) {
		s, out, errOut := testStreams(pipe, "")
		code := btkRun(s, "--server", p.url, "--token", token, "audit", "verify")
		return code, out.String() + errOut.String()
	}
	if code, out := verify(); code != 0 || !strings.Contains(out, "intact") {
		t.Fatalf("untouched chain: exit %d\n%s", code, out)
	}
	raw, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := raw.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	var (
		evs, emails []string
		ws          string
	)
	rows, err := raw.Query(`SELECT id, workspace_id, actor_email FROM audit_events WHERE workspace_id IS NOT NULL ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, email string
		rows.Scan(&id, &ws, &email)
		evs, emails = append(evs, id), append(emails, email)
	}
	rows.Close()
	if len(evs) < 4 {
		t.Fatalf("%d workspace events", len(evs))
	}

	// Edited, then put back.
	exec(`UPDATE audit_events SET actor_email = 'nobody@example.com' WHERE id = ?`, evs[1])
	if code, out := verify(); code != 1 || !strings.Contains(out, evs[1]) {
		t.Errorf("edited row %s: exit %d\n%s", evs[1], code, out)
	}
	exec(`UPDATE audit_events SET actor_email = ? WHERE id = ?`, emails[1], evs[1])
	if code, out := verify(); code != 0 {
		t.Errorf("edit undone: exit %d\n%s", code, out)
	}
	// Inserted, then removed.
	exec(`INSERT INTO audit_events (id, workspace_id, action, actor_email, target_type, metadata, created_at)
		VALUES ('forged-row', ?, 'api_key.revoked', 'x@example.com', 'api_key', '{}', 1)`, ws)
	if code, out := verify(); code != 1 || !strings.Contains(out, "forged-row") {
		t.Errorf("inserted row: exit %d\n%s", code, out)
	}
	exec(`DELETE FROM audit_events WHERE id = 'forged-row'`)
	// The head edited: no row is to blame, and none is named.
	exec(`UPDATE audit_chain_heads SET count = count + 1 WHERE chain = ?`, ws)
	if code, out := verify(); code != 1 || !strings.Contains(out, "broken at position") || strings.Contains(out, ", row ") {
		t.Errorf("edited head: exit %d\n%s", code, out)
	}
	exec(`UPDATE audit_chain_heads SET count = count - 1 WHERE chain = ?`, ws)
	// Two rows moved (their places in the table swapped): the first out of
	// place is named, and the reason allows for a move.
	swap := func() {
		t.Helper()
		var a, b int64
		if err := raw.QueryRow(`SELECT (SELECT seq FROM audit_events WHERE id = ?), (SELECT seq FROM audit_events WHERE id = ?)`, evs[1], evs[2]).Scan(&a, &b); err != nil {
			t.Fatal(err)
		}
		exec(`UPDATE audit_events SET seq = ? WHERE id = ?`, -a, evs[1])
		exec(`UPDATE audit_events SET seq = ? WHERE id = ?`, a, evs[2])
		exec(`UPDATE audit_events SET seq = ? WHERE id = ?`, b, evs[1])
	}
	swap()
	if code, out := verify(); code != 1 || !strings.Contains(out, evs[2]) || !strings.Contains(out, "rows were moved") {
		t.Errorf("swapped rows: exit %d\n%s", code, out)
	}
	swap()
	if code, out := verify(); code != 0 {
		t.Errorf("swap undone: exit %d\n%s", code, out)
	}
	// Deleted: the row after the gap is named.
	exec(`DELETE FROM audit_events WHERE id = ?`, evs[1])
	if code, out := verify(); code != 1 || !strings.Contains(out, evs[2]) || !strings.Contains(out, "missing") {
		t.Errorf("deleted row before %s: exit %d\n%s", evs[2], code, out)
	}
}

// btk webhook add|list|deliveries|rm against a real server.
func TestWebhookCommands(t *testing.T) {
	skipIfShort(t, "starts btk serve processes")
	isolate(t)
	rcv := newWebhookReceiver(t)
	p := startServe(t, filepath.Join(t.TempDir(), "btk.db"), "--webhook-allow-private")
	token := p.login()
	btk := func(args ...string) (int, string, string) {
		s, out, errOut := testStreams(pipe, "")
		code := btkRun(s, append([]string{"--server", p.url, "--token", token}, args...)...)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := btk("webhook", "add", rcv.URL, "--event", "api_key.created", "-o", "json")
	if code != 0 {
		t.Fatalf("add: exit %d %s", code, errOut)
	}
	var added struct {
		Webhook struct{ ID, URL string }
		Secret  string
	}
	if err := json.Unmarshal([]byte(out), &added); err != nil || !strings.HasPrefix(added.Secret, "whsec_") || added.Webhook.URL != rcv.URL {
		t.Fatalf("add -o json: %v\n%s", err, out)
	}
	rcv.mu.Lock()
	rcv.secret = added.Secret
	rcv.mu.Unlock()
	if code, out, _ := btk("webhook", "add", rcv.URL, "-o", "plain"); code != 0 || !strings.HasPrefix(out, "whsec_") || strings.Count(out, "\n") != 1 {
		t.Errorf("add -o plain: exit %d %q", code, out)
	}
	if code, _, errOut := btk("webhook", "add", "ftp://example.com"); code != 1 || !strings.Contains(errOut, "BAD_USER_INPUT") {
		t.Errorf("add ftp: exit %d %s", code, errOut)
	}
	// A typo in an event type is refused (it made a webhook that never fired).
	if code, _, errOut := btk("webhook", "add", rcv.URL, "--event", "nosuch.event"); code != 1 || !strings.Contains(errOut, "BAD_USER_INPUT") ||
		!strings.Contains(errOut, "nosuch.event") || !strings.Contains(errOut, "api_key.revoked") {
		t.Errorf("add --event nosuch.event: exit %d %s", code, errOut)
	}
	if code, out, _ := btk("webhook", "list", "-o", "json"); code != 0 || strings.Count(out, `"id"`) != 2 || strings.Contains(out, "whsec_") {
		t.Errorf("list: exit %d %s", code, out)
	}
	p.createKey(token, "ci")
	deadline := time.Now().Add(time.Minute)
	for {
		if d, _, _ := rcv.count(); d > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no delivery")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, out, _ := btk("webhook", "deliveries", added.Webhook.ID, "-o", "json"); code != 0 || !strings.Contains(out, `"api_key.created"`) {
		t.Errorf("deliveries: exit %d %s", code, out)
	}
	if code, _, errOut := btk("webhook", "rm", added.Webhook.ID); code != 2 || !strings.Contains(errOut, "--yes") {
		t.Errorf("rm without a terminal or --yes: exit %d %s", code, errOut)
	}
	if code, _, errOut := btk("webhook", "rm", added.Webhook.ID, "--yes"); code != 0 {
		t.Errorf("rm: exit %d %s", code, errOut)
	}
	if code, _, _ := btk("webhook", "rm", added.Webhook.ID, "--yes"); code != 5 {
		t.Errorf("rm twice: exit %d, want 5 (NOT_FOUND)", code)
	}
}
