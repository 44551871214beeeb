package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/leaktest"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
)

// Concurrent leak reports naming the same keys, in different orders (GitHub
// may report one token from several places at once): every report is
// answered 200 with every token a true positive, and each key gets exactly
// one revocation audit pair. On PostgreSQL the second report to reach a key
// found it revoked under its feet (NOT_FOUND, the whole report rolled back,
// its other keys left active), or deadlocked with a report taking the keys
// in another order.
func TestConcurrentLeakReportsRevokeOnce(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "btk.db")
			if engine == "postgres" {
				path = pgtest.URL(t)
			}
			testConcurrentLeakReports(t, newEnvOn(t, path, nil))
		})
	}
}

func testConcurrentLeakReports(t *testing.T, e *env) {
	signer := leaktest.NewSigner(t)
	srv := leakServer(e, signer)
	owner := e.admin()
	const nKeys, nReports = 12, 16
	var keys []newKey
	for i := range nKeys {
		keys = append(keys, e.createKey(owner, fmt.Sprintf("leaked-%d", i)))
	}
	var wg sync.WaitGroup
	for r := range nReports {
		var entries []map[string]string
		for _, i := range rand.Perm(nKeys) {
			entries = append(entries, map[string]string{"token": keys[i].Plaintext, "type": "btk_api_key", "url": fmt.Sprintf("https://example.com/%d", r), "source": "content"})
		}
		body := reportBody(entries...)
		h := map[string]string{"Github-Public-Key-Identifier": signer.ID, "Github-Public-Key-Signature": signer.Sign(body)}
		wg.Go(func() {
			res := postReport(t, srv.URL, body, h)
			if res.Status != http.StatusOK {
				t.Errorf("report %d: HTTP %d %s", r, res.Status, res.Body)
				return
			}
			var labels []struct{ Label string }
			json.Unmarshal([]byte(res.Body), &labels)
			for _, l := range labels {
				if l.Label != "true_positive" {
					t.Errorf("report %d: %s", r, res.Body)
				}
			}
		})
	}
	wg.Wait()
	for _, k := range keys {
		if s := e.probeStatus(k.Plaintext); s != http.StatusUnauthorized {
			t.Errorf("key %s after the reports: HTTP %d", k.ID, s)
		}
	}
	var log struct {
		ApiKeyAuditLog struct{ Nodes []struct{ ApiKeyID string } }
	}
	e.must(owner, `{apiKeyAuditLog(action:REVOKED,first:500){nodes{apiKeyId}}}`, nil, &log)
	var events struct {
		AuditEvents struct{ Nodes []struct{ TargetID string } }
	}
	e.must(owner, `{auditEvents(action:"api_key.leaked",first:500){nodes{targetId}}}`, nil, &events)
	revoked, leaked := map[string]int{}, map[string]int{}
	for _, n := range log.ApiKeyAuditLog.Nodes {
		revoked[n.ApiKeyID]++
	}
	for _, n := range events.AuditEvents.Nodes {
		leaked[n.TargetID]++
	}
	for _, k := range keys {
		if revoked[k.ID] != 1 || leaked[k.ID] != 1 {
			t.Errorf("key %s: %d REVOKED entries and %d api_key.leaked events, want one each", k.ID, revoked[k.ID], leaked[k.ID])
		}
	}
}

// pausingStore stops the first write transaction that looks a key up by
// its hash, once armed, until released: a report that found its keys
// active while another report revokes them.
type pausingStore struct {
	btk.Store
	armed            *atomic.Bool
	reached, release chan struct{}
}

func (s pausingStore) Write(ctx context.Context, fn func(btk.Tx) error) error {
	return s.Store.Write(ctx, func(tx btk.Tx) error { return fn(pausingTx{tx, s}) })
}

type pausingTx struct {
	btk.Tx
	s pausingStore
}

func (t pausingTx) APIKeyByHash(ctx context.Context, hash []byte) (*btk.APIKey, error) {
	k, err := t.Tx.APIKeyByHash(ctx, hash)
	if t.s.armed.CompareAndSwap(true, false) {
		close(t.s.reached)
		<-t.s.release
	}
	return k, err
}

// A leak report that found a key active while another report revoked it
// before it could (PostgreSQL: the two transactions run at once) answers
// 200 and leaves one revocation: it answered 404 NOT_FOUND, the whole
// report rolled back.
func TestLeakReportRacingAnotherReport(t *testing.T) {
	t.Parallel()
	ps := pausingStore{armed: new(atomic.Bool), reached: make(chan struct{}), release: make(chan struct{})}
	e := newEnvOn(t, pgtest.URL(t), func(s btk.Store) btk.Store { ps.Store = s; return ps })
	signer := leaktest.NewSigner(t)
	srv := leakServer(e, signer)
	owner := e.admin()
	k, other := e.createKey(owner, "raced"), e.createKey(owner, "other")
	report := func(tokens ...string) (body []byte, h map[string]string) {
		var entries []map[string]string
		for _, tok := range tokens {
			entries = append(entries, map[string]string{"token": tok, "type": "btk_api_key", "url": "https://example.com", "source": "content"})
		}
		body = reportBody(entries...)
		return body, map[string]string{"Github-Public-Key-Identifier": signer.ID, "Github-Public-Key-Signature": signer.Sign(body)}
	}
	ps.armed.Store(true)
	first := make(chan authResponse, 1)
	go func() {
		body, h := report(k.Plaintext, other.Plaintext)
		first <- postReport(t, srv.URL, body, h)
	}()
	select {
	case <-ps.reached:
	case <-time.After(time.Minute):
		t.Fatal("the first report never looked its key up")
	}
	body, h := report(k.Plaintext)
	if r := postReport(t, srv.URL, body, h); r.Status != http.StatusOK {
		t.Fatalf("second report: HTTP %d %s", r.Status, r.Body)
	}
	close(ps.release)
	var r authResponse
	select {
	case r = <-first:
	case <-time.After(time.Minute):
		t.Fatal("the first report never answered")
	}
	if r.Status != http.StatusOK {
		t.Fatalf("the report that raced another: HTTP %d %s", r.Status, r.Body)
	}
	if s := e.probeStatus(other.Plaintext); s != http.StatusUnauthorized {
		t.Fatalf("the other key of the raced report: HTTP %d", s)
	}
	var log struct {
		ApiKeyAuditLog struct{ Nodes []struct{ ApiKeyID string } }
	}
	e.must(owner, `{apiKeyAuditLog(action:REVOKED,first:500){nodes{apiKeyId}}}`, nil, &log)
	if n := len(log.ApiKeyAuditLog.Nodes); n != 2 {
		t.Fatalf("%d REVOKED entries, want 2 (one per key)", n)
	}
}

// stalledReport opens a connection to srv, sends a leak report's headers
// announcing a 1 MiB body and the first 64 KiB of it, and stops there.
func stalledReport(t *testing.T, srv *httptest.Server, header map[string]string, sent int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var b strings.Builder
	fmt.Fprintf(&b, "POST /v1/leaks HTTP/1.1\r\nHost: btk\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", btk.MaxLeakReportBytes)
	for k, v := range header {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("\r\n[")
	b.WriteString(strings.Repeat(" ", sent-1))
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	return c
}

// answered reads the answer a stalled connection got without sending the
// rest of its body, waiting at most wait; 0 when none came.
func answered(c net.Conn, wait time.Duration) int {
	c.SetReadDeadline(time.Now().Add(wait))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// What leak reports can make the server hold is bounded: a report that
// names no listed signing key is decided (401, 429) before its body is
// read, and the bodies of reports that may be signed hold at most
// btk.MaxLeakReportBytesHeld bytes together, as received; past that a
// report is answered 503 at once. Before, every connection's body was read
// whole first (1 MiB each, for as long as the client took to send it:
// 10,000 slow connections held 10 GB); then at most 16 bodies were read at
// once, so 16 connections that announced 1 MiB and sent a byte a second
// blocked every report, a platform admin's too.
func TestLeakReportBodiesBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	signer := leaktest.NewSigner(t)
	srv := leakServer(e, signer)
	const n = 40

	var conns []net.Conn
	for range n {
		conns = append(conns, stalledReport(t, srv, nil, 64<<10))
	}
	for i, c := range conns {
		if s := answered(c, 10*time.Second); s != http.StatusUnauthorized && s != http.StatusTooManyRequests {
			t.Fatalf("unsigned report %d, body not sent: HTTP %d, want 401 or 429 before the body", i, s)
		}
	}

	// Stalled reports that sent little hold little: a report is read and
	// answered while 40 of them wait.
	signed := map[string]string{"Github-Public-Key-Identifier": signer.ID, "Github-Public-Key-Signature": signer.Sign([]byte("[]"))}
	for range n {
		stalledReport(t, srv, signed, 16<<10)
	}
	body := reportBody(map[string]string{"token": "btk_not_a_key", "type": "btk_api_key", "url": "u", "source": "content"})
	h := map[string]string{"Github-Public-Key-Identifier": signer.ID, "Github-Public-Key-Signature": signer.Sign(body)}
	if r := postReport(t, srv.URL, body, h); r.Status != http.StatusOK {
		t.Fatalf("a report beside 40 stalled ones: HTTP %d %s", r.Status, r.Body)
	}

	// Stalled reports that sent 768 KiB each: those past the bytes held
	// are answered 503 at once.
	const sent = 768 << 10
	conns = conns[:0]
	for range n {
		conns = append(conns, stalledReport(t, srv, signed, sent))
	}
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() { statuses[i] = answered(c, 3*time.Second) })
	}
	wg.Wait()
	busy := 0
	for _, s := range statuses {
		switch s {
		case http.StatusServiceUnavailable:
			busy++
		case 0: // still being read
		default:
			t.Fatalf("a report whose body is not whole: HTTP %d", s)
		}
	}
	if reading := n - busy; reading*sent > btk.MaxLeakReportBytesHeld {
		t.Fatalf("%d report bodies of %d bytes read at once, want at most %d bytes", reading, sent, btk.MaxLeakReportBytesHeld)
	}
	// Once those connections are gone, reports are read again.
	for _, c := range conns {
		c.Close()
	}
	for attempt := 0; ; attempt++ {
		r := postReport(t, srv.URL, body, h)
		if r.Status == http.StatusOK {
			break
		}
		if r.Status != http.StatusServiceUnavailable || attempt == 100 {
			t.Fatalf("a report after the stalled ones left: HTTP %d %s", r.Status, r.Body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
