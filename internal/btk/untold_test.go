package btk_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/storetest"
)

// The list of untold workspaces (untold.go) on one node: two instances are
// tested in internal/redisstate (untold_test.go).

// unreachableGate is a shared state that cannot be told (Redis down).
type unreachableGate struct{ btk.KeyGate }

func (unreachableGate) Changed(context.Context, string) error {
	return errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
}

// One node (SQLite, no Redis) has no other instance to tell: its tell
// cannot fail, so the unused-key sweep and a leak report leave nothing
// listed, and the node refuses the revoked key at once (it dropped it from
// its own cache). A list left by a run that could not tell (a node that
// ran with --redis while Redis was down, then restarted without it) is
// emptied by the next sweep run.
func TestOneNodeLeavesNothingUntold(t *testing.T) {
	e := newLeakEnv(t)
	ctx := context.Background()
	days := 1
	if _, err := e.svc.SetWorkspaceKeyPolicy(ctx, e.owner, e.owner.WorkspaceID, nil, &days); err != nil {
		t.Fatal(err)
	}
	refused := func(k *btk.NewKeyResult) bool {
		t.Helper()
		_, _, err := e.svc.AuthenticateKey(ctx, k.Plaintext)
		if err != nil && !errors.Is(err, btk.ErrKeyRevokedOrExpired) {
			t.Fatal(err)
		}
		return err != nil
	}
	idle, err := e.svc.CreateKey(ctx, e.owner, btk.CreateKeyInput{Name: "idle"})
	if err != nil {
		t.Fatal(err)
	}
	if refused(idle) { // cached
		t.Fatal("a new key is refused")
	}
	e.advance(49 * time.Hour)
	if n, err := e.svc.SweepUnusedKeys(ctx); n != 1 || err != nil {
		t.Fatalf("sweep: %d keys, %v; want 1, nil", n, err)
	}
	if u := storetest.Untold(t, e.db); len(u) != 0 {
		t.Fatalf("after a sweep on one node: listed %v", u)
	}
	if !refused(idle) {
		t.Fatal("the node accepts the key its sweep revoked")
	}

	leaked, err := e.svc.CreateKey(ctx, e.owner, btk.CreateKeyInput{Name: "leaked"})
	if err != nil {
		t.Fatal(err)
	}
	report := func(svc *btk.Service) error {
		leak := []btk.LeakReport{{Token: leaked.Plaintext, URL: "https://example.com/leak", Source: "content"}}
		_, err := svc.ReportLeaks(ctx, btk.Reporter{Actor: e.admin}, leak)
		return err
	}
	// Left listed by a node that could not tell, on the same database (it
	// stands for the node before a restart: its key cache is gone).
	cut, err := btk.NewService(ctx, e.db, []byte(strings.Repeat("s", 32)), btk.Config{KeyGate: unreachableGate{btk.NewLocalGate()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := report(cut); btk.ErrorCode(err) != btk.CodeUnavailable {
		t.Fatalf("leak report that cannot tell: %v, want UNAVAILABLE", err)
	}
	if u := storetest.Untold(t, e.db); len(u) != 1 || u[e.owner.WorkspaceID] == "" {
		t.Fatalf("listed %v, want the workspace %s", u, e.owner.WorkspaceID)
	}
	if _, err := e.svc.SweepUnusedKeys(ctx); err != nil {
		t.Fatal(err)
	}
	if u := storetest.Untold(t, e.db); len(u) != 0 {
		t.Fatalf("after the one node's sweep run: still listed %v", u)
	}
	// The report repeated on the node itself tells, and lists nothing.
	if err := report(e.svc); err != nil {
		t.Fatal(err)
	}
	if u := storetest.Untold(t, e.db); len(u) != 0 {
		t.Fatalf("after a replayed report: listed %v", u)
	}
}
