package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/events"
	"github.com/btk-project/btk/internal/hangup"
	"github.com/btk-project/btk/internal/server"
	"github.com/btk-project/btk/internal/store"
	"github.com/btk-project/btk/internal/web"
	"github.com/spf13/cobra"
)

func newServeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the btk server on a SQLite file or a PostgreSQL database",
		Long: `Run the btk GraphQL server. On an empty database it creates a platform admin
(BTK_BOOTSTRAP_EMAIL / BTK_BOOTSTRAP_PASSWORD, or admin@localhost with a generated
password printed once to stderr), a workspace "Default" on plan SELF_HOSTED, and
makes that account its OWNER. It stops on SIGINT or SIGTERM after draining
requests and flushing last_used_at, within about 30 s whatever the database
does; it exits 1 if usage could not be stored, and a second signal stops at
once (docs/operating.md#stopping). SIGHUP re-reads the TLS certificate and key
and the access rules (--access-rules; a file that does not parse keeps the rules
in use).

Settings come from flags, then BTK_* environment variables (each flag names
its own), then the config file (--config or BTK_CONFIG, which must exist;
otherwise $XDG_CONFIG_HOME/btk/config.yaml if it exists). The file's keys are
the flag names without dashes in front (rate-per-minute: 1000), and these
settings that are never flags:
  secret              BTK_SECRET: signs session tokens, at least 32 bytes
                      (default: a secret generated in the database)
  session-keys        BTK_SESSION_KEYS: session signing keys that can be
                      rotated, ID=SECRET[,ID=SECRET...]; the first signs, the
                      others verify (docs/security.md); replaces secret
  session-keys-file   BTK_SESSION_KEYS_FILE: the same, one ID=SECRET a line
  bootstrap-email     BTK_BOOTSTRAP_EMAIL: the first platform admin
  bootstrap-password  BTK_BOOTSTRAP_PASSWORD: its password
  gc-percent          BTK_GC_PERCENT: the Go garbage collector's target, as
                      GOGC; -1 turns it off (default: 400, or GOGC when that
                      is set; 400 trades some 12 MiB of heap for about a
                      third less CPU per authenticated request)
An unknown key, a value of the wrong type (in the file or the environment) or
a missing --config file stops btk serve with exit status 2, before it listens.
The CLI's login state is kept apart (credentials.yaml); btk login never
writes this file. GOGC and GOMEMLIMIT work as for any Go program.`,
		Example: `  btk serve
  BTK_DB=/var/lib/btk/btk.db btk serve --addr 0.0.0.0:8080 --log-format json
  btk serve --proxy-addr 0.0.0.0:8000 --upstream http://127.0.0.1:9000   # keys checked in front of your service
  btk serve --db postgres://btk@db.internal/btk --redis redis://cache.internal:6379/0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// Before anything slow: a SIGHUP while btk starts waits in
			// hangup.C (caught since the process began; again here after
			// a Release in tests) and reloads once it serves.
			hangup.Catch()
			cfg, err := loadServeConfig(cmd, os.Getenv)
			if err != nil {
				return err
			}
			return serve(cmd.Context(), cfg, cmd.ErrOrStderr())
		},
	}
	addServeFlags(cmd.Flags())
	return cmd
}

func serve(ctx context.Context, cfg serveConfig, stderr io.Writer) error {
	log, err := newLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	start := time.Now()
	upstream, err := proxyUpstream(cfg)
	if err != nil {
		return err
	}
	ops, err := newOps(cfg, buildInfo())
	if err != nil {
		// A setting names a file or a value that does not serve: the
		// operator's mistake, as a config error is (exit 2).
		return &usageError{err.Error()}
	}
	if gc := gcPercent(cfg.GCPercent, os.Getenv("GOGC")); gc != 0 {
		debug.SetGCPercent(gc)
	}
	// Listen first: a port in use fails before the database is touched, so
	// no bootstrap happens (and no one-time password is printed) for nothing.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	var pln net.Listener
	if upstream != nil {
		if pln, err = net.Listen("tcp", cfg.ProxyAddr); err != nil {
			return err
		}
		defer pln.Close()
	}
	if err := ops.listen(log); err != nil {
		return err
	}
	defer ops.shutdown()
	db, err := store.Open(ctx, cfg.DB, cfg.Redis != "")
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer closeStore(db, log)
	svcCfg := btk.Config{DefaultPerMinute: cfg.RatePerMinute, DefaultPerDay: cfg.RatePerDay, Observer: ops.observer(), SessionKeys: cfg.sessionKeys, UsageRetention: cfg.UsageRetention}
	if cfg.Redis != "" {
		closeShared, err := openShared(ctx, cfg, &svcCfg, ops.registerer(), log)
		if err != nil {
			return err
		}
		defer closeShared()
	}
	svcCfg.WebhookAllowPrivate = cfg.WebhookAllowPrivate
	svcCfg.Log = log
	svc, err := btk.NewService(ctx, db, []byte(cfg.Secret), svcCfg)
	if err != nil {
		return err
	}
	boot, err := svc.Bootstrap(ctx, cfg.BootstrapEmail, cfg.BootstrapPassword)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if boot.Created {
		log.Info("bootstrapped an empty database", "admin", boot.Email, "workspace", boot.Workspace.ID)
		if boot.Password != "" {
			// Printed once, to the operator's terminal, never to the log.
			fmt.Fprintf(stderr, "\nbtk: created platform admin %s with password\n\n    %s\n\nThis is shown once. Log in with `btk login --email %s`.\n\n",
				boot.Email, boot.Password, boot.Email)
		}
	}

	svc.SetAccessRules(ops.rules)
	ops.setRules = svc.SetAccessRules
	if ops.rulesFile != "" {
		log.Info("access rules loaded", "file", ops.rulesFile, "rules", ops.rules.Len())
	}

	// One client address holds at most a sixteenth of the connections; a
	// trusted proxy carries many clients' (docs/security.md).
	server.LimitConnsPerAddress(ops.proxies.Trusts)
	handler := server.New(svc, db, log, server.WithTrustedProxies(ops.proxies), server.WithLeakReportKeys(ops.leakKeys), server.WithUpstreamTimeout(cfg.UpstreamTimeout))
	if cfg.Dashboard {
		handler.Mount(web.New(svc, log, handler.ClientIP), web.Patterns...)
	}
	srv := &http.Server{
		Handler:           ops.instrument("other", handler),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second, // graphql.UserOperationTimeout: a user's operation stops with it
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          server.ErrorLog(log, ops.metrics),
	}
	servers := []*http.Server{srv}
	listeners := []net.Listener{ln}
	guards := []*server.ConnGuard{nil} // nil: the process's
	if upstream != nil {
		servers = append(servers, newProxyServer(ops.instrument("proxy", handler.Proxy(upstream)), log, ops.metrics))
		listeners = append(listeners, pln)
		guards = append(guards, nil)
		log.Info("btk reverse proxy listening", "addr", pln.Addr().String(), "upstream", btk.RedactURL(cfg.Upstream), "tls", ops.cert != nil)
	}
	if msrv := ops.metricsServer(db, log); msrv != nil {
		servers = append(servers, msrv)
		listeners = append(listeners, ops.metricsLn)
		// Its own connections: a flood of the other listeners from the
		// scraper's address does not blind Prometheus (docs/operating.md#metrics).
		guards = append(guards, server.NewMetricsGuard(ops.proxies.Trusts))
	}
	log.Info("btk serve listening", "addr", ln.Addr().String(), "tls", ops.cert != nil, "db", displayDB(cfg.DB), "startup", time.Since(start).Round(time.Millisecond))

	flushCtx, stopFlush := context.WithCancel(context.Background())
	defer stopFlush()
	var wg sync.WaitGroup
	wg.Go(func() { flushLoop(flushCtx, svc, log, ops) })
	wg.Go(func() { ops.reloadOnHangup(flushCtx, log) })
	// The webhook outbox's delivery (docs/webhooks.md): off the request path.
	deliveries := events.New(svc, events.Config{AllowPrivate: cfg.WebhookAllowPrivate, Registerer: ops.registerer(), Log: log})
	wg.Go(func() { deliveries.Run(flushCtx) })
	wg.Go(func() { sweepLoop(flushCtx, svc, log) })
	if cfg.Redis != "" {
		wg.Go(func() { tellLoop(flushCtx, svc, log) })
	}

	serveErr := make(chan error, len(servers))
	for i, s := range servers {
		go func() { // TLS on every listener
			if guards[i] != nil {
				serveErr <- server.ServeGuarded(s, listeners[i], ops.cert, guards[i])
				return
			}
			serveErr <- server.Serve(s, listeners[i], ops.cert)
		}()
	}
	select {
	case err = <-serveErr: // one listener failed: stop the others too
	case <-ctx.Done():
		log.Info("shutting down: draining requests")
	}
	stopCtx, abort := context.WithTimeout(context.Background(), stopTimeout)
	defer abort()
	defer abortOnSecondSignal(abort, log)()
	// The loops end now: the final flush below writes what they would have.
	stopFlush()
	err = errors.Join(err, shutdownAll(stopCtx, servers, log))
	if waitAll(stopCtx, &wg) != nil {
		log.Warn("background work still running at the stop deadline")
	}
	// Canary uses seen by the drained requests are written, or kept for the
	// final flush (docs/leaks.md#canary-keys).
	_ = svc.WaitCanaryRecords(stopCtx)
	if ferr := finalFlush(stopCtx, svc, log); ferr != nil {
		err = errors.Join(err, &stopLossError{ferr})
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	log.Info("stopped")
	return err
}

// stopTimeout bounds a stop from its signal to the final flush's last
// attempt: the drain (drainTimeout), then the flush retried until this
// deadline (10 s or more of it after a full drain). With the store's close
// (closeTimeout) a stop ends within about 30 s whatever the database does,
// inside deploy/btk.service's TimeoutStopSec (docs/operating.md#stopping).
const stopTimeout = 25 * time.Second

// closeTimeout bounds the store's close at the end of a stop. A PostgreSQL
// that does not answer holds pgxpool's close of its connections for 15 s
// each; the process exits anyway, and the kernel closes the sockets (the
// server then ends the backends and releases the instance lock).
const closeTimeout = 3 * time.Second

// closeStore closes db, waiting at most closeTimeout.
func closeStore(db io.Closer, log *slog.Logger) {
	done := make(chan struct{})
	go func() { _ = db.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(closeTimeout):
		log.Warn("the database connections did not close in time; exiting without waiting", "after", closeTimeout.String())
	}
}

// stopLossError is a stop that could not store everything: btk serve exits
// 1 even though a signal began the stop (docs/operating.md#stopping).
type stopLossError struct{ error }

func (e *stopLossError) Unwrap() error { return e.error }

// finalFlushRetry is the pause between the final flush's attempts.
const finalFlushRetry = 500 * time.Millisecond

// finalFlush writes every pending use, retried until ctx ends. What it
// could not write is logged at ERROR as counts (no key) and returned: btk
// serve then exits 1, so that a supervisor or a script sees the loss
// (docs/usage.md: every request answered before the stop is in the
// database, or the exit status says otherwise).
func finalFlush(ctx context.Context, svc *btk.Service, log *slog.Logger) error {
	var err error
	for attempt := 1; ; attempt++ {
		if err = svc.FlushUsage(ctx); err == nil {
			return nil
		}
		if ctx.Err() != nil {
			break
		}
		log.Warn("final usage flush failed; retrying until the stop deadline", "attempt", attempt, "err", err)
		t := time.NewTimer(finalFlushRetry)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	uses, keys := svc.UnflushedUsage()
	canaryUses, canaryKeys := svc.UnrecordedCanaryUses()
	log.Error("final usage flush failed: usage not stored", "uses", uses, "keys", keys,
		"canary_uses", canaryUses, "canary_keys", canaryKeys, "err", err)
	return fmt.Errorf("final usage flush failed: %d uses of %d keys and %d canary uses of %d keys not stored: %w",
		uses, keys, canaryUses, canaryKeys, err)
}

// abortOnSecondSignal calls abort on a second SIGINT or SIGTERM, which ends
// the stop at once: what is still in flight is cut, and the final flush
// reports what it could not write (docs/operating.md#stopping). The returned
// function stops listening.
func abortOnSecondSignal(abort func(), log *slog.Logger) (stop func()) {
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-again:
			log.Warn("second signal: stopping at once; requests in flight are cut and usage not yet written is lost")
			abort()
		case <-done:
		}
	}()
	return func() { signal.Stop(again); close(done) }
}

// waitAll waits for wg until ctx ends.
func waitAll(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// proxyUpstream checks --proxy-addr and --upstream: both or neither.
func proxyUpstream(cfg serveConfig) (*url.URL, error) {
	if cfg.ProxyAddr == "" && cfg.Upstream == "" {
		return nil, nil
	}
	if cfg.ProxyAddr == "" || cfg.Upstream == "" {
		return nil, errors.New("--proxy-addr and --upstream go together")
	}
	u, err := url.Parse(cfg.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// Quoted as logged: a password or token in it stays out of the error.
		return nil, fmt.Errorf("--upstream must be an http:// or https:// URL, not %q", btk.RedactURL(cfg.Upstream))
	}
	return u, nil
}

// newProxyServer serves the reverse proxy. It has no read or write timeout:
// uploads, downloads and WebSockets may last as long as the upstream allows,
// and over HTTP/2 an upload gets Go's receive window, not the API's.
func newProxyServer(h http.Handler, log *slog.Logger, m *server.Metrics) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          server.ErrorLog(log, m),
		HTTP2:             server.StreamingHTTP2(),
	}
}

// drainTimeout is how long a stop waits for the requests in flight.
const drainTimeout = 15 * time.Second

// shutdownAll drains every listener together, within drainTimeout (and
// ctx: a second signal ends it at once); what is still open then (a long
// download, a WebSocket) is closed, which is how a stop ends, not a
// failure (docs/operating.md).
func shutdownAll(ctx context.Context, servers []*http.Server, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, drainTimeout)
	defer cancel()
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			errs[i] = s.Shutdown(ctx)
			if errors.Is(errs[i], context.DeadlineExceeded) || errors.Is(errs[i], context.Canceled) {
				if errors.Is(errs[i], context.DeadlineExceeded) {
					log.Warn("drain deadline passed: closing the connections still open", "after", drainTimeout.String())
				}
				_ = s.Close()
				errs[i] = nil
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// flushLoop writes last_used_at and day counts about once a second (each
// key at most every btk.UsageWriteInterval; the rest at shutdown).
func flushLoop(ctx context.Context, svc *btk.Service, log *slog.Logger, ops *opsState) {
	every(ctx, time.Second, func() time.Duration {
		start := time.Now()
		err := svc.FlushDueUsage(ctx)
		ops.observeFlush(time.Since(start), err)
		if err != nil && ctx.Err() == nil {
			log.Error("last_used_at flush failed", "err", err)
		}
		return time.Second
	})
}

// The unused-key sweep runs every sweepEvery, and sweepRetry after a run
// that failed: a run that revoked keys but could not tell the other
// instances is told by the next run (docs/access.md#workspace-key-policy),
// soon rather than a minute later.
const (
	sweepFirst = 10 * time.Second // after start
	sweepEvery = time.Minute
	sweepRetry = 10 * time.Second
)

// unusedKeySweeper is what sweepLoop runs: a *btk.Service, or in a test
// the same service called from outside a synctest bubble, so that the
// schedule is checked on a fake clock (TestSweepRetriedAfterAFailedRun).
type unusedKeySweeper interface {
	SweepUnusedKeys(ctx context.Context) (int, error)
}

// sweepLoop revokes the keys the workspaces' policies find unused
// (revokeUnusedAfterDays), shortly after start and then every minute; every
// instance runs it, and each key is revoked and audited once
// (btk.Service.SweepUnusedKeys).
func sweepLoop(ctx context.Context, svc unusedKeySweeper, log *slog.Logger) {
	every(ctx, sweepFirst, func() time.Duration {
		n, err := svc.SweepUnusedKeys(ctx)
		if n > 0 {
			log.Info("revoked unused keys (workspace key policy)", "count", n)
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("unused-key sweep failed; retrying soon", "err", err, "retry", sweepRetry)
			return sweepRetry
		}
		return sweepEvery
	})
}

// tellEvery is how often an instance tells the other instances of the
// changes listed as untold: one committed by an instance killed before it
// told reaches the others within about this (docs/clusters.md#shared-state-in-redis).
// One settings read an instance each time; one node has no one to tell
// and does not run it.
const tellEvery = 2 * time.Second

// untoldTeller is what tellLoop runs: a *btk.Service.
type untoldTeller interface {
	TellUntold(ctx context.Context) error
}

// tellLoop tells the workspaces listed as untold every tellEvery, on every
// instance. A failure is logged once, until a run succeeds again: while
// Redis is down, every key check says so already (503).
func tellLoop(ctx context.Context, svc untoldTeller, log *slog.Logger) {
	failing := false
	every(ctx, tellEvery, func() time.Duration {
		err := svc.TellUntold(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			log.Warn("could not tell the other instances of a committed change; retrying", "err", err, "every", tellEvery)
		case err == nil && failing:
			failing = false
			log.Info("told the other instances of the changes that were waiting")
		}
		return tellEvery
	})
}

// every runs work once first has passed, then again, each time after the
// wait the run returned, until ctx ends.
func every(ctx context.Context, first time.Duration, work func() (next time.Duration)) {
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			t.Reset(work())
		}
	}
}

// parseLevel reads a --log-level.
func parseLevel(level string) (slog.Level, error) {
	var lvl slog.Level
	err := lvl.UnmarshalText([]byte(level))
	return lvl, err
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	lvl, err := parseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format must be text or json, not %q", format)
}

// DefaultGCPercent is btk serve's garbage collector target when neither
// gc-percent nor GOGC says otherwise. A request allocates ~8 KiB and the live
// heap is ~1 MiB, so at Go's 100 the collector runs every few milliseconds;
// at 400 an authenticated tenantInfo costs about a third less CPU for some
// 12 MiB more heap (bench/README.md).
const DefaultGCPercent = 400

// gcPercent is the collector target serve sets: the setting's when given
// (non-zero), else DefaultGCPercent unless the GOGC variable is set; 0 means
// set nothing (Go has read GOGC itself).
func gcPercent(setting int, gogc string) int {
	switch {
	case setting != 0:
		return setting
	case gogc != "":
		return 0
	}
	return DefaultGCPercent
}
