package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/server"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape GETs /metrics and parses it with the Prometheus text parser.
func scrape(t *testing.T, client *http.Client, url string) map[string]*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Accept", "text/plain") // the text format, not protobuf
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("GET %s: HTTP %d %s", url, res.StatusCode, b)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// sample finds the metric of family name whose labels include want; nil if none.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

// value is a counter's or gauge's value, or a histogram's sample count; 0 if absent.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	m := sample(fams, name, labels)
	switch {
	case m == nil:
		return 0
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

var (
	uuidRE = regexp.MustCompile(`(?i)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	// A key or public key, or a display prefix: btk_/bpk_ and 8 characters.
	keyPrefixRE = regexp.MustCompile(`b[tp]k_[0-9a-f]{8}`)
)

// docs/operating.md#metrics: /metrics parsed with the Prometheus text parser; the counters
// move with the requests made, the histograms exist, and no label value
// names a workspace, key or account.
func TestMetrics(t *testing.T) {
	m := server.NewMetrics(server.BuildInfo{Version: "v0.0.0-test", Commit: "abc123"})
	e := newEnv(t, func(c *btk.Config) { c.Observer = m })
	m.CollectStore(e.db)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	api := httptest.NewServer(m.Instrument("other", server.New(e.svc, e.db, log)))
	defer api.Close()
	metrics := httptest.NewServer(m.Handler())
	defer metrics.Close()
	e2 := *e
	e2.srv = api // the requests below go through the instrumented handler
	client := &http.Client{Timeout: 10 * time.Second}

	before := scrape(t, client, metrics.URL+"/metrics")
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total", "btk_build_info",
		"btk_store_open_connections", "btk_store_in_use_connections", "btk_store_idle_connections",
		"btk_store_wait_count_total", "btk_store_wait_duration_seconds_total", "btk_key_checks_total"} {
		if before[name] == nil {
			t.Errorf("/metrics has no %s", name)
		}
	}
	for _, pool := range []string{"reader", "writer"} {
		if value(before, "btk_store_max_open_connections", map[string]string{"pool": pool}) < 1 {
			t.Errorf("btk_store_max_open_connections{pool=%q} missing or 0", pool)
		}
	}
	if value(before, "btk_build_info", map[string]string{"version": "v0.0.0-test", "commit": "abc123"}) != 1 {
		t.Errorf("btk_build_info does not carry the version and commit")
	}

	admin := e2.admin()                   // graphql 200 (login)
	k := e2.createKey(admin, "metrics")   // graphql 200
	limited := e2.createKey(admin, "one") // graphql 200
	for range 3 {
		if s := e2.probeStatus(k.Plaintext); s != http.StatusOK { // accepted: a miss, then hits
			t.Fatalf("probe: HTTP %d", s)
		}
	}
	bad := k.Plaintext[:len(k.Plaintext)-4] + "AAAA"
	if s := e2.probeStatus(bad); s != http.StatusUnauthorized { // invalid
		t.Fatalf("unknown key: HTTP %d", s)
	}
	e2.must(admin, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": limited.ID}, &struct{}{})
	if s := e2.probeStatus(limited.Plaintext); s != http.StatusUnauthorized { // revoked_or_expired
		t.Fatalf("revoked key: HTTP %d", s)
	}
	for _, path := range []string{"/healthz", "/readyz", "/no/such/" + e.adminWS} {
		res, err := client.Get(api.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}

	after := scrape(t, client, metrics.URL+"/metrics")
	delta := func(name string, labels map[string]string) float64 {
		return value(after, name, labels) - value(before, name, labels)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		// login, 2 creates, revoke, 3 accepted probes
		{"btk_http_requests_total", map[string]string{"handler": "/graphql", "code": "200"}, 7},
		{"btk_http_requests_total", map[string]string{"handler": "/graphql", "code": "401"}, 2},
		{"btk_http_requests_total", map[string]string{"handler": "/healthz", "code": "200"}, 1},
		{"btk_http_requests_total", map[string]string{"handler": "/readyz", "code": "200"}, 1},
		{"btk_http_requests_total", map[string]string{"handler": "other", "code": "404"}, 1},
		{"btk_http_request_duration_seconds", map[string]string{"handler": "/graphql"}, 9},
		{"btk_http_request_duration_seconds", map[string]string{"handler": "/healthz"}, 1},
		{"btk_key_checks_total", map[string]string{"result": "accepted"}, 3},
		{"btk_key_checks_total", map[string]string{"result": "invalid"}, 1},
		{"btk_key_checks_total", map[string]string{"result": "revoked_or_expired"}, 1},
		{"btk_key_checks_total", map[string]string{"result": "rate_limited"}, 0},
		// The first probe and the unknown key miss; the revoked key's entry was dropped.
		{"btk_key_cache_misses_total", nil, 3},
		{"btk_key_cache_hits_total", nil, 2},
	} {
		if got := delta(c.name, c.labels); got != c.want {
			t.Errorf("%s%v moved by %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if f := after["btk_http_request_duration_seconds"]; f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
		t.Errorf("btk_http_request_duration_seconds is not a histogram: %v", f.GetType())
	}
	if f := after["btk_usage_flush_duration_seconds"]; f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
		t.Errorf("btk_usage_flush_duration_seconds is missing or not a histogram")
	}
	checkLabels(t, after, e.adminWS)
}

// checkLabels fails on any label value that is a UUID, a key prefix or the
// workspace's id prefix, or a raw request path.
func checkLabels(t *testing.T, fams map[string]*dto.MetricFamily, workspaceID string) {
	t.Helper()
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				v := l.GetValue()
				if uuidRE.MatchString(v) || keyPrefixRE.MatchString(v) || strings.Contains(v, workspaceID[:8]) || strings.Contains(v, "/no/such") {
					t.Errorf("%s has label %s=%q", name, l.GetName(), v)
				}
			}
		}
	}
}

// The rate-limited outcome is counted too.
func TestMetricsRateLimited(t *testing.T) {
	m := server.NewMetrics(server.BuildInfo{})
	e := newEnv(t, func(c *btk.Config) { c.Observer = m; c.DefaultPerMinute = 1 })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	api := httptest.NewServer(m.Instrument("other", server.New(e.svc, e.db, log)))
	defer api.Close()
	e2 := *e
	e2.srv = api
	k := e2.createKey(e2.admin(), "once")
	if s := e2.probeStatus(k.Plaintext); s != http.StatusOK {
		t.Fatalf("first probe: HTTP %d", s)
	}
	if s := e2.probeStatus(k.Plaintext); s != http.StatusTooManyRequests {
		t.Fatalf("second probe: HTTP %d", s)
	}
	metrics := httptest.NewServer(m.Handler())
	defer metrics.Close()
	fams := scrape(t, &http.Client{Timeout: 10 * time.Second}, metrics.URL+"/metrics")
	if got := value(fams, "btk_key_checks_total", map[string]string{"result": "rate_limited"}); got != 1 {
		t.Errorf("rate_limited = %v, want 1", got)
	}
	if got := value(fams, "btk_http_requests_total", map[string]string{"handler": "/graphql", "code": "429"}); got != 1 {
		t.Errorf("429s = %v, want 1", got)
	}
}

// Client noise is counted, not logged (docs/operating.md#metrics): on a TLS
// listener, a client that connected, sent 11 junk bytes and closed, in a
// loop, wrote 27,888 WARN lines (4.8 MB) in 10 s. Failed handshakes, and
// HTTP/2 connections that begin with junk, are now logged at DEBUG and
// counted; a fault of the server's (a panic) stays at WARN.
func TestClientNoiseCountedNotLogged(t *testing.T) {
	cert, pool := selfSigned(t)
	m := server.NewMetrics(server.BuildInfo{})
	var mu sync.Mutex
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil)) // the default level
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("a bug") }),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          server.ErrorLog(log, m),
	}
	go server.ServeGuarded(srv, ln, cert, server.NewConnGuard(1000))
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()

	const n = 50
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("junk bytes!"))
		c.Close()
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("not the HTTP/2 connection preface\r\n\r\n"))
		c.Close()
	}
	counted := func() (tlsErrs, h2Errs float64) {
		got, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		fams := map[string]*dto.MetricFamily{}
		for _, f := range got {
			fams[f.GetName()] = f
		}
		return value(fams, "btk_tls_handshake_errors_total", nil), value(fams, "btk_http2_client_errors_total", nil)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a, b := counted(); (a != n || b != n) && time.Now().Before(deadline); a, b = counted() {
		time.Sleep(10 * time.Millisecond)
	}
	if a, b := counted(); a != n || b != n {
		t.Fatalf("counted %v failed handshakes and %v HTTP/2 client errors, want %d each", a, b, n)
	}
	mu.Lock()
	if logs.Len() != 0 {
		t.Fatalf("junk connections were logged:\n%s", logs.String())
	}
	mu.Unlock()

	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if res, err := cl.Get("https://" + addr + "/"); err == nil {
		res.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), `level=WARN msg="http: panic serving`) {
		t.Fatalf("a panic is not at WARN:\n%s", logs.String())
	}
}
