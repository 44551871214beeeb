package server_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/graphql"
	"github.com/btk-project/btk/internal/server"
)

// h2From is an HTTP/2 client over TLS dialing from 127.0.0.n.
func h2From(t testing.TB, n byte, pool *x509.CertPool) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, n)}, Timeout: 5 * time.Second}
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// typename posts {__typename} to /graphql over HTTP/2 and returns the
// status and body.
func typename(c *http.Client, url string) (int, string, error) {
	res, err := c.Post(url+"/graphql", "application/json", strings.NewReader(`{"query":"{__typename}"}`))
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.ProtoMajor != 2 {
		return 0, "", fmt.Errorf("HTTP/%d", res.ProtoMajor)
	}
	return res.StatusCode, string(b), nil
}

// heapInUse is the heap in use after collections (pooled buffers dropped).
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// stallEnv carries a stallPlan to the test binary run again as the
// attacking client (TestHTTP2StallingClient), so that the heap measured is
// the server's alone: Go's client holds 512 KiB per request body it sends.
const stallEnv = "BTK_TEST_STALL_PLAN"

// stallPlan is what the attacking client does: from 127.0.0.1, streams POST
// /graphql over at most conns HTTP/2 connections, each sending sent bytes
// of its body and then nothing until its stdin closes.
type stallPlan struct {
	URL, CAFile          string
	Streams, Sent, Conns int
}

// stallReport is what the attacking client saw once every body was sent
// as far as it goes.
type stallReport struct {
	Refused, Other, Failed, Pending int    // 503, another status, an error, no answer yet
	RetryAfter, Code                string // of a 503
}

// stall is a server (the real handler over TLS, with a connection guard
// of the given share per address) and a client process of its own that
// holds stalled GraphQL requests from 127.0.0.1 (TestHTTP2StallingClient),
// so that the heap measured is the server's alone: Go's client holds 512
// KiB per request body it sends.
type stall struct {
	t      *testing.T
	url    string
	pool   *x509.CertPool
	report stallReport
	grew   int64 // the server's heap in use, from before the client started
	stdin  io.Closer
	exited chan error
	ctx    context.Context
}

// startStall serves a new env's handler with a share of share, has the
// client send streams requests of sent bytes each over 4 connections, and
// returns once the client has reported.
func startStall(t *testing.T, share, streams, sent int) *stall {
	e := newEnv(t)
	cert, pool, caFile := selfSignedFile(t)
	g := server.NewConnGuard(1000)
	g.PerAddress(share, nil)
	log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	addr, _ := serveTest(t, server.New(e.svc, e.db, log), cert, g)
	s := &stall{t: t, url: "https://" + addr, pool: pool, exited: make(chan error, 1)}
	if code, body, err := typename(h2From(t, 2, pool), s.url); err != nil || code != http.StatusOK { // TLS and HTTP/2 set up
		t.Fatalf("before the stalled requests: HTTP %d %s %v", code, body, err)
	}
	before := heapInUse()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	s.ctx = ctx
	plan, _ := json.Marshal(stallPlan{URL: s.url, CAFile: caFile, Streams: streams, Sent: sent, Conns: 4})
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHTTP2StallingClient$")
	cmd.Env = append(os.Environ(), stallEnv+"="+string(plan))
	cmd.Stderr = os.Stderr
	s.stdin, _ = cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.stdin.Close() }) // before the server closes (cleanups run last first)
	reports := make(chan stallReport, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "STALL "); ok {
				var r stallReport
				_ = json.Unmarshal([]byte(line), &r)
				reports <- r
			}
		}
		s.exited <- cmd.Wait()
	}()
	select {
	case s.report = <-reports:
	case err := <-s.exited:
		t.Fatalf("the attacking client exited first: %v", err)
	case <-ctx.Done():
		t.Fatal("the attacking client never reported")
	}
	s.grew = heapInUse() - before
	t.Logf("%+v; the server's heap in use grew by %.1f MB", s.report, float64(s.grew)/(1<<20))
	return s
}

// answers fails the test unless {__typename} from 127.0.0.n is answered
// 200 within wait (0: at once; or once what it waits for is given back).
func (s *stall) answers(n byte, wait time.Duration) {
	s.t.Helper()
	c := h2From(s.t, n, s.pool)
	for deadline := time.Now().Add(wait); ; time.Sleep(50 * time.Millisecond) {
		code, body, err := typename(c, s.url)
		if err == nil && code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("{__typename} from 127.0.0.%d beside the stalled requests: HTTP %d %s %v", n, code, body, err)
		}
	}
}

// end ends the stalled requests.
func (s *stall) end() {
	s.t.Helper()
	s.stdin.Close()
	select {
	case err := <-s.exited:
		if err != nil {
			s.t.Fatalf("the attacking client: %v", err)
		}
	case <-s.ctx.Done():
		s.t.Fatal("the attacking client did not end")
	}
}

// Over HTTP/2 one client address holds no more requests in flight than its
// share of the connections, which is what it can hold over HTTP/1.1
// (docs/security.md#what-a-client-can-make-the-server-hold): one connection
// carries 100 requests, so an address with its share of connections had
// 100 times its share of requests, each holding the GraphQL body sent so
// far (30,000 POST /graphql that sent 60 KB each and stopped held 2.6 GB
// of one server from one address). Here a share of 32: of 400 such
// requests over 4 connections, those past 32 are answered 503 UNAVAILABLE
// with Retry-After: 1 at once, the server's heap grows by a few MB (400
// held 37 MB), another address is answered, and the share is given back
// when the stalled requests end.
func TestHTTP2StalledBodiesBoundedPerAddress(t *testing.T) {
	const share, streams = 32, 400
	s := startStall(t, share, streams, 60_000)
	r := s.report
	if r.Pending > share || r.Refused != streams-r.Pending || r.Other+r.Failed > 0 {
		t.Errorf("of %d stalled requests from one address, %d held, %d answered 503, %d otherwise, %d failed; want its share of %d held and the others 503 at once",
			streams, r.Pending, r.Refused, r.Other, r.Failed, share)
	}
	if r.RetryAfter != "1" || r.Code != "UNAVAILABLE" {
		t.Errorf("a request past the share: Retry-After %q, code %q", r.RetryAfter, r.Code)
	}
	if limit := int64(8 << 20); s.grew > limit {
		t.Errorf("the server's heap in use grew by %d bytes for %d stalled requests, want at most %d", s.grew, streams, limit)
	}
	s.answers(2, 0)
	s.end()
	s.answers(1, 10*time.Second)
}

// The GraphQL bodies being read hold at most graphql.MaxBodyBytesHeld bytes
// past the first graphql.FreeBodyBytes of each, counted as they arrive
// (docs/security.md#what-a-client-can-make-the-server-hold): a request
// whose body would pass it is answered 503 at once. Here with a share of
// 1,000, 500 requests that sent 60 KB each and stopped: the bodies held
// keep within the bytes, the others are answered 503, and a real operation
// (under FreeBodyBytes) from the same address is still answered.
func TestGraphQLBodyBytesBounded(t *testing.T) {
	const streams, sent = 500, 60_000
	s := startStall(t, 1000, streams, sent)
	r := s.report
	if r.Other+r.Failed > 0 || r.Refused == 0 || r.Pending*(sent-graphql.FreeBodyBytes) > graphql.MaxBodyBytesHeld {
		t.Errorf("of %d stalled requests, %d held, %d answered 503, %d otherwise, %d failed; want at most %d bytes held past the first %d of each, the others 503 at once",
			streams, r.Pending, r.Refused, r.Other, r.Failed, graphql.MaxBodyBytesHeld, graphql.FreeBodyBytes)
	}
	if limit := int64(graphql.MaxBodyBytesHeld + r.Pending*(64<<10)); s.grew > limit {
		t.Errorf("the server's heap in use grew by %d bytes for %d stalled requests, want at most %d", s.grew, streams, limit)
	}
	s.answers(1, 0)
	s.end()
}

// TestHTTP2StallingClient is the attacking client of
// TestHTTP2StalledBodiesBoundedPerAddress, in a process of its own.
func TestHTTP2StallingClient(t *testing.T) {
	var plan stallPlan
	if err := json.Unmarshal([]byte(os.Getenv(stallEnv)), &plan); err != nil {
		t.Skip("the client of TestHTTP2StalledBodiesBoundedPerAddress, run by it")
	}
	ca, err := os.ReadFile(plan.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	c := h2From(t, 1, pool)
	c.Timeout = 0                                              // the requests' contexts bound them
	c.Transport.(*http.Transport).MaxConnsPerHost = plan.Conns // within the address's share of connections
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	stop := make(chan struct{})
	prefix := []byte(`{"query":"{__typename}","variables":{"x":"` + strings.Repeat("a", plan.Sent))
	var refused, other, failed, wrote atomic.Int64
	var mu sync.Mutex
	var report stallReport
	var wg sync.WaitGroup
	for range plan.Streams {
		pr, pw := io.Pipe()
		go func() {
			_, _ = pw.Write(prefix) // returns once sent, or once the request is answered
			wrote.Add(1)
			<-stop
			pw.CloseWithError(io.ErrUnexpectedEOF)
		}()
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, plan.URL+"/graphql", pr)
			req.Header.Set("Content-Type", "application/json")
			res, err := c.Do(req)
			select {
			case <-stop:
				return // a held request, ended
			default:
			}
			if err != nil {
				failed.Add(1)
				return
			}
			var body struct {
				Errors []struct{ Extensions struct{ Code string } }
			}
			_ = json.NewDecoder(res.Body).Decode(&body)
			res.Body.Close()
			if res.StatusCode != http.StatusServiceUnavailable {
				other.Add(1)
				return
			}
			refused.Add(1)
			mu.Lock()
			if len(body.Errors) > 0 {
				report.RetryAfter, report.Code = res.Header.Get("Retry-After"), body.Errors[0].Extensions.Code
			}
			mu.Unlock()
		})
	}
	// Every body is sent as far as it goes (60 KB fit the server's window)
	// or answered; what the server answers at once, it has answered.
	for int(wrote.Load()) < plan.Streams && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	report.Refused, report.Other, report.Failed = int(refused.Load()), int(other.Load()), int(failed.Load())
	report.Pending = plan.Streams - report.Refused - report.Other - report.Failed
	line, _ := json.Marshal(report)
	mu.Unlock()
	fmt.Println("STALL " + string(line))

	_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes it
	close(stop)
	wg.Wait()
}

// What an HTTP/2 client may send ahead of a handler that has not read its
// body is server.BodyWindow (docs/security.md#what-a-client-can-make-the-server-hold),
// not Go's 1 MiB: the server holds it until the handler reads or ends. Here
// a handler that does not read; a client sends a 1 MiB body, and the
// server reads about BodyWindow of it from the connection.
func TestHTTP2BodyWindowBounded(t *testing.T) {
	cert, pool := selfSigned(t)
	release := make(chan struct{})
	var in atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.Add(1)
		select {
		case <-release:
		case <-time.After(30 * time.Second):
		}
	})
	addr, read := serveTest(t, h, cert, server.NewConnGuard(100))
	c := h2From(t, 1, pool)
	done := make(chan error, 1)
	go func() {
		res, err := c.Post("https://"+addr+"/upload", "application/octet-stream", strings.NewReader(strings.Repeat("x", 1<<20)))
		if err == nil {
			res.Body.Close()
		}
		done <- err
	}()
	// Until the client has sent what the window lets it send: what the
	// server read stays the same for half a second.
	last := int64(-1)
	for deadline := time.Now().Add(10 * time.Second); in.Load() == 0 || read.Load() != last; time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server kept reading: %d bytes", read.Load())
		}
		last = read.Load()
	}
	if n := read.Load(); n > server.BodyWindow+32<<10 {
		t.Errorf("the server read %d bytes of a body its handler did not read, want about %d", n, server.BodyWindow)
	}
	close(release)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the request did not end")
	}
}
