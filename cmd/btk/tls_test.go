package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/btk-project/btk/internal/testproc"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1000),
		Subject:               pkix.Name{CommonName: "btk test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue writes a server certificate for 127.0.0.1 with the given serial
// number and its key to certFile and keyFile, each replaced atomically.
func (ca *testCA) issue(t *testing.T, serial int64, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "btk test server"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	writeAtomic(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
}

func writeAtomic(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// client is an HTTPS client that trusts only the CA, with HTTP/2.
func (ca *testCA) client() *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: ca.pool},
			ForceAttemptHTTP2: true,
		},
	}
}

// startServeHTTPS is startServe for a server with TLS: it waits until
// https://…/readyz answers through client.
func startServeHTTPS(t *testing.T, client *http.Client, db string, flags ...string) *serveProcess {
	t.Helper()
	p := launchServeWith(t, "https", client, db, flags...)
	p.waitReady()
	return p
}

// get fetches url and returns the serial number of the server certificate,
// the HTTP major version, and whether the connection was reused.
func get(t *testing.T, client *http.Client, url string) (serial int64, proto int, reused bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || res.TLS == nil {
		t.Fatalf("GET %s: HTTP %d, TLS %v", url, res.StatusCode, res.TLS != nil)
	}
	return res.TLS.PeerCertificates[0].SerialNumber.Int64(), res.ProtoMajor, reused
}

// docs/operating.md#tls: HTTPS and HTTP/2 on every listener with a certificate made in
// the test; SIGHUP swaps to a new certificate while a connection made with
// the old one keeps working; a bad pair on SIGHUP keeps the one in use.
func TestServeTLSReloadOnSIGHUP(t *testing.T) {
	parallelUnlessShort(t, "starts btk serve processes")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca := newTestCA(t)
	ca.issue(t, 1, certFile, keyFile)
	metricsAddr, proxyAddr := testproc.FreeAddr(t), testproc.FreeAddr(t)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	old := ca.client()
	p := startServeHTTPS(t, old, filepath.Join(dir, "btk.db"),
		"--tls-cert", certFile, "--tls-key", keyFile, "--metrics-addr", metricsAddr,
		"--proxy-addr", proxyAddr, "--upstream", upstream.URL)

	serial, proto, _ := get(t, old, p.url+"/healthz")
	if serial != 1 || proto != 2 {
		t.Fatalf("first request: certificate %d over HTTP/%d, want 1 over HTTP/2", serial, proto)
	}
	mc := ca.client()
	defer mc.CloseIdleConnections()
	if s, proto, _ := get(t, mc, "https://"+metricsAddr+"/metrics"); s != 1 || proto != 2 {
		t.Errorf("metrics listener: certificate %d over HTTP/%d, want 1 over HTTP/2", s, proto)
	}
	// The reverse proxy listener too (a request without a key: btk refuses it).
	pc := ca.client()
	defer pc.CloseIdleConnections()
	if res, err := pc.Get("https://" + proxyAddr + "/anything"); err != nil {
		t.Errorf("proxy listener over TLS: %v", err)
	} else {
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized || res.TLS.PeerCertificates[0].SerialNumber.Int64() != 1 || res.ProtoMajor != 2 {
			t.Errorf("proxy listener: HTTP/%d %d with certificate %d; want HTTP/2 401 with certificate 1",
				res.ProtoMajor, res.StatusCode, res.TLS.PeerCertificates[0].SerialNumber)
		}
	}
	// Plain HTTP is not served.
	if res, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + strings.TrimPrefix(p.url, "https://") + "/healthz"); err == nil {
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP answered 200 on the TLS listener")
		}
	}

	ca.issue(t, 2, certFile, keyFile)
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	fresh := func(url string) int64 { // the certificate a new connection gets
		c := ca.client()
		defer c.CloseIdleConnections()
		s, _, _ := get(t, c, url)
		return s
	}
	p.WaitFor(t, "new connections to get certificate 2", procWait, func() bool { return fresh(p.url+"/healthz") == 2 })
	serial, _, reused := get(t, old, p.url+"/healthz")
	if serial != 1 || !reused {
		t.Errorf("the connection made before SIGHUP: certificate %d, reused %v; want it to go on with certificate 1", serial, reused)
	}
	if s := fresh("https://" + metricsAddr + "/metrics"); s != 2 {
		t.Errorf("metrics listener after SIGHUP: certificate %d, want 2", s)
	}

	// A broken pair is refused and logged; the server keeps certificate 2.
	writeAtomic(t, certFile, []byte("not a certificate"))
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.WaitFor(t, "the failed reload to be logged", procWait, func() bool {
		return strings.Contains(p.Out.String(), "TLS certificate not reloaded")
	})
	if s := fresh(p.url + "/healthz"); s != 2 {
		t.Errorf("after a bad pair: certificate %d, want 2 still", s)
	}

	// The metrics listener served the requests' series and the usage flush
	// (about once a second).
	p.WaitFor(t, "a usage flush in the metrics", procWait, func() bool {
		res, err := mc.Get("https://" + metricsAddr + "/metrics")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(res.Body)
		if err != nil {
			t.Fatalf("parse /metrics: %v", err)
		}
		f := fams["btk_usage_flush_duration_seconds"]
		byHandler := map[string]float64{}
		for _, m := range fams["btk_http_requests_total"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "handler" {
					byHandler[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
		if byHandler["/healthz"] < 4 || byHandler["proxy"] != 1 {
			t.Fatalf("btk_http_requests_total by handler: %v; want /healthz at least 4, proxy 1", byHandler)
		}
		return f != nil && len(f.GetMetric()) == 1 && f.GetMetric()[0].GetHistogram().GetSampleCount() > 0
	})
	if err := p.stop(); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, p.Out.String())
	}
}

// Mistakes in the operations settings stop btk serve before it opens the
// database.
func TestServeOpsSettingsRefused(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "btk.db")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		// Each is the operator's mistake, as a config error is (exit 2).
		{[]string{"--tls-cert", filepath.Join(dir, "cert.pem")}, exitUsage, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-key", filepath.Join(dir, "key.pem")}, exitUsage, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-cert", filepath.Join(dir, "cert.pem"), "--tls-key", filepath.Join(dir, "key.pem")}, exitUsage, "load TLS certificate"},
		{[]string{"--trusted-proxies", "10.0.0.0/8,not-a-range"}, exitUsage, "--trusted-proxies"},
		{[]string{"--trusted-proxies", "10.0.0.0/33"}, exitUsage, "--trusted-proxies"},
	} {
		s, _, errOut := testStreams(pipe, "")
		code := btkRun(s, append([]string{"serve", "--db", db, "--addr", "127.0.0.1:0"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want %d and %q", c.args, code, errOut.String(), c.code, c.want)
		}
	}
	if _, err := os.Stat(db); err == nil {
		t.Errorf("the database was created although the settings were refused")
	}
}

// docs/design.md#configuration: --cacert (BTK_CACERT) trusts a private CA's server, without
// which the CLI refuses it as unreachable (unknown authority).
func TestCACert(t *testing.T) {
	isolate(t)
	fake := newFakeServer(t, map[string]string{
		"Me":         `{"data":{"me":{"id":"a1","email":"owner@example.com","platformAdmin":false,"role":"OWNER"}}}`,
		"TenantInfo": `{"data":{"tenantInfo":` + tenantJSON + `}}`,
	})
	srv := httptest.NewUnstartedServer(fake.Config.Handler)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	writeFile(t, ca, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})))

	s, _, errOut := testStreams(pipe, "")
	if code := btkRun(s, "whoami", "--server", srv.URL, "--token", "tok"); code != exitUnreachable || !strings.Contains(errOut.String(), "certificate") {
		t.Errorf("without --cacert: exit %d, stderr %q", code, errOut)
	}
	s, out, errOut := testStreams(pipe, "")
	if code := btkRun(s, "whoami", "--server", srv.URL, "--token", "tok", "--cacert", ca); code != 0 || !strings.Contains(out.String(), "owner@example.com") {
		t.Errorf("--cacert: exit %d, stderr %q", code, errOut)
	}
	t.Setenv("BTK_CACERT", ca)
	s, _, errOut = testStreams(pipe, "")
	if code := btkRun(s, "whoami", "--server", srv.URL, "--token", "tok"); code != 0 {
		t.Errorf("BTK_CACERT: exit %d, stderr %q", code, errOut)
	}
	notPEM := filepath.Join(t.TempDir(), "x.pem")
	writeFile(t, notPEM, "hello")
	s, _, errOut = testStreams(pipe, "")
	if code := btkRun(s, "whoami", "--server", srv.URL, "--token", "tok", "--cacert", notPEM); code != exitUsage || !strings.Contains(errOut.String(), "no PEM certificate") {
		t.Errorf("a file without a certificate: exit %d, stderr %q", code, errOut)
	}
}
