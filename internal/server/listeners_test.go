package server_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/server"
)

// serveTest serves h through server.ServeGuarded on a loopback listener
// whose bytes read are counted.
func serveTest(t *testing.T, h http.Handler, cert *server.Certificate, g *server.ConnGuard) (addr string, read *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	read = &atomic.Int64{}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go server.ServeGuarded(srv, countingListener{ln, read}, cert, g)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), read
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.n}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd: ", err)
	}
	return len(ents)
}

// Connections are bounded by the descriptor limit (docs/security.md#what-a-client-can-make-the-server-hold):
// idle keep-alive connections used up the descriptors
// and active clients timed out. With a guard of 40 connections, 300 idle
// ones cost at most 40 server descriptors (the oldest idle are closed), and
// an active client is still served.
func TestIdleConnectionsNeverStarveActiveOnes(t *testing.T) {
	const limit, idle = 40, 300
	g := server.NewConnGuard(limit)
	addr, _ := serveTest(t, okHandler, nil, g)
	before := openFDs(t)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range idle {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		// Read the answer, or the close of a connection refused at the
		// limit; the connection then stays open on our side, idle.
		br := bufio.NewReader(c)
		if res, err := http.ReadResponse(br, nil); err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	}
	if n := g.Open(); n > limit {
		t.Fatalf("%d connections open, limit %d", n, limit)
	}
	// The active client gets its answer.
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("an active client after %d idle connections: %v", idle, err)
	}
	res.Body.Close()
	// Our side of the closed connections is closed too: what is left open
	// in this process is at most the guard's limit on each side.
	open := conns[:0]
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == io.EOF || (err != nil && !isTimeout(err)) {
			c.Close()
			continue
		}
		open = append(open, c)
	}
	conns = open
	if grew := openFDs(t) - before; grew > 2*limit+8 {
		t.Fatalf("%d descriptors held for %d idle connections (limit %d)", grew, idle, limit)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// The header block is bounded (docs/security.md#what-a-client-can-make-the-server-hold):
// a header block near Go's 1 MB default took 21 ms of CPU
// to refuse. 70,000 headers are refused with 431 after reading at most
// about MaxHeaderBytes.
func TestHugeHeaderBlockRefusedCheaply(t *testing.T) {
	addr, read := serveTest(t, okHandler, nil, server.NewConnGuard(100))
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	var b strings.Builder
	b.WriteString("GET /healthz HTTP/1.1\r\nHost: x\r\n")
	for i := range 70_000 {
		fmt.Fprintf(&b, "X-H%d: v\r\n", i)
	}
	b.WriteString("\r\n")
	go c.Write([]byte(b.String())) // the server stops reading: do not wait for it
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to %d bytes of headers: %v", b.Len(), err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("%d bytes of headers: HTTP %d, want 431", b.Len(), res.StatusCode)
	}
	if n := read.Load(); n > 2*server.MaxHeaderBytes {
		t.Fatalf("the server read %d bytes before refusing", n)
	}
}

// selfSigned writes a certificate and key for 127.0.0.1 and loads them.
func selfSigned(t *testing.T) (*server.Certificate, *x509.CertPool) {
	t.Helper()
	cert, pool, _ := selfSignedFile(t)
	return cert, pool
}

// selfSignedFile is selfSigned and the certificate's PEM file (for another
// process to trust).
func selfSignedFile(t *testing.T) (*server.Certificate, *x509.CertPool, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "btk test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	cert, err := server.LoadCertificate(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	leaf, _ := x509.ParseCertificate(der)
	pool.AddCert(leaf)
	return cert, pool, certFile
}

// TLS is AEAD only, with HSTS (docs/security.md#what-a-client-can-make-the-server-hold):
// TLS 1.2 offered two CBC/SHA-1 suites and no HSTS. A
// client offering only CBC suites cannot connect; answers over TLS carry
// Strict-Transport-Security.
func TestTLSIsAEADOnlyWithHSTS(t *testing.T) {
	cert, pool := selfSigned(t)
	addr, _ := serveTest(t, okHandler, cert, server.NewConnGuard(100))
	cbc := &tls.Config{RootCAs: pool, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256,
	}}
	d := &net.Dialer{Timeout: 5 * time.Second}
	if c, err := tls.DialWithDialer(d, "tcp", addr, cbc); err == nil {
		c.Close()
		t.Fatalf("a client offering only CBC suites connected with %s", tls.CipherSuiteName(c.ConnectionState().CipherSuite))
	}
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, MaxVersion: v, MinVersion: v},
		}}
		res, err := cl.Get("https://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("TLS %x: %v", v, err)
		}
		res.Body.Close()
		if res.TLS == nil || !strings.HasPrefix(res.Header.Get("Strict-Transport-Security"), "max-age=") {
			t.Fatalf("TLS %x: no HSTS (%q)", v, res.Header.Get("Strict-Transport-Security"))
		}
	}
}

// Attacker pass: one HTTP/2 connection carried up to 250 requests at once
// (Go's default); now at most MaxStreamsPerConn.
func TestHTTP2StreamsPerConnectionBounded(t *testing.T) {
	cert, pool := selfSigned(t)
	var mu sync.Mutex
	in := map[string]int{} // requests in flight per client connection
	most := 0
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		in[r.RemoteAddr]++
		most = max(most, in[r.RemoteAddr])
		mu.Unlock()
		select {
		case <-release:
		case <-time.After(2 * time.Second):
		}
		mu.Lock()
		in[r.RemoteAddr]--
		mu.Unlock()
	})
	addr, _ := serveTest(t, h, cert, server.NewConnGuard(100))
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true, MaxConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	done := make(chan error, 150)
	for range 150 {
		go func() {
			res, err := c.Get("https://" + addr + "/")
			if err == nil {
				if res.ProtoMajor != 2 {
					err = fmt.Errorf("HTTP/%d", res.ProtoMajor)
				}
				res.Body.Close()
			}
			done <- err
		}()
	}
	for range 150 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if most > server.MaxStreamsPerConn || most < 2 {
		t.Fatalf("%d requests at once on one connection", most)
	}
}

// A client that opens connections and never finishes its first request's
// headers cannot take them all: from three quarters of the limit on, each
// new connection closes the oldest waiting one, new or idle. Before, only
// idle keep-alive connections were closed, and 10,000 half-sent requests
// from one process shut every client out of every listener until the
// header timeout, again and again.
func TestHalfSentRequestsNeverStarveOthers(t *testing.T) {
	const limit, slow = 40, 200
	g := server.NewConnGuard(limit)
	addr, _ := serveTest(t, okHandler, nil, g)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range slow {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n") // never the blank line
	}
	if n := g.Open(); n > limit {
		t.Fatalf("%d connections open, limit %d", n, limit)
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 3 {
		res, err := c.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("client %d after %d half-sent requests: %v", i, slow, err)
		}
		res.Body.Close()
	}
}

// One client address holds at most its share of the connections, however
// it keeps them busy (here request bodies that never come, which the
// guard cannot close as waiting), and other addresses are served; an exempt
// address (a trusted proxy) has no share.
func TestConnectionsBoundedPerAddress(t *testing.T) {
	const limit, share = 100, 10
	g := server.NewConnGuard(limit)
	proxy := netip.MustParseAddr("127.0.0.3")
	g.PerAddress(share, func(a netip.Addr) bool { return a == proxy })
	readsBody := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	})
	addr, _ := serveTest(t, readsBody, nil, g)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// open dials n connections from the local address from, each starting
	// a request whose body never comes, and counts those the server kept
	// (a refused one is closed at once: EOF).
	open := func(from string, n int) int {
		t.Helper()
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		batch := make([]net.Conn, n)
		for i := range batch {
			c, err := d.Dial("tcp", addr)
			if err != nil {
				t.Fatalf("dial from %s: %v", from, err)
			}
			fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
			batch[i] = c
		}
		conns = append(conns, batch...)
		var kept atomic.Int64
		var wg sync.WaitGroup
		for _, c := range batch {
			wg.Go(func() {
				c.SetReadDeadline(time.Now().Add(time.Second))
				if _, err := c.Read(make([]byte, 1)); isTimeout(err) {
					kept.Add(1)
				}
			})
		}
		wg.Wait()
		return int(kept.Load())
	}
	if kept := open("127.0.0.1", 2*share); kept != share {
		t.Errorf("one address kept %d busy connections; want its share, %d", kept, share)
	}
	if open("127.0.0.2", 1) != 1 {
		t.Error("another address was refused")
	}
	if kept := open(proxy.String(), 2*share); kept != 2*share {
		t.Errorf("the exempt address kept %d of %d connections", kept, 2*share)
	}
	// Closing gives the share back.
	for _, c := range conns[:share] {
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for open("127.0.0.1", 1) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the address's closed connections were not given back")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
