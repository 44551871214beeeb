package server_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
	"github.com/btk-project/btk/internal/testproc"
)

// A canary used while PostgreSQL refuses connections is answered as an
// unknown key at once, logged at WARN (without the key), kept, and written
// by the first usage flush that reaches the database again
// (docs/leaks.md#canary-keys).
func testCanaryKeptWhileUnreachable(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	relay := testproc.NewRelay(t, hostOf(t, url))
	var logs bytes.Buffer
	var logMu sync.Mutex
	withLog := func(c *btk.Config) {
		c.Log = slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))
	}
	e := newEnvOn(t, strings.Replace(url, hostOf(t, url), relay.Addr, 1), nil, withLog)
	owner := e.admin()
	trap := e.createKeyWith(owner, "trap", "canary:true")
	// The canary is known to the instance (a first use, recorded), as a
	// use while the database is down needs.
	if s, _, _ := e.raw(http.MethodGet, "/v1/authorize", "", nil, map[string]string{"X-Api-Key": trap.Plaintext}); s != http.StatusUnauthorized {
		t.Fatalf("canary: HTTP %d, want 401", s)
	}
	canaryEvents := func() int {
		var got struct {
			AuditEvents struct{ Nodes []struct{ TargetID string } }
		}
		e.must(owner, `query($a:String){auditEvents(action:$a){nodes{targetId}}}`, map[string]any{"a": btk.EventCanaryUsed}, &got)
		return len(got.AuditEvents.Nodes)
	}
	waitRecords := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.svc.WaitCanaryRecords(ctx); err != nil {
			t.Fatalf("canary records still running: %v", err)
		}
	}
	waitRecords()
	if n := canaryEvents(); n != 1 {
		t.Fatalf("%d canary events after the first use, want 1", n)
	}

	relay.Cut()
	// The lone instance notices within 0.1 s that its lock's connection is
	// gone; from then on it accepts no key, but a canary it knows is still
	// refused as unknown (docs/clusters.md#postgresql).
	hold, ok := e.db.(btk.InstanceHold)
	if !ok {
		t.Fatal("the PostgreSQL store reports no instance hold")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, held := hold.InstanceHold(); !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the instance did not notice its lock was lost")
		}
	}
	e.clock.Advance(2 * time.Minute) // past the once-a-minute mark
	if s, _, _ := e.raw(http.MethodGet, "/v1/authorize", "", nil, map[string]string{"X-Api-Key": trap.Plaintext}); s != http.StatusUnauthorized {
		t.Fatalf("canary with PostgreSQL unreachable: HTTP %d, want 401", s)
	}
	waitRecords()
	if uses, keys := e.svc.UnrecordedCanaryUses(); uses != 1 || keys != 1 {
		t.Fatalf("unrecorded canary uses %d of %d keys, want 1 of 1", uses, keys)
	}
	logMu.Lock()
	out := logs.String()
	logMu.Unlock()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "canary key's use could not be recorded") || strings.Contains(out, trap.Plaintext) {
		t.Fatalf("log after a canary use that could not be recorded:\n%s", out)
	}

	relay.Restore()
	deadline := time.Now().Add(30 * time.Second)
	for e.svc.FlushUsage(context.Background()) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the usage flush did not succeed after PostgreSQL came back")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if uses, keys := e.svc.UnrecordedCanaryUses(); uses != 0 || keys != 0 {
		t.Fatalf("unrecorded canary uses %d of %d keys after a flush, want none", uses, keys)
	}
	if n := canaryEvents(); n != 2 {
		t.Fatalf("%d canary events after the flush, want 2 (the use while unreachable recorded)", n)
	}
}
