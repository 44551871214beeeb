package btk

import (
	"context"
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

// At most MaxChainVerifications verifications read a chain at once; the
// others are refused UNAVAILABLE at once without reading, and once the
// running ones end a new one runs.
func TestChainVerificationsBounded(t *testing.T) {
	st := &verifyStore{gate: make(chan struct{})}
	s, err := NewService(context.Background(), st, []byte(strings.Repeat("s", 32)), Config{})
	if err != nil {
		t.Fatal(err)
	}
	admin := &Actor{AccountID: "p", PlatformAdmin: true}
	var wg sync.WaitGroup
	for range MaxChainVerifications {
		wg.Go(func() {
			if _, err := s.VerifyAuditChain(context.Background(), admin, "", true); err != nil {
				t.Error(err)
			}
		})
	}
	for i := 0; st.reads.Load() < MaxChainVerifications; i++ {
		if i == 10000 {
			close(st.gate)
			t.Fatalf("%d verifications started, want %d", st.reads.Load(), MaxChainVerifications)
		}
		time.Sleep(time.Millisecond)
	}
	for range 10 {
		_, err := s.VerifyAuditChain(context.Background(), admin, "", true)
		if ErrorCode(err) != CodeUnavailable {
			t.Fatalf("a verification beyond %d at once: %v, want UNAVAILABLE", MaxChainVerifications, err)
		}
	}
	if n := st.reads.Load(); n != MaxChainVerifications {
		t.Fatalf("%d chain reads, want %d (refusals read nothing)", n, MaxChainVerifications)
	}
	close(st.gate)
	wg.Wait()
	if _, err := s.VerifyAuditChain(context.Background(), admin, "", true); err != nil {
		t.Fatalf("after the others ended: %v", err)
	}
}
