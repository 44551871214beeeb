package server_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/redisstate/redistest"
	"github.com/btk-project/btk/internal/server"
	"github.com/btk-project/btk/internal/store"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
)

// proxyWith is proxyFor with server options (an upstream timeout).
func (e *env) proxyWith(upstream string, opts ...server.Option) *httptest.Server {
	e.t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		e.t.Fatal(err)
	}
	// At DEBUG, as the main listener's env: every proxied request passes
	// through the access log's writer (streams and upgrades included).
	log := slog.New(slog.NewTextHandler(lockedWriter{e.logMu, e.logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p := httptest.NewServer(server.New(e.svc, e.db, log, opts...).Proxy(u))
	e.t.Cleanup(p.Close)
	return p
}

// Waiting for an upstream is bounded (docs/security.md#what-a-client-can-make-the-server-hold):
// requests to an upstream that never answers held their
// goroutines and descriptors indefinitely. Past --upstream-timeout they
// are answered 504 GATEWAY_TIMEOUT, and what they held is given back.
func TestProxyUpstreamTimeout(t *testing.T) {
	e := newEnv(t)
	k := e.createKey(e.admin(), "slow-upstream")
	hang := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	defer close(hang)
	p := e.proxyWith(up.URL, server.WithUpstreamTimeout(300*time.Millisecond))
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	before := runtime.NumGoroutine()
	const n = 50
	var wg sync.WaitGroup
	results := make(chan authResponse, n)
	for range n {
		wg.Go(func() {
			results <- getWithKey(client, p.URL+"/never/"+k.Plaintext, k.Plaintext)
		})
	}
	wg.Wait()
	close(results)
	for r := range results {
		if r.Status != http.StatusGatewayTimeout || !strings.Contains(r.Body, `"GATEWAY_TIMEOUT"`) {
			t.Fatalf("a request to an upstream that never answers: HTTP %d %s", r.Status, r.Body)
		}
	}
	// The key pasted into the path: the WARN line names it redacted.
	assertLoggedRedacted(t, e.logText(), `level=WARN msg="upstream timed out"`, "/never/", k.Plaintext)
	// The goroutines of the 50 requests are gone (bounded wait).
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+10 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before+10 {
		t.Fatalf("%d goroutines after the timeouts, %d before", g, before)
	}
}

// A proxied stream lasts while its key is valid (docs/security.md#what-a-client-can-make-the-server-hold):
// a WebSocket opened through the proxy kept passing data
// after its key was revoked. It is closed after the revoke answered, within
// a bounded wait; and so is a long response stream when its key is
// rotated, and one whose key expires.
func TestProxyCutsConnectionsWhenKeyInvalid(t *testing.T) {
	e, owner := newAdminEnv(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/socket" {
			echoWebSocket(w, r, "", 30*time.Second)
			return
		}
		// An endless event stream: a line every 20 ms.
		w.Header().Set("Content-Type", "text/event-stream")
		for {
			if _, err := io.WriteString(w, "data: tick\n\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}))
	defer up.Close()
	p := e.proxyFor(up.URL)

	t.Run("websocket, revoked", func(t *testing.T) {
		k := e.createKey(owner, "ws-revoked")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c := dialEchoing(t, ctx, p.URL, k.Plaintext, "before the revoke")
		e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": k.ID}, &struct{}{})
		untilTunnelCut(t, ctx, c, "the WebSocket still passes data 20 s after its key was revoked")
	})

	stream := func(t *testing.T, key string, invalidate func()) {
		req, _ := http.NewRequest("GET", p.URL+"/events", nil)
		req.Header.Set("X-Api-Key", key)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		br := bufio.NewReader(res.Body)
		if line, err := br.ReadString('\n'); err != nil || line != "data: tick\n" {
			t.Fatalf("the stream: %q %v", line, err)
		}
		invalidate()
		for {
			if _, err := br.ReadString('\n'); err != nil {
				if ctx.Err() != nil {
					t.Fatal("the stream still runs 20 s after its key stopped being valid")
				}
				return // cut
			}
		}
	}
	t.Run("stream, rotated", func(t *testing.T) {
		k := e.createKey(owner, "stream-rotated")
		stream(t, k.Plaintext, func() {
			e.must(e.elevated(owner, adminPassword), `mutation($id:ID!){rotateApiKey(id:$id){apiKey{id}}}`, map[string]any{"id": k.ID}, &struct{}{})
		})
	})
	t.Run("stream, expired", func(t *testing.T) {
		exp := e.clock.Now().Add(time.Hour).Format(time.RFC3339)
		k := e.createKeyWith(owner, "stream-expired", `expiresAt:"`+exp+`"`)
		stream(t, k.Plaintext, func() { e.clock.Advance(2 * time.Hour) })
	})
	// A key older than the workspace's maximum lifetime is expired
	// (docs/access.md#workspace-key-policy): its streams end too.
	t.Run("stream, past the workspace's maximum lifetime", func(t *testing.T) {
		k := e.createKey(owner, "stream-policy")
		stream(t, k.Plaintext, func() {
			e.must(owner, `mutation($w:ID!){setWorkspaceKeyPolicy(workspaceId:$w,maxLifetimeDays:1){id}}`, map[string]any{"w": e.adminWS}, &struct{}{})
			e.clock.Advance(49 * time.Hour)
		})
	})
	// A key narrowed so that it would refuse the request (its networks, or
	// rules reloaded) ends the connection as a revocation does: an owner
	// who shuts a leaked key's network out shuts its open streams out too.
	t.Run("stream, networks narrowed", func(t *testing.T) {
		fresh := e.admin() // the sessions above are days old by now
		e.must(fresh, `mutation($w:ID!){setWorkspaceKeyPolicy(workspaceId:$w){id}}`, map[string]any{"w": e.adminWS}, &struct{}{})
		k := e.createKey(fresh, "stream-narrowed")
		stream(t, k.Plaintext, func() {
			if r := updateKey(t, e, fresh, k.ID, `allowedCidrs:["192.0.2.0/24"]`); len(r.Errors) > 0 {
				t.Fatalf("updateApiKey: %+v", r.Errors)
			}
		})
	})
	t.Run("stream, rules reloaded", func(t *testing.T) {
		k := e.createKey(e.admin(), "stream-denied")
		defer e.svc.SetAccessRules(nil)
		stream(t, k.Plaintext, func() {
			e.svc.SetAccessRules(mustRules(t, "rules:\n  - path: /events\n    deny: true\n"))
		})
	})
}

// The same on every instance: two instances share PostgreSQL and
// Redis; a WebSocket opened through instance B's proxy is closed when the
// key is revoked through instance A.
func TestProxyCutsConnectionsOnEveryInstance(t *testing.T) {
	if os.Getenv(pgtest.Env) == "" || os.Getenv("BTK_TEST_REDIS") == "" {
		t.Skip(pgtest.Env + " and BTK_TEST_REDIS are needed: skipping the two-instance proxy test")
	}
	prefix := redistest.Prefix()
	shared := func(cfg *btk.Config) {
		st := redisStateAt(t, prefix)
		cfg.KeyGate, cfg.Throttle = st, st.Throttle()
	}
	a := newEnvOn(t, pgtest.URL(t), nil, shared)
	owner := a.admin()
	k := a.createKey(owner, "ws-two-instances")
	// Instance B: its own service and store on the same database and Redis.
	ctx := context.Background()
	dbB, err := store.Open(ctx, a.dbPath, true)
	if err != nil {
		t.Fatal(err)
	}
	defer dbB.Close()
	cfgB := btk.Config{}
	shared(&cfgB)
	svcB, err := btk.NewService(ctx, dbB, nil, cfgB)
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		echoWebSocket(w, r, "", 30*time.Second)
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	pB := httptest.NewServer(server.New(svcB, dbB, slog.New(slog.DiscardHandler)).Proxy(u))
	defer pB.Close()

	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	c := dialEchoing(t, wctx, pB.URL, k.Plaintext, "through instance B")
	a.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": k.ID}, &struct{}{})
	untilTunnelCut(t, wctx, c, "instance B's WebSocket still passes data 20 s after the key was revoked on instance A")

	// And when the key is narrowed on instance A so that it would refuse
	// the connection's request.
	k = a.createKey(owner, "ws-narrowed-two-instances")
	c = dialEchoing(t, wctx, pB.URL, k.Plaintext, "through instance B")
	if r := updateKey(t, a, owner, k.ID, `allowedCidrs:["192.0.2.0/24"]`); len(r.Errors) > 0 {
		t.Fatalf("updateApiKey: %+v", r.Errors)
	}
	untilTunnelCut(t, wctx, c, "instance B's WebSocket still passes data 20 s after the key's networks were narrowed on instance A")
}

// echoWebSocket is an upstream's WebSocket end: it sends every message back
// with prefix before it, for at most limit, so a test sees what the proxy
// passes both ways.
func echoWebSocket(w http.ResponseWriter, r *http.Request, prefix string, limit time.Duration) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx, cancel := context.WithTimeout(r.Context(), limit)
	defer cancel()
	for {
		typ, msg, err := c.Read(ctx)
		if err != nil || c.Write(ctx, typ, append([]byte(prefix), msg...)) != nil {
			return
		}
	}
}

// dialEchoing opens a WebSocket to the /socket of an echoWebSocket upstream
// through proxy with key, and checks one message comes back (when names the
// moment in the failure); the connection is closed at the test's end.
func dialEchoing(t *testing.T, ctx context.Context, proxy, key, when string) *websocket.Conn {
	t.Helper()
	ws := "ws" + strings.TrimPrefix(proxy, "http") + "/socket"
	c, _, err := websocket.Dial(ctx, ws, &websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {key}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	if err := c.Write(ctx, websocket.MessageText, []byte("before")); err != nil {
		t.Fatal(err)
	}
	if _, m, err := c.Read(ctx); err != nil || string(m) != "before" {
		t.Fatalf("echo %s: %q %v", when, m, err)
	}
	return c
}

// untilTunnelCut keeps talking on c until the proxy closes the tunnel; if
// ctx ends first, the test fails with stillOpen.
func untilTunnelCut(t *testing.T, ctx context.Context, c *websocket.Conn, stillOpen string) {
	t.Helper()
	for {
		if ctx.Err() != nil {
			t.Fatal(stillOpen)
		}
		if c.Write(ctx, websocket.MessageText, []byte("after")) != nil {
			return
		}
		if _, _, err := c.Read(ctx); err != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A refusal on the proxy listener is answered before the request's body is
// read, and closes the connection. net/http read an announced body before
// answering (to keep the connection), and the listener has no read
// timeout: clients without a key that announced a body and never sent it
// held connections until the connection guard had none left for anyone,
// on every listener.
func TestProxyRefusalDoesNotWaitForTheBody(t *testing.T) {
	e := newEnv(t)
	rec := &recorder{}
	up := httptest.NewServer(rec)
	defer up.Close()
	p := e.proxyFor(up.URL)
	addr := strings.TrimPrefix(p.URL, "http://")
	for _, key := range []string{"", "btk_00000000_unknown"} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		req := "POST /orders/1 HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
		if key != "" {
			req += "X-Api-Key: " + key + "\r\n"
		}
		if _, err := io.WriteString(conn, req+"\r\n"); err != nil { // and never the body
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("key %q: no answer without the body: %v", key, err)
		}
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusUnauthorized || !res.Close {
			t.Errorf("key %q: HTTP %d, closing %v: %s", key, res.StatusCode, res.Close, body)
		}
		if n, err := conn.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("key %q: the connection stays open after the refusal: %d %v", key, n, err)
		}
		conn.Close()
	}
	if rec.count() != 0 {
		t.Error("a refused request reached the upstream")
	}
}

// An upload does not outlive its key: the key of a request whose body is
// still streaming to the upstream is watched as a response stream's is,
// and the request is cut when the key is revoked. The watch started only
// once the response had begun, so a body sent a chunk a second went on
// reaching the upstream after the revoke, which then served it with the
// revoked key's identity.
func TestProxyUploadCutWhenKeyRevoked(t *testing.T) {
	e, owner := newAdminEnv(t)
	k := e.createKey(owner, "uploader")
	got := make(chan error, 1)
	started := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		_, err := io.ReadAll(r.Body)
		got <- err
		io.WriteString(w, "stored")
	}))
	defer up.Close()
	p := e.proxyFor(up.URL)
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", p.URL+"/upload", pr)
	req.Header.Set("X-Api-Key", k.Plaintext)
	answered := make(chan authResponse, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- authResponse{Body: err.Error()}
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		answered <- authResponse{Status: res.StatusCode, Body: string(b)}
	}()
	// The client sends a chunk every 50 ms until it is answered (a write
	// to the pipe blocks while nobody reads it: in a goroutine of its own).
	stop := make(chan struct{})
	go func() {
		for {
			if _, err := io.WriteString(pw, "a chunk\n"); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	defer pw.Close()
	defer close(stop)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the upload did not reach the upstream")
	}
	e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": k.ID}, &struct{}{})
	var r authResponse
	select {
	case r = <-answered:
	case <-time.After(20 * time.Second):
		t.Fatal("the upload still runs 20 s after its key was revoked")
	}
	if err := <-got; err == nil {
		t.Error("the upstream received the whole body sent after the revoke")
	}
	if r.Status != http.StatusUnauthorized || !strings.Contains(r.Body, "no longer valid") {
		t.Errorf("the upload's answer: HTTP %d %s", r.Status, r.Body)
	}
}
