// Package events delivers the workspace event stream to webhooks
// (docs/webhooks.md): it claims due deliveries from the outbox that the
// stores fill in the transaction of each change, signs them as Standard
// Webhooks does, posts them with a bounded pool of workers, and records the
// outcome (delivered, or retried with backoff for 24 hours). It also runs
// the api_key.expiring sweep.
//
// Nothing here is on the path of a key check or a mutation: a slow or dead
// receiver only occupies one of this package's workers, for at most the
// per-request timeout.
package events

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/btk-project/btk/internal/btk"
)

// Config tunes a Worker. Zero values take the defaults.
type Config struct {
	// AllowPrivate lets deliveries reach loopback, private and link-local
	// addresses (--webhook-allow-private). Off, the dialer refuses them
	// after DNS resolution, whatever the URL said.
	AllowPrivate bool
	// Workers bounds the deliveries in flight (default 8).
	Workers int
	// Timeout bounds one delivery: connect, TLS, headers and body (default 10 s).
	Timeout time.Duration
	// Poll is how often the outbox is checked when idle (default 1 s).
	Poll time.Duration
	// SweepEvery is how often api_key.expiring is looked for (default 1 min; <0 off).
	SweepEvery time.Duration
	// Registerer receives the metrics (nil: none).
	Registerer prometheus.Registerer
	Log        *slog.Logger
}

// MaxResponseBody is how much of a receiver's answer is read (then the
// connection is dropped).
const MaxResponseBody = 64 << 10

// Worker delivers webhooks until its Run's context ends.
type Worker struct {
	svc    *btk.Service
	cfg    Config
	client *http.Client
	log    *slog.Logger
	wake   chan struct{}

	results   *prometheus.CounterVec
	statsMu   sync.Mutex
	stats     btk.OutboxStats
	statsRead bool // stats were read once
}

// Delivery results (the metric's label values).
const (
	ResultDelivered = "delivered"
	ResultRetry     = "retry"  // failed, will be retried
	ResultFailed    = "failed" // failed for the last time (24 h passed)
	ResultError     = "error"  // btk could not attempt it (e.g. the secret cannot be opened)
)

// New returns a worker for svc.
func New(svc *btk.Service, cfg Config) *Worker {
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.SweepEvery == 0 {
		cfg.SweepEvery = time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	w := &Worker{svc: svc, cfg: cfg, log: cfg.Log, wake: make(chan struct{}, 1), client: NewClient(cfg.AllowPrivate, cfg.Timeout)}
	w.results = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "btk_webhook_deliveries_total",
		Help: "Webhook delivery attempts by result (delivered, retry, failed, error).",
	}, []string{"result"})
	for _, r := range []string{ResultDelivered, ResultRetry, ResultFailed, ResultError} {
		w.results.WithLabelValues(r)
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(w.results,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "btk_webhook_outbox_depth",
				Help: "Webhook deliveries not yet delivered (pending, including retries).",
			}, func() float64 { return float64(w.outboxStats().Pending) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "btk_webhook_outbox_oldest_seconds",
				Help: "Age of the oldest undelivered webhook delivery, in seconds (0 when none).",
			}, func() float64 {
				st := w.outboxStats()
				if st.OldestPending == nil {
					return 0
				}
				return max(svc.Now().Sub(*st.OldestPending).Seconds(), 0)
			}),
			// docs/webhooks.md#the-backlog-bound
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "btk_webhook_backlogs_full",
				Help: "Webhooks whose backlog of pending deliveries is at its bound (their new events are skipped).",
			}, func() float64 { return float64(w.outboxStats().Full) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "btk_webhook_events_skipped",
				Help: "Events not queued for a webhook because its backlog was full, summed over the existing webhooks.",
			}, func() float64 { return float64(w.outboxStats().Skipped) }))
	}
	return w
}

func (w *Worker) outboxStats() btk.OutboxStats {
	w.statsMu.Lock()
	defer w.statsMu.Unlock()
	return w.stats
}

// errPrivate is the dialer's refusal of a private receiver.
var errPrivate = errors.New("the receiver's address is loopback, private or link-local (refused; see --webhook-allow-private)")

// NewClient is the HTTP client of deliveries: no proxy from the
// environment, no redirects followed, every dialled address checked after
// DNS resolution (unless allowPrivate), and timeout bounding each request.
func NewClient(allowPrivate bool, timeout time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		dialer.Control = func(network, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return errPrivate
			}
			ip, err := netip.ParseAddr(host)
			if err != nil || btk.PrivateAddr(ip) {
				return errPrivate
			}
			return nil
		}
	}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 nil, // a proxy would hide the receiver's address from the check
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   timeout,
			ResponseHeaderTimeout: timeout,
			// A receiver's header block: Go's default is 10 MB (per worker).
			MaxResponseHeaderBytes: MaxResponseBody,
			MaxIdleConnsPerHost:    2,
			IdleConnTimeout:        90 * time.Second,
			ForceAttemptHTTP2:      true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Poke makes the worker look at the outbox now rather than at its next poll.
func (w *Worker) Poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Run delivers until ctx ends, then waits for the deliveries in flight
// (each bounded by the timeout). A delivery cut short by a kill keeps its
// lease until it runs out; then any instance delivers it again (receivers
// deduplicate by webhook-id).
func (w *Worker) Run(ctx context.Context) {
	var (
		wg       sync.WaitGroup
		slots    = make(chan struct{}, w.cfg.Workers)
		lastStat time.Time
		lastSwp  time.Time
		settled  = make(chan settledDelivery, 2*w.cfg.Workers)
		recorded = make(chan struct{})
	)
	go func() { defer close(recorded); w.record(settled) }()
	defer func() {
		wg.Wait()
		close(settled)
		<-recorded
	}()
	lease := 2*w.cfg.Timeout + 30*time.Second
	poll := time.NewTicker(w.cfg.Poll)
	defer poll.Stop()
	for {
		now := time.Now()
		if now.Sub(lastStat) >= 5*time.Second {
			if st, err := w.svc.OutboxStats(ctx); err == nil {
				w.statsMu.Lock()
				prev, read := w.stats, w.statsRead
				w.stats, w.statsRead = st, true
				w.statsMu.Unlock()
				if read && st.Skipped > prev.Skipped {
					w.log.Warn("webhook events skipped: a webhook's backlog of pending deliveries is full; its receiver is sent a "+
						btk.NoticeEventsSkipped+" notice and reads them from the audit log (docs/webhooks.md#the-backlog-bound)",
						"skipped", st.Skipped-prev.Skipped, "full_backlogs", st.Full)
				}
			}
			lastStat = now
		}
		if w.cfg.SweepEvery > 0 && now.Sub(lastSwp) >= w.cfg.SweepEvery {
			if n, err := w.svc.SweepExpiringKeys(ctx); err != nil && ctx.Err() == nil {
				w.log.Error("api_key.expiring sweep failed", "err", err)
			} else if n > 0 {
				w.log.Info("api_key.expiring notices written", "count", n)
			}
			lastSwp = now
		}
		// Claim as many as there are free workers.
		if free := w.cfg.Workers - len(slots); free > 0 && ctx.Err() == nil {
			ds, err := w.svc.ClaimDeliveries(ctx, uuid.NewString(), lease, free, btk.DefaultDeliveryCaps(w.cfg.Workers))
			if err != nil && ctx.Err() == nil {
				w.log.Error("webhook outbox: claim failed", "err", err)
			}
			for _, d := range ds {
				slots <- struct{}{}
				wg.Go(func() {
					defer func() { <-slots }()
					settled <- w.deliver(d)
				})
			}
			if len(ds) == free {
				// Maybe more is due: look again as soon as a worker is free.
				select {
				case <-ctx.Done():
					return
				case slots <- struct{}{}:
					<-slots
					continue
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
		case <-w.wake:
		}
	}
}

// settledDelivery is a delivery whose attempt is over, with the result
// for the metric (failed is decided by SettleDelivery).
type settledDelivery struct {
	d      *btk.WebhookDelivery
	result string
}

// deliver sends one delivery and settles its outcome (record stores it).
// It does not use the Run context: a delivery under way at shutdown
// finishes (bounded by the timeout) and is recorded.
func (w *Worker) deliver(d *btk.WebhookDelivery) settledDelivery {
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout+5*time.Second)
	defer cancel()
	code, msg := w.post(ctx, d)
	result := ResultRetry
	switch {
	case code >= 200 && code < 300:
		result = ResultDelivered
	case code < 0:
		code, result = 0, ResultError
	}
	w.svc.SettleDelivery(d, code, msg, rand.Float64()) // #nosec G404 -- jitter of a retry delay, not a secret
	if d.Status == btk.DeliveryFailed {
		result = ResultFailed
	}
	return settledDelivery{d, result}
}

// record stores settled deliveries, as many at once as have come in while
// the previous batch was written: one write transaction for a burst rather
// than one per delivery. A batch that cannot be written is not lost: its
// deliveries keep their lease, then are sent again.
func (w *Worker) record(settled <-chan settledDelivery) {
	const maxBatch = 64
	for first := range settled {
		batch := []settledDelivery{first}
	drain:
		for len(batch) < maxBatch {
			select {
			case sd, ok := <-settled:
				if !ok {
					break drain
				}
				batch = append(batch, sd)
			default:
				break drain
			}
		}
		ds := make([]*btk.WebhookDelivery, len(batch))
		for i, sd := range batch {
			ds[i] = sd.d
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := w.svc.RecordDeliveries(ctx, ds)
		cancel()
		if err != nil {
			w.log.Error("webhook outbox: recording deliveries failed; they are sent again when their lease runs out", "count", len(batch), "err", err)
			continue
		}
		// The recorded deliveries no longer count against their webhook's
		// and workspace's caps: what those held back may be claimed now,
		// not at the next poll (which held a busy webhook to 2 deliveries
		// a second).
		w.Poke()
		for _, sd := range batch {
			w.results.WithLabelValues(sd.result).Inc()
			if sd.result == ResultFailed {
				w.log.Warn("webhook delivery given up after 24 hours", "webhook", sd.d.WebhookID, "delivery", sd.d.ID, "attempts", sd.d.Attempts)
			}
		}
	}
}

// post signs and sends the delivery; it returns the receiver's status code
// (0 when there was no answer, -1 when btk could not send) and a message for
// the delivery log. The URL and the secret are never logged.
func (w *Worker) post(ctx context.Context, d *btk.WebhookDelivery) (int, string) {
	secret, err := w.svc.OpenWebhookSecret(d.WebhookID, d.Sealed)
	if err != nil {
		return -1, err.Error()
	}
	ts := w.svc.Now().Unix()
	sig, err := btk.SignWebhook(secret, d.EventID, ts, []byte(d.Payload))
	if err != nil {
		return -1, "the signing secret is malformed"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, strings.NewReader(d.Payload))
	if err != nil {
		return -1, "the webhook URL is not valid"
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "btk-webhooks/1")
	req.Header.Set("webhook-id", d.EventID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, describe(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxResponseBody)) // for the connection's reuse: the status is the answer
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return resp.StatusCode, ""
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return resp.StatusCode, "the receiver answered a redirect (redirects are not followed)"
	}
	return resp.StatusCode, fmt.Sprintf("the receiver answered %d", resp.StatusCode)
}

// describe says why a request failed without quoting the URL (it may hold
// a token of the receiver's).
func describe(err error) string {
	switch {
	case errors.Is(err, errPrivate):
		return errPrivate.Error()
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return "the receiver did not answer in time"
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "the receiver's host does not resolve"
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return "could not connect to the receiver"
	}
	return "the request to the receiver failed"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
