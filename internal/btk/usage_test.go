package btk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/ratelimit"
)

// usageStore records RecordUsage batches and fails while fail is set; while
// lose is set it writes and then reports the commit's answer lost, while
// loseUnwritten it reports the same without writing. As a real store it
// adds a flush's counts once per id. The other methods are not used by
// FlushUsage.
type usageStore struct {
	Store
	fail, lose, loseUnwritten bool
	batches                   [][]KeyUsage
	counts                    []UsageCount
	clients                   []KeyClient
	flushIDs                  map[string]bool
	pruned                    []time.Time
	prunedD                   []time.Time
}

func (s *usageStore) PruneDeliveries(_ context.Context, before time.Time) (int64, error) {
	s.prunedD = append(s.prunedD, before)
	return 0, nil
}

func (s *usageStore) PruneSessions(context.Context, time.Time) (int64, error) { return 0, nil }

func (s *usageStore) PruneUsageFlushes(context.Context, time.Time) (int64, error) { return 0, nil }

func (s *usageStore) RecordUsage(_ context.Context, u []KeyUsage, fs []UsageFlush, cl []KeyClient) error {
	switch {
	case s.fail:
		return errors.New("disk full")
	case s.loseUnwritten:
		return fmt.Errorf("connection reset (%w)", ErrCommitUnknown)
	}
	if len(u) > 0 {
		s.batches = append(s.batches, append([]KeyUsage(nil), u...))
	}
	if s.flushIDs == nil {
		s.flushIDs = map[string]bool{}
	}
	for _, f := range fs {
		if f.ID == "" || !s.flushIDs[f.ID] {
			s.flushIDs[f.ID] = true
			s.counts = append(s.counts, f.Counts...)
		}
	}
	s.clients = append(s.clients, cl...)
	if s.lose {
		return fmt.Errorf("connection reset (%w)", ErrCommitUnknown)
	}
	return nil
}

func (s *usageStore) PruneUsage(_ context.Context, before time.Time) (int64, error) {
	s.pruned = append(s.pruned, before)
	return 0, nil
}

// usageService is a Service on a usageStore of its own whose clock reads
// *now, so that a test moves time by setting now.
func usageService(t *testing.T, now *time.Time) (*Service, *usageStore) {
	t.Helper()
	st := &usageStore{}
	s, err := NewService(context.Background(), st, []byte(strings.Repeat("s", 32)), Config{Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	return s, st
}

// FlushUsage writes each used key's latest accepted request, keeps what a
// failed write did not store for the next flush, still writes the last use of
// a key forgotten (revoked) since, and writes nothing for refusals.
func TestFlushUsage(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := t0
	s, st := usageService(t, &now)
	ctx := context.Background()
	lim := ratelimit.Limits{PerMinute: 2, PerDay: 100}
	allow := func(key string, at time.Duration) bool {
		return s.gate.(localGate).Limiter.Allow(key, lim, t0.Add(at), 0).Allowed
	}
	usedAt := func(b []KeyUsage) map[string]time.Time {
		m := map[string]time.Time{}
		for _, u := range b {
			if u.DayState == 0 {
				t.Errorf("%s: no day state", u.KeyID)
			}
			m[u.KeyID] = u.LastUsedAt
		}
		return m
	}

	allow("a", 0)
	allow("a", time.Second)
	allow("a", 2*time.Second) // refused: 2 per minute
	allow("b", 3*time.Second)
	st.fail = true
	if err := s.FlushUsage(ctx); err == nil {
		t.Fatal("FlushUsage hid the store's error")
	}
	st.fail = false
	allow("b", 4*time.Second)
	s.forgetKey(&APIKey{ID: "b", Hash: make([]byte, 32)}) // as a revocation does
	if err := s.FlushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	if len(st.batches) != 1 {
		t.Fatalf("%d batches", len(st.batches))
	}
	got := usedAt(st.batches[0])
	if len(got) != 2 || !got["a"].Equal(t0.Add(time.Second)) || !got["b"].Equal(t0.Add(4*time.Second)) {
		t.Fatalf("batch %v", got)
	}

	// Refusals only: nothing to write.
	allow("a", 5*time.Second)
	if err := s.FlushUsage(ctx); err != nil || len(st.batches) != 1 {
		t.Fatalf("after refusals only: %v, %d batches", err, len(st.batches))
	}
}

// The once-a-second flush writes a key in use at most every
// UsageWriteInterval (its first use at once), so its cost does not grow with
// the number of keys used each second; FlushUsage (shutdown) writes the rest.
func TestFlushDueUsage(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := t0
	s, st := usageService(t, &now)
	ctx := context.Background()
	lim := ratelimit.Limits{PerMinute: 1000, PerDay: 100000}
	const keys = 1000
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("key-%d", i)
	}
	writes := map[string][]time.Time{}
	const seconds = 95
	for sec := 0; sec <= seconds; sec++ {
		now = t0.Add(time.Duration(sec) * time.Second)
		for _, k := range names {
			if !s.gate.(localGate).Limiter.Allow(k, lim, now, 0).Allowed {
				t.Fatal("refused")
			}
		}
		if err := s.FlushDueUsage(ctx); err != nil {
			t.Fatal(err)
		}
		for _, b := range st.batches {
			for _, u := range b {
				writes[u.KeyID] = append(writes[u.KeyID], u.LastUsedAt)
			}
		}
		st.batches = nil
	}
	for _, k := range names {
		w := writes[k]
		// at 0, 30, 60, 90 s
		if len(w) != 4 || !w[0].Equal(t0) || !w[3].Equal(t0.Add(90*time.Second)) {
			t.Fatalf("%s written at %v, want every 30 s from its first use", k, w)
		}
	}
	// Shutdown: the last use of every key, whatever is due.
	if err := s.FlushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	if len(st.batches) != 1 || len(st.batches[0]) != keys {
		t.Fatalf("final flush: %d batches", len(st.batches))
	}
	for _, u := range st.batches[0] {
		if !u.LastUsedAt.Equal(now) {
			t.Fatalf("final flush wrote %v for %s, want %v", u.LastUsedAt, u.KeyID, now)
		}
	}
	// A failed write keeps the usage for the next flush.
	st.batches, st.fail = nil, true
	now = now.Add(time.Minute)
	s.gate.(localGate).Limiter.Allow(names[0], lim, now, 0)
	if err := s.FlushDueUsage(ctx); err == nil {
		t.Fatal("the store's error was hidden")
	}
	st.fail = false
	if err := s.FlushDueUsage(ctx); err != nil || len(st.batches) != 1 || !st.batches[0][0].LastUsedAt.Equal(now) {
		t.Fatalf("after a failed write: %v, %+v", err, st.batches)
	}
}
