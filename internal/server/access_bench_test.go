package server_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/server"
)

// benchRules is a rules file of n rules in the shapes operators write; the
// request's rule is the last one, so a scan would try every rule first.
func benchRules(n int) string {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range n - 1 {
		fmt.Fprintf(&b, "  - path: /svc%d/items/*/**\n    methods: [GET]\n    scopes: [svc%d:read]\n", i, i)
	}
	b.WriteString("  - path: /orders/*/lines/**\n    scopes: [orders:read]\n")
	return b.String()
}

// BenchmarkAuthorizeRules is /v1/authorize in process (the handler, no
// network) with a scoped key under a 10-rule and a 1,000-rule file, beside
// /healthz and an unscoped key: docs/access.md's budget is 1,000 rules at
// most 1.1x 10 rules. Reports cpu-ns/op.
//
//	go test ./internal/server -run '^$' -bench BenchmarkAuthorizeRules -benchtime 200000x -count 3
func BenchmarkAuthorizeRules(b *testing.B) {
	e, owner := newAdminEnv(b)
	h := e.srv.Config.Handler
	keys := 0
	run := func(name, path, scopes string, header map[string]string) {
		req := httptest.NewRequest("GET", path, nil)
		req.RemoteAddr = "127.0.0.1:40000"
		for k, v := range header {
			req.Header.Set(k, v)
		}
		if scopes != "-" { // a key of its own: each run stays far below its limits
			keys++
			k := e.createKeyWith(owner, fmt.Sprintf("bench-%d", keys), `scopes:[`+scopes+`],rateLimitPerMinute:1000000,rateLimitPerDay:100000000`)
			req.Header.Set("X-Api-Key", k.Plaintext)
		}
		b.Run(name, measure(func(b *testing.B) {
			for b.Loop() {
				r := req.Clone(req.Context())
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("HTTP %d %s", w.Code, w.Body)
				}
			}
		}))
	}
	fwd := map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/orders/42/lines/7?x=1"}
	run("healthz", "/healthz", "-", nil)
	run("authorize/unscoped/no-rules", "/v1/authorize", "", nil)
	for _, n := range []int{10, 1000} {
		e.svc.SetAccessRules(mustRules(b, benchRules(n)))
		run(fmt.Sprintf("authorize/scoped/rules=%d", n), "/v1/authorize", `"orders:read"`, fwd)
	}
}

// BenchmarkAuthorizeWire is BenchmarkAuthorizeRules over loopback TCP
// (net/http's server, as btk serve runs it with --log-level warn, and a
// keep-alive client in one process), for profiles of the whole server side
// of a request:
//
//	go test ./internal/server -run '^$' -bench 'BenchmarkAuthorizeWire/authorize' -benchtime 100000x \
//	  -cpuprofile cpu.out && go tool pprof -top -focus 'http.\(\*conn\).serve' cpu.out
//
// and for instruction counts, which the load of other processes does not
// change (the client's share is the same for every build of the server):
//
//	go test -c -o wire.test ./internal/server && GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind \
//	  ./wire.test -test.run '^$' -test.bench 'AuthorizeWire/authorize$' -test.benchtime 5000x
func BenchmarkAuthorizeWire(b *testing.B) {
	e, owner := newAdminEnv(b)
	e.svc.SetAccessRules(mustRules(b, benchRules(10)))
	k := e.createKeyWith(owner, "wire", `scopes:["orders:read"],rateLimitPerMinute:1000000,rateLimitPerDay:100000000`)
	log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv := httptest.NewServer(server.New(e.svc, e.db, log))
	b.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	run := func(name, path string, header map[string]string) {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		b.Run(name, measure(func(b *testing.B) {
			for b.Loop() {
				res, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					b.Fatalf("HTTP %d", res.StatusCode)
				}
			}
		}))
	}
	run("healthz", "/healthz", nil)
	run("authorize", "/v1/authorize", map[string]string{"X-Api-Key": k.Plaintext, "X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/orders/42/lines/7"})

	// raw/…: the request bytes wrk sends (bench/hotpath.sh; graphql: its
	// tenantInfo query), written on one
	// keep-alive connection and the answer read into a fixed buffer, so that
	// nearly everything measured is the server's; served as btk serve
	// serves (server.Serve, its timeouts). The figures of bench/README.md ("Where the scoped
	// authorize's extra µs go"):
	//
	//	go test -c -o wire.test ./internal/server && for n in 2000 4000; do
	//	  GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file=cg.$n \
	//	    ./wire.test -test.run '^$' -test.bench 'AuthorizeWire/raw/authorize$' -test.benchtime ${n}x; done
	//	# instructions per request: (cg.4000's total - cg.2000's) / 2000
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	raw := &http.Server{
		Handler:           server.New(e.svc, e.db, log),
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
	}
	g := server.NewConnGuard(1024)
	g.PerAddress(server.AddressShare(1024), nil) // as btk serve's: requests in flight counted per address
	go func() { _ = server.ServeGuarded(raw, ln, nil, g) }()
	b.Cleanup(func() { _ = raw.Close() })
	host := ln.Addr().String()
	runRaw := func(name, request string) {
		b.Run("raw/"+name, measure(func(b *testing.B) {
			c, err := net.Dial("tcp", host)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			req, buf := []byte(request), make([]byte, 4096)
			var last answerShape
			for b.Loop() {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if err := readAnswer(c, buf, &last); err != nil {
					b.Fatal(err)
				}
			}
		}))
	}
	runRaw("healthz", "GET /healthz HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	runRaw("authorize", "GET /v1/authorize HTTP/1.1\r\nHost: "+host+"\r\nX-Api-Key: "+k.Plaintext+
		"\r\nX-Forwarded-Method: GET\r\nX-Forwarded-Uri: /orders/42/lines/7\r\n\r\n")
	body := `{"query":"{tenantInfo{id name}}"}`
	runRaw("graphql", "POST /graphql HTTP/1.1\r\nHost: "+host+"\r\nContent-Type: application/json\r\nX-Api-Key: "+k.Plaintext+
		"\r\nX-Forwarded-Method: GET\r\nX-Forwarded-Uri: /orders/42/lines/7\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
}

// answerShape is where the previous answer's header ended and how long its
// body was: the same request is answered in the same shape, mostly.
type answerShape struct{ head, body int }

// readAnswer reads one 200 answer with a Content-Length from c into buf.
// An answer of the previous one's shape (last) is recognised without
// searching it, so that the client's work does not grow with the headers.
func readAnswer(c net.Conn, buf []byte, last *answerShape) error {
	n := 0
	for {
		m, err := c.Read(buf[n:])
		if err != nil {
			return err
		}
		n += m
		if !bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 200 ")) {
			if n < 13 {
				continue
			}
			return fmt.Errorf("answer %q", buf[:n])
		}
		if h := last.head; h > 0 && n >= h && string(buf[h-4:h]) == "\r\n\r\n" {
			if n >= h+last.body {
				return nil
			}
			continue
		}
		head, _, ok := bytes.Cut(buf[:n], []byte("\r\n\r\n"))
		if !ok {
			if n == len(buf) {
				return fmt.Errorf("answer header larger than %d bytes", len(buf))
			}
			continue
		}
		_, v, ok := bytes.Cut(head, []byte("\r\nContent-Length: "))
		if !ok {
			return fmt.Errorf("no Content-Length in %q", head)
		}
		v, _, _ = bytes.Cut(v, []byte("\r\n"))
		size, err := strconv.Atoi(string(v))
		if err != nil {
			return err
		}
		*last = answerShape{len(head) + 4, size}
		if n >= len(head)+4+size {
			return nil
		}
	}
}
