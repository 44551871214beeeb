package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/testproc"
)

// btk serve --proxy-addr --upstream (docs/gateway.md#btks-reverse-proxy): the second listener forwards
// accepted requests, and SIGTERM drains both listeners together: they stop
// accepting at once, a proxied request in flight still completes, and the
// process exits 0.
func TestServeProxyGracefulShutdown(t *testing.T) {
	parallelUnlessShort(t, "starts a btk serve process")
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			select {
			case <-release:
			case <-time.After(procWait):
			}
		}
		io.WriteString(w, "tenant "+r.Header.Get("X-Tenant-Id")+" key "+r.Header.Get("X-Api-Key"))
	}))
	defer up.Close()

	proxyAddr := testproc.FreeAddr(t)
	p := startServe(t, filepath.Join(t.TempDir(), "btk.db"), "--proxy-addr", proxyAddr, "--upstream", up.URL)
	k := p.createKey(p.login(), "proxied")
	client := &http.Client{Timeout: procWait}
	get := func(path string) (int, string, error) {
		req, _ := http.NewRequest("GET", "http://"+proxyAddr+path, nil)
		req.Header.Set("X-Api-Key", k.Plaintext)
		res, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return res.StatusCode, string(b), err
	}
	// The upstream sees a tenant and no key.
	if status, body, err := get("/fast"); err != nil || status != 200 || !strings.HasPrefix(body, "tenant ") ||
		strings.HasPrefix(body, "tenant  ") || !strings.HasSuffix(body, " key ") {
		t.Fatalf("through the proxy: HTTP %d %q %v", status, body, err)
	}

	type result struct {
		status int
		err    error
	}
	slow := make(chan result, 1)
	go func() {
		status, _, err := get("/slow")
		slow <- result{status, err}
	}()
	select {
	case <-entered:
	case <-time.After(procWait):
		t.Fatal("the slow request did not reach the upstream")
	}
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Both listeners close at once, while the request is still in flight.
	for _, addr := range []string{proxyAddr, strings.TrimPrefix(p.url, "http://")} {
		deadline := time.Now().Add(procWait)
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				break
			}
			c.Close()
			if time.Now().After(deadline) {
				t.Fatalf("%s still accepts connections after SIGTERM", addr)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	select {
	case <-p.Exited():
		t.Fatalf("btk serve exited with a request in flight:\n%s", p.Out.String())
	default:
	}
	close(release)
	if r := <-slow; r.err != nil || r.status != 200 {
		t.Fatalf("the request in flight at SIGTERM: HTTP %d, %v", r.status, r.err)
	}
	select {
	case <-p.Exited():
		if p.Err() != nil {
			t.Fatalf("btk serve: %v\n%s", p.Err(), p.Out.String())
		}
	case <-time.After(procWait):
		t.Fatalf("btk serve did not exit:\n%s", p.Out.String())
	}
}

// --proxy-addr and --upstream go together, and the upstream is a URL.
func TestServeProxyFlags(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "btk.db")
	for _, args := range [][]string{
		{"--proxy-addr", "127.0.0.1:0"},
		{"--upstream", "http://127.0.0.1:9"},
		{"--proxy-addr", "127.0.0.1:0", "--upstream", "127.0.0.1:9000"},
	} {
		var out bytes.Buffer
		code := run(context.Background(), append([]string{"serve", "--db", db}, args...), strings.NewReader(""), &out, &out)
		if code == 0 || !strings.Contains(out.String(), "--upstream") {
			t.Errorf("%v: exit %d, %q", args, code, out.String())
		}
	}
}

// A request still in flight when the drain's 15 s are over is cut, and the
// stop is still a clean one: exit 0 with a warning. It printed "btk:
// interrupted" and exited 130, which a supervisor takes for a failed stop.
func TestServeStopsCleanlyAfterTheDrainDeadline(t *testing.T) {
	parallelUnlessShort(t, "starts a btk serve process and waits out its 15 s drain")
	entered := make(chan struct{}, 1)
	done := make(chan struct{})
	defer close(done)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select { // longer than the drain
		case <-done:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	proxyAddr := testproc.FreeAddr(t)
	p := startServe(t, filepath.Join(t.TempDir(), "btk.db"), "--proxy-addr", proxyAddr, "--upstream", up.URL)
	k := p.createKey(p.login(), "long")
	go func() {
		req, _ := http.NewRequest("GET", "http://"+proxyAddr+"/download", nil)
		req.Header.Set("X-Api-Key", k.Plaintext)
		if res, err := (&http.Client{Timeout: procWait}).Do(req); err == nil {
			res.Body.Close()
		}
	}()
	select {
	case <-entered:
	case <-time.After(procWait):
		t.Fatal("the request did not reach the upstream")
	}
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
		if p.Err() != nil || strings.Contains(p.Out.String(), "interrupted") {
			t.Fatalf("btk serve after the drain deadline: %v\n%s", p.Err(), p.Out.String())
		}
		if !strings.Contains(p.Out.String(), "drain deadline passed") {
			t.Errorf("no warning that requests were cut:\n%s", p.Out.String())
		}
	case <-time.After(procWait):
		t.Fatalf("btk serve did not exit:\n%s", p.Out.String())
	}
}
