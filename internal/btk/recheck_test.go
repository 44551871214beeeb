package btk

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recheckStore answers APIKeyByHash with its key, counting the reads.
type recheckStore struct {
	Store
	reads   atomic.Int64
	revoked atomic.Bool
	gate    chan struct{} // when set, reads wait for it
}

func (s *recheckStore) Read(ctx context.Context, fn func(Tx) error) error {
	return fn(recheckTx{s: s})
}

type recheckTx struct {
	Tx
	s *recheckStore
}

func (t recheckTx) Workspace(_ context.Context, id string) (*Workspace, error) {
	return &Workspace{ID: id}, nil
}

func (t recheckTx) APIKeyByHash(context.Context, []byte) (*APIKey, error) {
	t.s.reads.Add(1)
	if t.s.gate != nil {
		<-t.s.gate
	}
	k := &APIKey{ID: "k", WorkspaceID: "w"}
	if t.s.revoked.Load() {
		now := time.Now()
		k.RevokedAt = &now
	}
	return k, nil
}

// With several instances, the proxied connections of one key share the
// database reads that recheck it: 1,000 connections checking at once are
// one read, and a key costs at most one read per keyRecheckShared however
// many connections it has (5,000 streams of one key were 5,000 reads a
// second). A revocation is still seen once the shared answer is older than
// keyRecheckShared, and KeyWatchInterval plus that age is a second.
func TestKeyRechecksShareReads(t *testing.T) {
	st := &recheckStore{gate: make(chan struct{})}
	s, err := NewService(context.Background(), st, []byte(strings.Repeat("s", 32)), Config{KeyGate: NewLocalGate()})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s.rechecks.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	key := KeyPrefix + strings.Repeat("a", KeyLen-len(KeyPrefix))
	if !WellFormedKey(key) {
		t.Skip("the test key is not well formed")
	}
	var wg sync.WaitGroup
	var valid atomic.Int64
	for range 1000 {
		wg.Go(func() {
			if ok, err := s.KeyStillValid(context.Background(), key, nil); ok && err == nil {
				valid.Add(1)
			}
		})
	}
	for st.reads.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(st.gate)
	wg.Wait()
	if n := st.reads.Load(); n != 1 || valid.Load() != 1000 {
		t.Fatalf("1,000 rechecks of one key at once: %d reads, %d valid; want 1 read, 1,000 valid", n, valid.Load())
	}
	for range 100 {
		s.KeyStillValid(context.Background(), key, nil)
	}
	if n := st.reads.Load(); n != 1 {
		t.Fatalf("100 rechecks within %v: %d reads, want 1", keyRecheckShared, n)
	}
	st.revoked.Store(true)
	advance(keyRecheckShared)
	if ok, err := s.KeyStillValid(context.Background(), key, nil); ok || err != nil || st.reads.Load() != 2 {
		t.Fatalf("after a revocation and %v: valid %v, err %v, %d reads", keyRecheckShared, ok, err, st.reads.Load())
	}
	if d := s.KeyWatchInterval() + keyRecheckShared; d > time.Second {
		t.Fatalf("a connection may outlive its key's revocation by %v", d)
	}
}
