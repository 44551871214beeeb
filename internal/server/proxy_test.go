package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/btk-project/btk/internal/btk"
)

// recorder is an upstream that records the headers of what reached it.
type recorder struct {
	mu   sync.Mutex
	seen []http.Header
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.mu.Lock()
	h := r.Header.Clone()
	h.Set("Host", r.Host)
	rec.seen = append(rec.seen, h)
	rec.mu.Unlock()
	w.Header().Set("X-Upstream", "yes")
	io.WriteString(w, "upstream says hi")
}

func (rec *recorder) last(t testing.TB) http.Header {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.seen) == 0 {
		t.Fatal("nothing reached the upstream")
	}
	return rec.seen[len(rec.seen)-1]
}

func (rec *recorder) count() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.seen)
}

// proxyFor starts btk's reverse proxy (the same service as e's main
// listener) in front of upstream and returns its URL.
func (e *env) proxyFor(upstream string) *httptest.Server {
	e.t.Helper()
	return e.proxyWith(upstream)
}

// docs/gateway.md#btks-reverse-proxy: what reaches the upstream, and what does not.
func TestProxyHeaders(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	k := e.createKey(owner, "proxied")
	rec := &recorder{}
	up := httptest.NewServer(rec)
	defer up.Close()
	p := e.proxyFor(up.URL)
	client := p.Client()

	// An accepted key: the secret stays behind, btk's headers arrive.
	r := send(t, client, "POST", p.URL+"/some/path?q=1", map[string]string{
		"X-Api-Key": k.Plaintext, "X-Tenant-Id": "forged", "X-Api-Key-Id": "forged",
		"Connection": "X-Hop", "X-Hop": "hop-by-hop", "X-End": "end-to-end",
	}, strings.NewReader("body"))
	if r.Status != http.StatusOK || r.Body != "upstream says hi" || r.Header.Get("X-Upstream") != "yes" {
		t.Fatalf("HTTP %d %q", r.Status, r.Body)
	}
	checkRateLimitHeaders(t, r.Header, 600, 100000, "minute", 599, false)
	h := rec.last(t)
	if v := h.Values("X-Tenant-Id"); len(v) != 1 || v[0] != e.adminWS {
		t.Errorf("upstream X-Tenant-Id %q, want only %s", v, e.adminWS)
	}
	if v := h.Values("X-Api-Key-Id"); len(v) != 1 || v[0] != k.ID {
		t.Errorf("upstream X-Api-Key-Id %q, want only %s", v, k.ID)
	}
	if h.Get("X-Api-Key") != "" || strings.Contains(strings.Join(flatten(h), "\n"), k.Plaintext) {
		t.Errorf("the key's plaintext reached the upstream: %v", h)
	}
	if h.Get("X-Hop") != "" || h.Get("X-End") != "end-to-end" {
		t.Errorf("hop-by-hop X-Hop %q (want none), X-End %q", h.Get("X-Hop"), h.Get("X-End"))
	}

	// Spellings a CGI-style upstream reads as X-Tenant-Id, and a Connection
	// header naming btk's own headers: neither forges nor strips them.
	r = send(t, client, "GET", p.URL+"/", map[string]string{
		"X-Api-Key": k.Plaintext, "X_Tenant_Id": "forged", "x_api_key_id": "forged", "X_Api_Key": "btk_smuggled",
		"Connection": "X-Tenant-Id, X-Api-Key-Id",
	}, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("underscores: HTTP %d", r.Status)
	}
	hu := rec.last(t)
	for name, v := range hu {
		if n := strings.ReplaceAll(strings.ToLower(name), "_", "-"); n == "x-tenant-id" || n == "x-api-key-id" || n == "x-api-key" {
			if name != "X-Tenant-Id" && name != "X-Api-Key-Id" {
				t.Errorf("upstream got %s: %q", name, v)
			}
		}
	}
	if hu.Get("X-Tenant-Id") != e.adminWS || hu.Get("X-Api-Key-Id") != k.ID {
		t.Errorf("upstream X-Tenant-Id %q, X-Api-Key-Id %q after Connection named them", hu.Get("X-Tenant-Id"), hu.Get("X-Api-Key-Id"))
	}

	pu, _ := url.Parse(p.URL)
	if h.Get("X-Forwarded-For") != "127.0.0.1" || h.Get("X-Forwarded-Host") != pu.Host || h.Get("X-Forwarded-Proto") != "http" {
		t.Errorf("X-Forwarded-For %q, -Host %q, -Proto %q", h.Get("X-Forwarded-For"), h.Get("X-Forwarded-Host"), h.Get("X-Forwarded-Proto"))
	}

	// A bearer: passed unchanged, no tenant, no key, nothing counted.
	r = send(t, client, "GET", p.URL+"/", map[string]string{
		"Authorization": "Bearer the-upstream's-own-session", "X-Api-Key": k.Plaintext, "X-Tenant-Id": e.adminWS,
	}, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("bearer: HTTP %d", r.Status)
	}
	h = rec.last(t)
	if h.Get("Authorization") != "Bearer the-upstream's-own-session" || h.Get("X-Tenant-Id") != "" || h.Get("X-Api-Key-Id") != "" || h.Get("X-Api-Key") != "" {
		t.Errorf("bearer: upstream saw Authorization %q, X-Tenant-Id %q, X-Api-Key-Id %q, X-Api-Key %q",
			h.Get("Authorization"), h.Get("X-Tenant-Id"), h.Get("X-Api-Key-Id"), h.Get("X-Api-Key"))
	}

	// A Connection header naming the credential: ReverseProxy would drop
	// it, so the check decides without it. With a key beside it, the key
	// decides; alone, there is no credential.
	r = send(t, client, "GET", p.URL+"/", map[string]string{
		"Authorization": "Bearer junk", "Connection": "keep-alive, authorization", "X-Api-Key": k.Plaintext,
	}, nil)
	h = rec.last(t)
	if r.Status != http.StatusOK || h.Get("Authorization") != "" || h.Get("X-Api-Key-Id") != k.ID {
		t.Errorf("Connection naming Authorization, with a key: HTTP %d, upstream Authorization %q, X-Api-Key-Id %q (want the key's)",
			r.Status, h.Get("Authorization"), h.Get("X-Api-Key-Id"))
	}

	// Refusals are answered by btk; nothing reaches the upstream.
	n := rec.count()
	for name, hd := range map[string]map[string]string{
		"no credential": {"X-Tenant-Id": e.adminWS},
		"invalid key":   {"X-Api-Key": "btk_nope"},
		// Without the rule, a bearer call whose Authorization the
		// Connection header strips: an anonymous request upstream.
		"no credential once Connection is applied": {"Authorization": "Bearer junk", "Connection": "Authorization"},
	} {
		r = send(t, client, "GET", p.URL+"/", hd, nil)
		msg, code := r.message(t)
		if r.Status != http.StatusUnauthorized || code != "UNAUTHENTICATED" || (name == "invalid key") == (msg == "API key required") {
			t.Errorf("%s: HTTP %d %q (%s)", name, r.Status, msg, code)
		}
	}
	if rec.count() != n {
		t.Fatal("a refused request reached the upstream")
	}
}

func flatten(h http.Header) []string {
	var out []string
	for k, vs := range h {
		for _, v := range vs {
			out = append(out, k+": "+v)
		}
	}
	return out
}

// Bodies stream both ways: the upstream reads the start of an upload before
// the client has sent the rest, and the client reads the start of a download
// before the upstream has written the rest. Large bodies then pass without
// btk holding them in memory.
func TestProxyStreams(t *testing.T) {
	// Not parallel: it measures the process's allocations.
	e := newEnv(t)
	k := e.createKey(e.admin(), "streaming")
	const chunk = "first chunk\n"
	const large = 64 << 20
	gotFirst := make(chan struct{}, 1)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/upload-handshake":
			buf := make([]byte, len(chunk))
			if _, err := io.ReadFull(r.Body, buf); err != nil || string(buf) != chunk {
				http.Error(w, "bad first chunk", 400)
				return
			}
			gotFirst <- struct{}{} // the client sends the rest only now
			rest, _ := io.ReadAll(r.Body)
			io.WriteString(w, "got "+string(rest))
		case "/download-handshake":
			io.WriteString(w, chunk)
			w.(http.Flusher).Flush()
			select { // the client has read the first chunk before we go on
			case <-release:
			case <-time.After(10 * time.Second):
				return
			}
			io.WriteString(w, "the rest")
		case "/upload":
			n, _ := io.Copy(io.Discard, r.Body)
			io.WriteString(w, itoa(n))
		case "/download":
			w.Header().Set("Content-Length", itoa(large))
			io.Copy(w, io.LimitReader(zeros{}, large))
		}
	}))
	defer up.Close()
	p := e.proxyFor(up.URL)
	client := &http.Client{Timeout: 60 * time.Second}

	// Upload: the rest goes only after the upstream saw the first chunk.
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(chunk))
		select {
		case <-gotFirst:
			pw.Write([]byte("the rest"))
			pw.Close()
		case <-time.After(10 * time.Second):
			pw.CloseWithError(errors.New("the upstream never saw the first chunk: the upload was buffered"))
		}
	}()
	if r := send(t, client, "POST", p.URL+"/upload-handshake", map[string]string{"X-Api-Key": k.Plaintext}, pr); r.Status != 200 || r.Body != "got the rest" {
		t.Fatalf("streamed upload: HTTP %d %q", r.Status, r.Body)
	}

	// Download: read the first chunk, then let the upstream write the rest.
	req, _ := http.NewRequest("GET", p.URL+"/download-handshake", nil)
	req.Header.Set("X-Api-Key", k.Plaintext)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(chunk))
	if _, err := io.ReadFull(res.Body, buf); err != nil || string(buf) != chunk {
		t.Fatalf("first chunk of a streamed download: %q, %v", buf, err)
	}
	close(release)
	rest, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(rest) != "the rest" {
		t.Fatalf("rest of the download %q", rest)
	}

	// 64 MiB each way: the process allocates far less than the body.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r := send(t, client, "PUT", p.URL+"/upload", map[string]string{"X-Api-Key": k.Plaintext}, io.LimitReader(zeros{}, large))
	if r.Status != 200 || r.Body != itoa(large) {
		t.Fatalf("large upload: HTTP %d %q", r.Status, r.Body)
	}
	req, _ = http.NewRequest("GET", p.URL+"/download", nil)
	req.Header.Set("X-Api-Key", k.Plaintext)
	res, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil || n != large {
		t.Fatalf("large download: %d bytes, %v", n, err)
	}
	runtime.ReadMemStats(&after)
	t.Logf("allocated %d KiB while moving 128 MiB", (after.TotalAlloc-before.TotalAlloc)>>10)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > large/4 {
		t.Fatalf("moving 2×64 MiB through the proxy allocated %d MiB: a body was held in memory", alloc>>20)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// WebSocket upgrades pass through the proxy, with the key checked first.
func TestProxyWebSocket(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.createKey(e.admin(), "ws")
	tenant := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant <- r.Header.Get("X-Tenant-Id")
		echoWebSocket(w, r, "echo: ", 10*time.Second)
	}))
	defer up.Close()
	p := e.proxyFor(up.URL)
	ws := "ws" + strings.TrimPrefix(p.URL, "http") + "/socket"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, res, err := websocket.Dial(ctx, ws, nil); err == nil || res == nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("dial without a key: %v, %+v", err, res)
	}
	c, _, err := websocket.Dial(ctx, ws, &websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {k.Plaintext}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	for _, m := range []string{"one", "two"} {
		if err := c.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
		_, got, err := c.Read(ctx)
		if err != nil || string(got) != "echo: "+m {
			t.Fatalf("echo of %q: %q, %v", m, got, err)
		}
	}
	c.Close(websocket.StatusNormalClosure, "")
	if got := <-tenant; got != e.adminWS {
		t.Fatalf("upstream X-Tenant-Id %q", got)
	}
	// The proxy listener's access log (DEBUG) has the refusal and the
	// upgrade (written once the connection ends), and never the key.
	upgraded := "msg=request method=GET path=/socket status=101"
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(e.logText(), upgraded) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	logs := e.logText()
	for _, want := range []string{"msg=request method=GET path=/socket status=401", upgraded} {
		if !strings.Contains(logs, want) {
			t.Errorf("access log lacks %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, k.Plaintext) {
		t.Error("the access log holds the key")
	}
}

// Upstream unreachable: 502 with a GraphQL-shaped body, code BAD_GATEWAY.
func TestProxyUpstreamDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.createKey(e.admin(), "down")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	p := e.proxyFor("http://" + addr)
	// The key pasted into the path too: the WARN line names the path, redacted.
	r := send(t, p.Client(), "GET", p.URL+"/foo/"+k.Plaintext, map[string]string{"X-Api-Key": k.Plaintext}, nil)
	msg, code := r.message(t)
	if r.Status != http.StatusBadGateway || code != "BAD_GATEWAY" || msg == "" || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("HTTP %d %q (%s), Content-Type %q", r.Status, msg, code, r.Header.Get("Content-Type"))
	}
	if strings.Contains(r.Body, addr) {
		t.Fatalf("the body tells the client the upstream's address: %s", r.Body)
	}
	assertLoggedRedacted(t, e.logText(), `level=WARN msg="upstream unreachable"`, "/foo/", k.Plaintext)
}

// assertLoggedRedacted checks that logs has a line with want naming the
// path prefix+key with the key cut to its display prefix, and holds the
// key's secret part nowhere.
func assertLoggedRedacted(t *testing.T, logs, want, prefix, key string) {
	t.Helper()
	if strings.Contains(logs, key[btk.DisplayPrefixLen:]) {
		t.Fatalf("the log holds the key:\n%s", logs)
	}
	path := "path=" + prefix + key[:btk.DisplayPrefixLen] + "…"
	for l := range strings.SplitSeq(logs, "\n") {
		if strings.Contains(l, want) && strings.Contains(l, path) {
			return
		}
	}
	t.Fatalf("no line with %s and %s:\n%s", want, path, logs)
}

// getWithKey sends GET url with an API key, from any goroutine: a request
// that fails is an answer of status 0 with the error as its body.
func getWithKey(client *http.Client, url, key string) authResponse {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("X-Api-Key", key)
	res, err := client.Do(req)
	if err != nil {
		return authResponse{Body: err.Error()}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return authResponse{Status: res.StatusCode, Body: string(b)}
}

// docs/design.md#key-lifecycle: a revocation takes effect on the very next proxied request,
// while other requests with the key are still in flight.
func TestProxyRevokeWhileInFlight(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	k := e.createKey(owner, "revoked-in-flight")
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
		}
		io.WriteString(w, "done")
	}))
	defer up.Close()
	p := e.proxyFor(up.URL)
	client := &http.Client{Timeout: 20 * time.Second}

	const inFlight = 4
	results := make(chan authResponse, inFlight)
	for range inFlight {
		go func() {
			results <- getWithKey(client, p.URL+"/slow", k.Plaintext)
		}()
	}
	for range inFlight {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the in-flight requests did not reach the upstream")
		}
	}
	e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": k.ID}, &struct{}{})
	r := send(t, client, "GET", p.URL+"/fast", map[string]string{"X-Api-Key": k.Plaintext}, nil)
	if msg, _ := r.message(t); r.Status != http.StatusUnauthorized || msg != "API key is revoked or expired" {
		t.Fatalf("the request right after the revocation: HTTP %d %q", r.Status, msg)
	}
	close(release)
	for range inFlight {
		if r := <-results; r.Status != http.StatusOK || r.Body != "done" {
			t.Fatalf("an in-flight request (accepted before the revocation): HTTP %d %q", r.Status, r.Body)
		}
	}
}

// An upstream with a base path (--upstream http://host/api/) gets /x as
// /api/x; a path that climbs above the root would leave the base path
// (/../admin reached it as /api/../admin, which servers read as /admin). It
// is refused (400) whatever the credential, in every spelling, and never
// reaches the upstream (docs/gateway.md#btks-reverse-proxy).
func TestProxyKeepsTheUpstreamBasePath(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	k := e.createKey(owner, "base-path")
	var mu sync.Mutex
	var got []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.RequestURI)
		mu.Unlock()
		io.WriteString(w, "upstream says hi")
	}))
	defer up.Close()
	p := e.proxyFor(up.URL + "/api/")
	for _, path := range []string{"/../admin", "/%2e%2e/admin", "/x/..%2f..%2fadmin", "/x/..;/..;/admin", "/%252e%252e/admin%25"} {
		for _, h := range []map[string]string{{"X-Api-Key": k.Plaintext}, {"Authorization": "Bearer whatever"}} {
			r := send(t, p.Client(), "GET", p.URL+path, h, nil)
			if msg, code := r.message(t); r.Status != http.StatusBadRequest || code != "BAD_USER_INPUT" {
				t.Errorf("GET %s with %v: HTTP %d %q (%s), want 400", path, h, r.Status, msg, code)
			}
		}
	}
	if r := send(t, p.Client(), "GET", p.URL+"/orders/../7", map[string]string{"X-Api-Key": k.Plaintext}, nil); r.Status != http.StatusOK {
		t.Errorf("GET /orders/../7: HTTP %d %s", r.Status, r.Body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "/api/orders/../7" {
		t.Errorf("the upstream got %q, want only /api/orders/../7", got)
	}
}

// An upgrade to cleartext HTTP/2 is not passed on: an upstream that took it
// would answer 101 and receive, through the proxy's tunnel, HTTP/2 requests
// to any path that neither the key check nor the rules see. The request is
// forwarded as HTTP/1.1 without Upgrade and HTTP2-Settings.
func TestProxyDropsH2CUpgrade(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.createKey(e.admin(), "h2c")
	seen := make(chan http.Header, 1)
	// An upstream that takes any h2c upgrade, as a lenient one might.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		if strings.EqualFold(r.Header.Get("Upgrade"), "h2c") {
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "h2c")
			w.WriteHeader(http.StatusSwitchingProtocols)
			return
		}
		io.WriteString(w, "http/1.1")
	}))
	defer up.Close()
	p := e.proxyFor(up.URL)
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(p.URL, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /public HTTP/1.1\r\nHost: x\r\nX-Api-Key: %s\r\nConnection: Upgrade, HTTP2-Settings\r\n"+
		"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n", k.Plaintext)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || string(body) != "http/1.1" {
		t.Fatalf("HTTP %d %q; want the HTTP/1.1 answer", res.StatusCode, body)
	}
	h := <-seen
	if h.Get("Upgrade") != "" || h.Get("Http2-Settings") != "" || h.Get("X-Tenant-Id") != e.adminWS {
		t.Fatalf("upstream got Upgrade %q, HTTP2-Settings %q, X-Tenant-Id %q", h.Get("Upgrade"), h.Get("Http2-Settings"), h.Get("X-Tenant-Id"))
	}
}
