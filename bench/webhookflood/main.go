// Command webhookflood replays, in one process and for about 20 s, the
// attack of docs/webhooks.md#the-backlog-bound on a fresh SQLite store: an
// owner's 10 webhooks to receivers that hang (5) or answer 500 (5), and
// updateApiKey as fast as one client goes; then, with the attacker quiet,
// it measures the process's CPU, another workspace's updateApiKey (one
// every 100 ms) and the delay of that workspace's deliveries to a receiver
// that answers at once. Figures: bench/README.md#webhook-claims-and-the-backlog.
//
//	go run ./bench/webhookflood [-flood 10s] [-after 8s]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/events"
	"github.com/btk-project/btk/internal/ratelimit"
	"github.com/btk-project/btk/internal/store/sqlite"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	flood := flag.Duration("flood", 10*time.Second, "how long the owner floods (at most 20s)")
	after := flag.Duration("after", 8*time.Second, "how long to measure afterwards (at most 20s)")
	flag.Parse()
	*flood, *after = min(*flood, 20*time.Second), min(*after, 20*time.Second)
	if err := run(*flood, *after); err != nil {
		log.Fatal(err)
	}
}

func run(flood, after time.Duration) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "webhookflood")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(ctx, filepath.Join(dir, "btk.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	// The flood as it was before a workspace's changes were budgeted
	// (docs/security.md#what-a-client-can-make-the-server-hold): the
	// backlog bound must hold on its own.
	unbudgeted := ratelimit.Limits{PerMinute: ratelimit.MaxLimit, PerDay: ratelimit.MaxLimit}
	svc, err := btk.NewService(ctx, db, []byte("0123456789abcdef0123456789abcdef"),
		btk.Config{WebhookAllowPrivate: true, ChangeBudget: unbudgeted})
	if err != nil {
		return err
	}
	boot, err := svc.Bootstrap(ctx, "owner@example.com", "correct horse battery staple")
	if err != nil {
		return err
	}
	var acct *btk.Account
	if err := db.Read(ctx, func(tx btk.Tx) (err error) { acct, err = tx.AccountByEmail(ctx, "owner@example.com"); return err }); err != nil {
		return err
	}
	owner := &btk.Actor{AccountID: acct.ID, Email: acct.Email, WorkspaceID: boot.Workspace.ID, Role: btk.RoleOwner,
		Elevated: true, PlatformAdmin: true, IP: "192.0.2.1"}
	ws, err := svc.CreateWorkspace(ctx, owner, "other", btk.PlanCloudPro)
	if err != nil {
		return err
	}
	other := *owner
	other.WorkspaceID = ws.ID

	hang := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer hanging.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }))
	defer failing.Close()
	delays := make(chan time.Duration, 1<<16)
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Data struct {
				CreatedAt time.Time `json:"createdAt"`
			} `json:"data"`
		}
		if json.NewDecoder(r.Body).Decode(&body) == nil {
			delays <- time.Since(body.Data.CreatedAt)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer ok.Close()
	for i := range btk.MaxWebhooksPerWorkspace {
		u := hanging.URL
		if i%2 == 1 {
			u = failing.URL
		}
		if _, err := svc.CreateWebhook(ctx, owner, u+"/"+strconv.Itoa(i), nil); err != nil {
			return err
		}
	}
	if _, err := svc.CreateWebhook(ctx, &other, ok.URL, []string{"api_key.updated"}); err != nil {
		return err
	}
	key, err := svc.CreateKey(ctx, owner, btk.CreateKeyInput{Name: "k"})
	if err != nil {
		return err
	}
	otherKey, err := svc.CreateKey(ctx, &other, btk.CreateKeyInput{Name: "v"})
	if err != nil {
		return err
	}

	runCtx, stop := context.WithCancel(ctx)
	worker := events.New(svc, events.Config{AllowPrivate: true})
	done := make(chan struct{})
	go func() { defer close(done); worker.Run(runCtx) }()
	defer func() { stop(); close(hang); <-done }()

	rename := func(a *btk.Actor, id, name string) error {
		_, err := svc.UpdateKey(ctx, a, id, btk.UpdateKeyInput{Name: btk.Change[string]{Set: true, Value: &name}})
		return err
	}
	start, n := time.Now(), 0
	for ; time.Since(start) < flood; n++ {
		if err := rename(owner, key.Key.ID, "k"+strconv.Itoa(n)); err != nil {
			return err
		}
	}
	st, err := svc.OutboxStats(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("flood: %d updateApiKey in %v (%.0f/s); outbox: %d pending, %d full backlogs, %d events skipped\n",
		n, flood, float64(n)/flood.Seconds(), st.Pending, st.Full, st.Skipped)

	cpu0, t0 := cpuTime(), time.Now()
	var lat []time.Duration
	for i := 0; time.Since(t0) < after; i++ {
		s := time.Now()
		if err := rename(&other, otherKey.Key.ID, "v"+strconv.Itoa(i)); err != nil {
			return err
		}
		lat = append(lat, time.Since(s))
		time.Sleep(100 * time.Millisecond)
	}
	elapsed, cpu := time.Since(t0), cpuTime()-cpu0
	slices.Sort(lat)
	fmt.Printf("after, attacker quiet: %.2f of a core over %v; the other workspace's updateApiKey p50 %v, p90 %v, max %v (%d)\n",
		cpu.Seconds()/elapsed.Seconds(), elapsed.Round(time.Millisecond), lat[len(lat)/2].Round(10*time.Microsecond),
		lat[len(lat)*9/10].Round(10*time.Microsecond), lat[len(lat)-1].Round(10*time.Microsecond), len(lat))
	var ds []time.Duration
	for len(delays) > 0 {
		ds = append(ds, <-delays)
	}
	if len(ds) > 0 {
		slices.Sort(ds)
		fmt.Printf("its deliveries: %d, delay p50 %v, max %v (the worker polls every second)\n",
			len(ds), ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	}
	return nil
}
