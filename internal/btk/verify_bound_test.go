package btk

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// verifyStore holds every Read until gate is closed and counts them; the
// other methods are not used by VerifyAuditChain.
type verifyStore struct {
	Store
	gate  chan struct{}
	reads atomic.Int64
}

func (s *verifyStore) Read(ctx context.Context, fn func(Tx) error) error {
	s.reads.Add(1)
	<-s.gate
	return nil
}

// At most MaxChainVerifications verifications read a chain at once, and a
// chain is verified once at a time; the others are refused UNAVAILABLE at
// once without reading, and once the running ones end a new one runs. Before,
// one owner verifying its chain in a loop held every slot, and no other
// workspace could verify its own.
func TestChainVerificationsBounded(t *testing.T) {
	st := &verifyStore{gate: make(chan struct{})}
	s, err := NewService(context.Background(), st, []byte(strings.Repeat("s", 32)), Config{})
	if err != nil {
		t.Fatal(err)
	}
	admin := &Actor{AccountID: "p", PlatformAdmin: true}
	owner := func(ws string) *Actor { return &Actor{AccountID: "o-" + ws, WorkspaceID: ws, Role: RoleOwner} }
	started := func(n int64) {
		t.Helper()
		for i := 0; st.reads.Load() < n; i++ {
			if i == 10000 {
				close(st.gate)
				t.Fatalf("%d verifications started, want %d", st.reads.Load(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	refused := func(what string, a *Actor, serverWide bool) {
		t.Helper()
		for range 10 {
			if _, err := s.VerifyAuditChain(context.Background(), a, "", serverWide); ErrorCode(err) != CodeUnavailable {
				t.Fatalf("%s: %v, want UNAVAILABLE", what, err)
			}
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := s.VerifyAuditChain(context.Background(), owner("w1"), "", false); err != nil {
			t.Error(err)
		}
	})
	started(1)
	refused("a second verification of the same chain", owner("w1"), false)
	// Other chains take the other slots.
	wg.Go(func() {
		if _, err := s.VerifyAuditChain(context.Background(), admin, "", true); err != nil {
			t.Error(err)
		}
	})
	started(MaxChainVerifications)
	refused(fmt.Sprintf("a verification beyond %d at once", MaxChainVerifications), owner("w2"), false)
	if n := st.reads.Load(); n != MaxChainVerifications {
		t.Fatalf("%d chain reads, want %d (refusals read nothing)", n, MaxChainVerifications)
	}
	close(st.gate)
	wg.Wait()
	for _, a := range []*Actor{owner("w1"), owner("w2")} {
		if _, err := s.VerifyAuditChain(context.Background(), a, "", false); err != nil {
			t.Fatalf("after the others ended: %v", err)
		}
	}
	if n := s.verifyTurns.size(); n != 0 {
		t.Errorf("%d chains still have a turn after every verification ended", n)
	}
}

// A name's turn is kept only while someone holds or waits for it: the map
// does not grow with the workspaces ever read.
func TestTurnsForgetIdleNames(t *testing.T) {
	var tr turns
	for i := range 1000 {
		name := fmt.Sprint(i)
		a, b := tr.join(name), tr.join(name)
		if a != b {
			t.Fatal("two callers of one name got two turns")
		}
		tr.leave(name, a)
		tr.leave(name, b)
	}
	if n := tr.size(); n != 0 {
		t.Errorf("%d names kept after every caller left", n)
	}
}

// A scan that gives up (its wait over, or its request gone) leaves nothing
// behind: neither the workspace's turn nor a slot.
func TestScanGivingUpLeavesNothing(t *testing.T) {
	s, err := NewService(context.Background(), &verifyStore{gate: make(chan struct{})}, []byte(strings.Repeat("s", 32)), Config{ScanWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	release, err := s.scan(context.Background(), "w1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.scan(context.Background(), "w1"); err != ErrScansBusy {
		t.Errorf("the workspace's second scan: %v, want ErrScansBusy", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.scan(ctx, "w1"); err != context.Canceled {
		t.Errorf("a scan whose request is gone: %v, want context.Canceled", err)
	}
	other, err := s.scan(context.Background(), "w2")
	if err != nil {
		t.Fatalf("another workspace's scan: %v", err)
	}
	if _, err := s.scan(context.Background(), "w3"); err != ErrScansBusy {
		t.Errorf("a scan beyond MaxScans: %v, want ErrScansBusy", err)
	}
	release()
	other()
	if n, slots := s.scanTurns.size(), len(s.scans); n != 0 || slots != 0 {
		t.Errorf("after every scan ended: %d turns, %d slots held", n, slots)
	}
}
