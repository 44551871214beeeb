package server

import (
	"bufio"
	"database/sql"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is btk's Prometheus instrumentation (docs/operating.md#metrics). It keeps its own
// registry, not the global default, and is served by Handler on a listener
// of its own (--metrics-addr). No label carries a workspace, key or account:
// handler is a registered route pattern (a fixed set), never a request path.
//
// The request path stays allocation-free: every series a request touches is
// resolved once (at construction, or at the first request of a route and
// status) and then reached through atomic pointers.
type Metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec

	keyChecks   []prometheus.Counter // by btk.KeyCheckResult
	cacheHits   prometheus.Counter
	cacheMisses prometheus.Counter
	flush       prometheus.Histogram
	flushErrors prometheus.Counter

	// Connections a client ended in error, logged at DEBUG only (ErrorLog).
	tlsHandshakeErrors prometheus.Counter
	http2ClientErrors  prometheus.Counter

	// routes maps a ServeMux pattern (or an Instrument fallback name) to its
	// series. It is copied on write: reads are one atomic load.
	routes  atomic.Pointer[map[string]*routeMetrics]
	routeMu sync.Mutex
}

// Latency buckets, in seconds: a cached key check answers in tens of
// microseconds, a password check in tens of milliseconds.
var (
	requestBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	flushBuckets   = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
)

// BuildInfo is what btk_build_info reports.
type BuildInfo struct {
	Version, Commit string
}

// NewMetrics returns the metrics with the Go and process collectors
// registered.
func NewMetrics(build BuildInfo) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	f := factory{m.reg}
	info := f.gaugeVec("btk_build_info", "The btk build: always 1, labelled with the version, commit and Go version.",
		"version", "commit", "goversion")
	info.WithLabelValues(build.Version, build.Commit, runtime.Version()).Set(1)

	m.requests = f.counterVec("btk_http_requests_total",
		"HTTP requests answered, by route pattern (handler) and status code.", "handler", "code")
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "btk_http_request_duration_seconds",
		Help:    "Time from the request's headers to the end of the handler, by route pattern (handler).",
		Buckets: requestBuckets,
	}, []string{"handler"})
	m.reg.MustRegister(m.duration)

	checks := f.counterVec("btk_key_checks_total",
		"Presented API keys by outcome: accepted, invalid, revoked_or_expired, rate_limited, restricted (the key's networks or the access rules refused it), or error (store or shared state failed).", "result")
	m.keyChecks = make([]prometheus.Counter, len(btk.KeyCheckResults))
	for _, r := range btk.KeyCheckResults {
		m.keyChecks[r] = checks.WithLabelValues(r.String())
	}
	m.cacheHits = f.counter("btk_key_cache_hits_total", "Key checks answered from the in-memory key cache.")
	m.cacheMisses = f.counter("btk_key_cache_misses_total", "Key checks that read the key or its workspace from the store.")
	m.flush = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "btk_usage_flush_duration_seconds",
		Help:    "Duration of a flush of last_used_at times and day counts to the store.",
		Buckets: flushBuckets,
	})
	m.reg.MustRegister(m.flush)
	m.flushErrors = f.counter("btk_usage_flush_errors_total", "Usage flushes that failed (their figures are kept for the next one).")
	m.tlsHandshakeErrors = f.counter("btk_tls_handshake_errors_total",
		"TLS handshakes that failed on any listener: a client that does not speak TLS, sends junk or closes early (logged at DEBUG only).")
	m.http2ClientErrors = f.counter("btk_http2_client_errors_total",
		"HTTP/2 connections ended by a client's error: no valid preface, a protocol error, no SETTINGS in time, a GOAWAY with an error code (logged at DEBUG only).")
	m.routes.Store(&map[string]*routeMetrics{})
	return m
}

// factory makes and registers metrics on one registry.
type factory struct{ reg *prometheus.Registry }

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(g)
	return g
}

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
	return limitInFlight(mux)
}

// Registry is the metrics' own registry (for tests and further collectors).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// KeyChecked counts a key check's outcome (btk.Observer).
func (m *Metrics) KeyChecked(r btk.KeyCheckResult) {
	if int(r) < len(m.keyChecks) {
		m.keyChecks[r].Inc()
	}
}

// KeyCacheLookup counts a key-cache hit or miss (btk.Observer).
func (m *Metrics) KeyCacheLookup(hit bool) {
	if hit {
		m.cacheHits.Inc()
	} else {
		m.cacheMisses.Inc()
	}
}

var _ btk.Observer = (*Metrics)(nil)

// ObserveUsageFlush records one usage flush.
func (m *Metrics) ObserveUsageFlush(d time.Duration, err error) {
	m.flush.Observe(d.Seconds())
	if err != nil {
		m.flushErrors.Inc()
	}
}

// PoolStatser is a store that reports its connection pools by name (the
// SQLite store: "reader" and "writer").
type PoolStatser interface {
	PoolStats() map[string]sql.DBStats
}

// CollectStore exports the store's connection-pool figures at every scrape,
// if the store reports them.
func (m *Metrics) CollectStore(store any) {
	if s, ok := store.(PoolStatser); ok {
		m.reg.MustRegister(poolCollector{s})
	}
}

// poolCollector reads database/sql pool statistics at scrape time.
type poolCollector struct{ s PoolStatser }

var (
	poolMaxOpen  = poolDesc("max_open_connections", "Maximum number of open connections of the store pool.")
	poolOpen     = poolDesc("open_connections", "Open connections of the store pool, in use or idle.")
	poolInUse    = poolDesc("in_use_connections", "Connections of the store pool in use.")
	poolIdle     = poolDesc("idle_connections", "Idle connections of the store pool.")
	poolWaits    = poolDesc("wait_count_total", "Times a caller waited for a connection of the store pool.")
	poolWaitSecs = poolDesc("wait_duration_seconds_total", "Time callers spent waiting for a connection of the store pool.")
)

func poolDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("btk_store_"+name, help, []string{"pool"}, nil)
}

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolMaxOpen, poolOpen, poolInUse, poolIdle, poolWaits, poolWaitSecs} {
		ch <- d
	}
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	for pool, st := range c.s.PoolStats() {
		ch <- prometheus.MustNewConstMetric(poolMaxOpen, prometheus.GaugeValue, float64(st.MaxOpenConnections), pool)
		ch <- prometheus.MustNewConstMetric(poolOpen, prometheus.GaugeValue, float64(st.OpenConnections), pool)
		ch <- prometheus.MustNewConstMetric(poolInUse, prometheus.GaugeValue, float64(st.InUse), pool)
		ch <- prometheus.MustNewConstMetric(poolIdle, prometheus.GaugeValue, float64(st.Idle), pool)
		ch <- prometheus.MustNewConstMetric(poolWaits, prometheus.CounterValue, float64(st.WaitCount), pool)
		ch <- prometheus.MustNewConstMetric(poolWaitSecs, prometheus.CounterValue, st.WaitDuration.Seconds(), pool)
	}
}

// routeMetrics are the series of one route. Status codes 100-599 have their
// counter resolved on first use; anything else (never written by net/http)
// is looked up each time.
type routeMetrics struct {
	label    string
	duration prometheus.Observer
	codes    [500]atomic.Pointer[counterRef]
}

type counterRef struct{ c prometheus.Counter }

func (rm *routeMetrics) code(m *Metrics, status int) prometheus.Counter {
	if status < 100 || status > 599 {
		return m.requests.WithLabelValues(rm.label, strconv.Itoa(status))
	}
	p := &rm.codes[status-100]
	if ref := p.Load(); ref != nil {
		return ref.c
	}
	ref := &counterRef{m.requests.WithLabelValues(rm.label, strconv.Itoa(status))}
	p.Store(ref) // a racing store holds the same child
	return ref.c
}

// route returns the series of a route key, creating them on first use.
// Route keys are ServeMux patterns and Instrument fallback names: a fixed
// set, so this map stops growing after the first requests.
func (m *Metrics) route(key string) *routeMetrics {
	if rm := (*m.routes.Load())[key]; rm != nil {
		return rm
	}
	m.routeMu.Lock()
	defer m.routeMu.Unlock()
	old := *m.routes.Load()
	if rm := old[key]; rm != nil {
		return rm
	}
	rm := &routeMetrics{label: routeLabel(key)}
	rm.duration = m.duration.WithLabelValues(rm.label)
	next := make(map[string]*routeMetrics, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[key] = rm
	m.routes.Store(&next)
	return rm
}

// routeLabel is the handler label of a pattern: its path, without the
// method ("POST /graphql" is "/graphql").
func routeLabel(pattern string) string {
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		return strings.TrimSpace(pattern[i+1:])
	}
	return pattern
}

// Instrument counts and times the requests next serves. The handler label is
// the ServeMux pattern that served the request (read from r.Pattern after
// next returns, so next must pass r itself to its mux), else fallback: use
// "other" for a listener with routes (unmatched paths) and a name such as
// "proxy" for one without.
func (m *Metrics) Instrument(fallback string, next http.Handler) http.Handler {
	m.route(fallback) // resolve it before the first request
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := statusWriterPool.Get().(*statusWriter)
		sw.ResponseWriter, sw.status = w, 0
		next.ServeHTTP(sw, r)
		status := sw.code()
		sw.ResponseWriter = nil
		statusWriterPool.Put(sw)
		key := r.Pattern
		if key == "" {
			key = fallback
		}
		rm := m.route(key)
		rm.duration.Observe(time.Since(start).Seconds())
		rm.code(m, status).Inc()
	})
}

// statusWriter remembers the status for the metrics and the access log;
// pooled by the metrics, so that instrumenting costs no allocation per
// request. Unwrap lets http.ResponseController (used by
// httputil.ReverseProxy to flush and hijack) reach the connection.
type statusWriter struct {
	http.ResponseWriter
	status int
}

var statusWriterPool = sync.Pool{New: func() any { return new(statusWriter) }}

func (w *statusWriter) WriteHeader(code int) {
	// 1xx are interim (the final status follows), but for 101.
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush() // a client that left is no error of the stream
}

// Hijack hands the connection over: in net/http that is a protocol switch
// (WebSocket through the reverse proxy), counted as 101.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// code is the status the client got: 200 when the handler wrote nothing
// (net/http answers it).
func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
