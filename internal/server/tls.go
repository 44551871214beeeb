package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Certificate is a TLS certificate and key read from two PEM files, which
// Reload reads again (on SIGHUP) without a restart: connections already
// established keep the certificate they were made with, new handshakes get
// the new one. One Certificate serves every listener of the process.
type Certificate struct {
	certFile, keyFile string
	pair              atomic.Pointer[tls.Certificate]
}

// LoadCertificate reads the pair; it fails when the files do not hold a
// matching certificate and private key.
func LoadCertificate(certFile, keyFile string) (*Certificate, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("TLS needs both a certificate and a key file")
	}
	c := &Certificate{certFile: certFile, keyFile: keyFile}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload reads the files again. On any error the certificate in use stays.
func (c *Certificate) Reload() error {
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("load TLS certificate %s and key %s: %w", c.certFile, c.keyFile, err)
	}
	if pair.Leaf == nil { // parsed by LoadX509KeyPair since Go 1.23; kept for NotAfter
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return fmt.Errorf("parse TLS certificate %s: %w", c.certFile, err)
		}
	}
	c.pair.Store(&pair)
	return nil
}

// NotAfter is when the certificate in use expires (for the log).
func (c *Certificate) NotAfter() time.Time { return c.pair.Load().Leaf.NotAfter }

// Subject names the certificate in use (for the log).
func (c *Certificate) Subject() string { return c.pair.Load().Leaf.Subject.String() }

// TLSConfig is the server configuration of every btk listener: TLS 1.2 at
// least (1.3 alone would shut out the load balancers and clients that still
// stop at 1.2), with ECDHE and AEAD cipher suites only for 1.2 (Go's
// defaults still offer two CBC suites with SHA-1; 1.3's are all AEAD), the
// current certificate at each handshake, and HTTP/2 offered by ALPN.
func (c *Certificate) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: AEADCipherSuites,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return c.pair.Load(), nil
		},
		NextProtos: []string{"h2", "http/1.1"},
	}
}

// AEADCipherSuites are the TLS 1.2 suites btk offers: forward secret, AEAD.
var AEADCipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// MaxHeaderBytes bounds a request's header block on every listener: real
// traffic (cookies, a bearer token, tracing headers) fits many times over,
// and a 1 MB block (Go's default) costs milliseconds of CPU to refuse.
const MaxHeaderBytes = 64 << 10

// MaxStreamsPerConn bounds the concurrent requests of one HTTP/2 connection.
const MaxStreamsPerConn = 100

// BodyWindow is the HTTP/2 receive window of one request on the listeners
// whose handlers read a body whole (the API, the metrics): the bytes a
// client may send ahead of its handler, held by the server until read. A
// GraphQL body is at most 64 KiB, and goes in one window; a leak report
// (up to 1 MiB) is read as it arrives, a window at a time. Go's default is
// 1 MiB, which a handler that reads the body after its key check let a
// client fill for each of its requests.
const BodyWindow = 64 << 10

// connWindow is the HTTP/2 receive window of a connection on those
// listeners: Go's default, 16 requests' windows, so that a request whose
// handler has not read its body yet does not hold up the connection's
// others.
const connWindow = 1 << 20

// StreamingHTTP2 is the HTTP/2 configuration of the proxy listener, whose
// uploads stream to the upstream as they arrive: Go's receive windows (1 MiB
// a request), since a BodyWindow would make an upload wait a round trip
// for each 64 KiB of it.
func StreamingHTTP2() *http.HTTP2Config {
	return &http.HTTP2Config{MaxConcurrentStreams: MaxStreamsPerConn}
}

// HSTS is the Strict-Transport-Security of every answer over TLS.
const HSTS = "max-age=31536000"

// Serve serves srv on ln, with TLS (and HTTP/2) when cert is not nil. Every
// btk listener (the API, the reverse proxy) goes through it, or through
// ServeGuarded with a guard of its own (the metrics), and gets the bounds
// of docs/security.md: header blocks of at most MaxHeaderBytes, connections
// counted against the descriptor limit (idle ones closed first), each
// connection's client address known to its requests (the share of
// requests in flight, limitInFlight), and over TLS the AEAD suites and
// HSTS.
func Serve(srv *http.Server, ln net.Listener, cert *Certificate) error {
	return ServeGuarded(srv, ln, cert, processGuard)
}

// ServeGuarded is Serve with the connections counted by g (the metrics
// listener, tests).
func ServeGuarded(srv *http.Server, ln net.Listener, cert *Certificate, g *ConnGuard) error {
	if srv.MaxHeaderBytes == 0 {
		srv.MaxHeaderBytes = MaxHeaderBytes
	}
	if srv.HTTP2 == nil {
		// Streams at once on one HTTP/2 connection (Go's default is 250),
		// and what a stalled one holds.
		srv.HTTP2 = &http.HTTP2Config{
			MaxConcurrentStreams:          MaxStreamsPerConn,
			MaxReceiveBufferPerStream:     BodyWindow,
			MaxReceiveBufferPerConnection: connWindow,
		}
	}
	prevContext := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prevContext != nil {
			ctx = prevContext(ctx, c)
		}
		return connContext(ctx, c)
	}
	g.Track(srv)
	ln = g.Listener(ln)
	if cert == nil {
		return srv.Serve(ln)
	}
	next := srv.Handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Strict-Transport-Security", HSTS)
		next.ServeHTTP(w, r)
	})
	srv.TLSConfig = cert.TLSConfig()
	return srv.ServeTLS(ln, "", "") // the files are not read here: GetCertificate is set
}
