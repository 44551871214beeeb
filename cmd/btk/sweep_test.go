package main

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/redisstate"
	"github.com/btk-project/btk/internal/redisstate/redistest"
	"github.com/btk-project/btk/internal/store"
	"github.com/btk-project/btk/internal/testclock"
	"github.com/btk-project/btk/internal/testproc"
)

// sweepRun is what one run of the sweep did, and what the other instance
// answered for the key right after it.
type sweepRun struct {
	at       time.Duration // on the loop's clock, from its start
	revoked  int
	err      error
	accepted bool // by the other instance, after the run
}

// outsideSweeper runs, for sweepLoop inside a synctest bubble, the real
// sweep of a service outside it: the service's database and Redis
// connections belong to no bubble. The bubble's clock stands still while
// a run is under way (a goroutine waiting on a channel made outside the
// bubble is not durably blocked).
type outsideSweeper struct {
	start time.Time // the loop's start, on the bubble's clock
	runs  []sweepRun
	call  chan struct{} // made outside the bubble, as done
	done  chan sweepRun
}

func (s *outsideSweeper) SweepUnusedKeys(context.Context) (int, error) {
	at := time.Since(s.start)
	s.call <- struct{}{}
	r := <-s.done
	r.at = at
	s.runs = append(s.runs, r)
	return r.revoked, r.err
}

// A sweep run that revokes a key but cannot tell the other instances is
// run again sweepRetry (10 s) later rather than at the next scheduled run
// a minute later, and again while it keeps failing; the run that tells
// makes the other instance refuse the key, and the loop is back to its
// minute (docs/access.md#workspace-key-policy). Two real instances on one
// database and a redis-server of the test's own: a, whose loop this is,
// reaches Redis through a relay the test cuts for its first two runs; b
// reaches it directly and had the key cached. The loop runs on synctest's
// clock: no test waits 10 real seconds.
func TestSweepRetriedAfterAFailedRun(t *testing.T) {
	ctx := context.Background()
	r := redistest.Standalone(t)
	px := testproc.NewRelay(t, r.Addr())
	prefix := redistest.Prefix()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "btk.db"), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clk := testclock.Stopped()
	instance := func(url string) *btk.Service {
		st, err := redisstate.Open(url, prefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		st.UseClock(clk.Now)
		svc, err := btk.NewService(ctx, db, []byte(strings.Repeat("s", 32)), btk.Config{Now: clk.Now, KeyGate: st, Throttle: st.Throttle()})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	a, b := instance("redis://"+px.Addr+"/0"), instance(r.URL())
	boot, err := a.Bootstrap(ctx, "admin@example.com", "correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	info, err := a.Login(ctx, "admin@example.com", "correct horse battery", "")
	if err != nil {
		t.Fatal(err)
	}
	owner, err := a.ResolveSession(ctx, info.Token)
	if err != nil {
		t.Fatal(err)
	}
	days := 1
	if _, err := a.SetWorkspaceKeyPolicy(ctx, owner, boot.Workspace.ID, nil, &days); err != nil {
		t.Fatal(err)
	}
	k, err := a.CreateKey(ctx, owner, btk.CreateKeyInput{Name: "idle"})
	if err != nil {
		t.Fatal(err)
	}
	accepted := func() (bool, error) {
		_, _, err := b.AuthenticateKey(ctx, k.Plaintext)
		if errors.Is(err, btk.ErrKeyRevokedOrExpired) {
			return false, nil
		}
		return err == nil, err
	}
	if ok, err := accepted(); !ok { // cached on b
		t.Fatalf("the new key is refused: %v", err)
	}
	clk.Advance(49 * time.Hour)

	sw := &outsideSweeper{call: make(chan struct{}), done: make(chan sweepRun)}
	stop := make(chan struct{})
	var outside sync.WaitGroup
	outside.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-sw.call:
			}
			switch i {
			case 0:
				px.Cut()
			case 2:
				px.Restore()
			}
			var r sweepRun
			r.revoked, r.err = a.SweepUnusedKeys(ctx)
			var err error
			if r.accepted, err = accepted(); err != nil {
				r.err = errors.Join(r.err, err)
			}
			sw.done <- r
		}
	})
	var log testproc.Buffer // both the bubble and the test read it
	synctest.Test(t, func(t *testing.T) {
		loopCtx, cancel := context.WithCancel(context.Background())
		sw.start = time.Now()
		ended := make(chan struct{})
		go func() {
			sweepLoop(loopCtx, sw, slog.New(slog.NewTextHandler(&log, nil)))
			close(ended)
		}()
		time.Sleep(95 * time.Second)
		cancel()
		<-ended
	})
	close(stop)
	outside.Wait()

	at := make([]time.Duration, len(sw.runs))
	for i, r := range sw.runs {
		at[i] = r.at
	}
	if want := []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, 90 * time.Second}; !slices.Equal(at, want) {
		t.Fatalf("runs at %v, want %v: 10 s after start, 10 s after each failed run, a minute after one that succeeded", at, want)
	}
	for i, r := range sw.runs[:2] {
		if btk.ErrorCode(r.err) != btk.CodeUnavailable || !r.accepted {
			t.Errorf("run %d, cut off from Redis: %v, other instance accepts: %v; want UNAVAILABLE, true", i, r.err, r.accepted)
		}
	}
	if sw.runs[0].revoked != 1 {
		t.Errorf("the first run revoked %d keys, want 1", sw.runs[0].revoked)
	}
	for i, r := range sw.runs[2:] {
		if r.err != nil || r.accepted {
			t.Errorf("run %d, Redis reachable: %v, other instance accepts: %v; want no error, false", i+2, r.err, r.accepted)
		}
	}
	if n := strings.Count(log.String(), "unused-key sweep failed; retrying soon"); n != 2 {
		t.Errorf("%d failed runs logged, want 2:\n%s", n, log.String())
	}
}
