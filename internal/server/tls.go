package server

import (
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
// least (with Go's defaults that means ECDHE and AEAD cipher suites only;
// 1.3 alone would shut out the load balancers and clients that still stop
// at 1.2), the current certificate at each handshake, and HTTP/2 offered by
// ALPN.
func (c *Certificate) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return c.pair.Load(), nil
		},
		NextProtos: []string{"h2", "http/1.1"},
	}
}

// Serve serves srv on ln, with TLS (and HTTP/2) when cert is not nil. Every
// btk listener (the API, the metrics, the reverse proxy) goes through it.
func Serve(srv *http.Server, ln net.Listener, cert *Certificate) error {
	if cert == nil {
		return srv.Serve(ln)
	}
	srv.TLSConfig = cert.TLSConfig()
	return srv.ServeTLS(ln, "", "") // the files are not read here: GetCertificate is set
}
