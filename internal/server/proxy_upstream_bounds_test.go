package server_test

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/server"
)

// The proxy's upstream connections and one address's proxied requests in
// flight are bounded: over HTTP/2 one client connection carries many
// requests, each of which opened an upstream connection of its own, until
// the process ran out of descriptors and every listener stopped accepting
// (docs/security.md#what-a-client-can-make-the-server-hold). Here, over
// HTTP/2, 4 upstream connections in all and a share of 3 per address: a
// fourth request in flight from one address is answered 503 at once;
// requests from many addresses share the 4 connections, waiting for one,
// and are all answered.
func TestProxyUpstreamBounded(t *testing.T) {
	e := newEnv(t)
	k := e.createKey(e.admin(), "streams")
	release := make(chan struct{})
	var open, most, inHandler atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inHandler.Add(1)
		defer inHandler.Add(-1)
		select {
		case <-release:
		case <-time.After(20 * time.Second):
		}
		w.Write([]byte("ok"))
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			n := open.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	g := server.NewConnGuard(100)
	g.PerAddress(3, nil)
	cert, pool := selfSigned(t)
	log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	addr, _ := serveTest(t, server.New(e.svc, e.db, log, server.WithUpstreamConns(4)).Proxy(u), cert, g)
	clients := map[int]*http.Client{}
	for from := 2; from <= 5; from++ {
		clients[from] = h2From(t, byte(from), pool)
	}

	get := func(from int) int {
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/stream", nil)
		req.Header.Set("X-Api-Key", k.Plaintext)
		res, err := clients[from].Do(req)
		if err != nil {
			t.Errorf("from 127.0.0.%d: %v", from, err)
			return 0
		}
		res.Body.Close()
		if res.ProtoMajor != 2 {
			t.Errorf("from 127.0.0.%d: HTTP/%d", from, res.ProtoMajor)
		}
		return res.StatusCode
	}
	waitInHandler := func(n int64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); inHandler.Load() < n; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d requests reached the upstream, want %d", inHandler.Load(), n)
			}
		}
	}

	var wg sync.WaitGroup
	codes := make(chan int, 16)
	for range 3 { // one address's share, in flight
		wg.Go(func() { codes <- get(2) })
	}
	waitInHandler(3)
	if code := get(2); code != http.StatusServiceUnavailable {
		t.Fatalf("a fourth request in flight from one address: HTTP %d, want 503", code)
	}
	for from := 3; from <= 5; from++ { // 9 more from other addresses: 4 connections in all
		for range 3 {
			wg.Go(func() { codes <- get(from) })
		}
	}
	waitInHandler(4)
	time.Sleep(200 * time.Millisecond) // what more could connect, would have
	if n := most.Load(); n > 4 {
		t.Fatalf("%d upstream connections at once, want at most 4", n)
	}
	close(release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("a request within the bounds: HTTP %d, want 200 once a connection was free", c)
		}
	}
	if n := most.Load(); n > 4 {
		t.Fatalf("%d upstream connections at once, want at most 4", n)
	}
}
