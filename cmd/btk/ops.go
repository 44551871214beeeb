package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/btk-project/btk/internal/access"
	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/gateway"
	"github.com/btk-project/btk/internal/hangup"
	"github.com/btk-project/btk/internal/server"
)

// opsState is what the operations settings add to a running `btk serve`:
// the TLS certificate shared by every listener, the trusted proxies, and
// the metrics with their listener. Every method works on a state without
// metrics or TLS.
type opsState struct {
	cert    *server.Certificate // nil: plain HTTP
	proxies *gateway.TrustedProxies
	// leakKeys sign the leak reports /v1/leaks accepts (nil: none).
	leakKeys *btk.LeakReportKeys
	metrics  *server.Metrics // nil: no metrics

	metricsAddr string
	metricsLn   net.Listener
	hup         <-chan os.Signal // SIGHUP, caught since the process started (hangup.C)

	// rulesFile (--access-rules) holds rules, read at start; on SIGHUP a
	// file that parses replaces them through setRules.
	rulesFile string
	rules     *access.Rules
	setRules  func(*access.Rules)
}

// newOps checks the settings and reads the certificate before anything
// else starts, so that a mistake stops the server at once.
func newOps(cfg serveConfig, build server.BuildInfo) (*opsState, error) {
	o := &opsState{metricsAddr: cfg.MetricsAddr, rulesFile: cfg.AccessRules, hup: hangup.C}
	var err error
	if o.rulesFile != "" {
		// A bad file stops the server here, naming the line and the reason.
		if o.rules, err = access.Load(o.rulesFile); err != nil {
			return nil, fmt.Errorf("--access-rules: %w", err)
		}
	}
	if o.proxies, err = gateway.ParseTrustedProxies(cfg.TrustedProxies); err != nil {
		return nil, fmt.Errorf("--trusted-proxies: %w", err)
	}
	if cfg.LeakReportKeys != "" {
		data, err := os.ReadFile(cfg.LeakReportKeys)
		if err != nil {
			return nil, fmt.Errorf("--leak-report-keys: %w", err)
		}
		if o.leakKeys, err = btk.ParseLeakReportKeys(data); err != nil {
			return nil, fmt.Errorf("--leak-report-keys %s: %w", cfg.LeakReportKeys, err)
		}
		if o.leakKeys.Len() == 0 {
			return nil, fmt.Errorf("--leak-report-keys %s: no public key in the file", cfg.LeakReportKeys)
		}
	}
	switch {
	case cfg.TLSCert != "" && cfg.TLSKey != "":
		if o.cert, err = server.LoadCertificate(cfg.TLSCert, cfg.TLSKey); err != nil {
			return nil, err
		}
	case cfg.TLSCert != "" || cfg.TLSKey != "":
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if o.metricsAddr != "" {
		o.metrics = server.NewMetrics(build)
	}
	return o, nil
}

// observer is the service's observer: the metrics, or none.
func (o *opsState) observer() btk.Observer {
	if o.metrics == nil {
		return nil // not a nil *Metrics in an interface
	}
	return o.metrics
}

// instrument wraps a listener's handler with the request metrics, if on.
func (o *opsState) instrument(fallback string, h http.Handler) http.Handler {
	if o.metrics == nil {
		return h
	}
	return o.metrics.Instrument(fallback, h)
}

func (o *opsState) observeFlush(d time.Duration, err error) {
	if o.metrics != nil {
		o.metrics.ObserveUsageFlush(d, err)
	}
}

// listen opens the metrics listener (if any), before the database is
// touched, like the other listeners.
func (o *opsState) listen(log *slog.Logger) error {
	if o.metrics == nil {
		return nil
	}
	ln, err := net.Listen("tcp", o.metricsAddr)
	if err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	o.metricsLn = ln
	log.Info("metrics listening", "addr", ln.Addr().String(), "path", "/metrics", "tls", o.cert != nil)
	return nil
}

// metricsServer is the server of the metrics listener, which also reports
// the store's pools; nil without --metrics-addr.
func (o *opsState) metricsServer(store btk.Store, log *slog.Logger) *http.Server {
	if o.metrics == nil {
		return nil
	}
	o.metrics.CollectStore(store)
	return &http.Server{
		Handler:           o.metrics.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          server.ErrorLog(log, o.metrics),
	}
}

// registerer is where further metrics go (nil when metrics are off).
func (o *opsState) registerer() prometheus.Registerer {
	if o.metrics == nil {
		return nil
	}
	return o.metrics.Registry()
}

// shutdown closes the metrics listener if it was never served. SIGHUP stays
// caught (hangup.C) until the process exits: one during the drain must not
// kill it.
func (o *opsState) shutdown() {
	if o.metricsLn != nil {
		_ = o.metricsLn.Close()
	}
}

// reloadOnHangup re-reads the TLS certificate and key on every SIGHUP until
// ctx ends. A pair that does not load leaves the one in use in place.
func (o *opsState) reloadOnHangup(ctx context.Context, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.hup:
			o.reloadRules(log)
			if o.cert == nil {
				log.Info("SIGHUP: no TLS certificate to reload")
				continue
			}
			if err := o.cert.Reload(); err != nil {
				log.Error("SIGHUP: TLS certificate not reloaded; the previous one stays in use", "err", err)
				continue
			}
			log.Info("SIGHUP: TLS certificate reloaded", "subject", o.cert.Subject(), "not_after", o.cert.NotAfter())
		}
	}
}

// reloadRules re-reads --access-rules (if given); a file that does not parse
// leaves the rules in use in place and says why.
func (o *opsState) reloadRules(log *slog.Logger) {
	if o.rulesFile == "" || o.setRules == nil {
		return
	}
	r, err := access.Load(o.rulesFile)
	if err != nil {
		log.Error("SIGHUP: access rules not reloaded; the previous rules stay in use", "err", err)
		return
	}
	o.rules = r
	o.setRules(r)
	log.Info("SIGHUP: access rules reloaded", "file", o.rulesFile, "rules", r.Len())
}
