package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// countingStore counts the usage reads the service makes (UsageSeries,
// TopKeys, and keys read by id): what an operation makes the database do.
type countingStore struct {
	btk.Store
	series, top, keys *atomic.Int64
}

func (s countingStore) Read(ctx context.Context, fn func(btk.Tx) error) error {
	return s.Store.Read(ctx, func(tx btk.Tx) error { return fn(countingTx{tx, s}) })
}

type countingTx struct {
	btk.Tx
	s countingStore
}

func (t countingTx) UsageSeries(ctx context.Context, f btk.UsageFilter) ([]btk.UsageCount, error) {
	t.s.series.Add(1)
	return t.Tx.UsageSeries(ctx, f)
}

func (t countingTx) TopKeys(ctx context.Context, f btk.UsageFilter, n int) ([]btk.UsageCount, error) {
	t.s.top.Add(1)
	return t.Tx.TopKeys(ctx, f, n)
}

func (t countingTx) APIKey(ctx context.Context, id string) (*btk.APIKey, error) {
	t.s.keys.Add(1)
	return t.Tx.APIKey(ctx, id)
}

func newCountingEnv(t *testing.T) (*env, countingStore) {
	cs := countingStore{series: new(atomic.Int64), top: new(atomic.Int64), keys: new(atomic.Int64)}
	e := newWrappedEnv(t, func(s btk.Store) btk.Store { cs.Store = s; return cs })
	return e, cs
}

// The usage point budget of an operation (20,000) is spent before the
// database is read: a page of keys each asking for 90 days of hours (2,160
// points) reads the series of at most 9 keys, not of every key of the page
// (500 keys, in aliases, were 500 reads and 1.08 million points built
// before the budget refused them).
func TestUsagePointsBudgetSpentBeforeReading(t *testing.T) {
	t.Parallel()
	e, cs := newCountingEnv(t)
	owner := e.admin()
	const n = 30
	for i := range n {
		e.createKey(owner, fmt.Sprintf("k%02d", i))
	}
	since := e.clock.Now().Add(-89 * 24 * time.Hour).Format(time.RFC3339)
	cs.series.Store(0)
	r := e.do(owner, `query($s:Time){apiKeys(first:30){nodes{id usage(granularity:HOUR,since:$s){start}}}}`, map[string]any{"s": since})
	if len(r.Errors) == 0 || !strings.Contains(r.Errors[0].Message, "usage points") {
		t.Fatalf("HTTP %d, errors %+v: want the usage points budget refused", r.Status, r.Errors)
	}
	if got := cs.series.Load(); got > 20_000/(89*24) {
		t.Fatalf("%d usage series read for a budget of %d series: the budget is spent after the reads", got, 20_000/(89*24))
	}
}

// topKeys is a page: its rows cost like apiKeys' (20 rows a field), so
// aliases of workspaceUsage{topKeys(first:100)} cannot make one operation
// read thousands of keys (125 aliases were 125 aggregates and 12,500 key
// reads).
func TestTopKeysCostItsRows(t *testing.T) {
	t.Parallel()
	e, cs := newCountingEnv(t)
	owner := e.admin()
	q := aliasQuery(120, "workspaceUsage{...F}") + " fragment F on WorkspaceUsage{topKeys(first:100){apiKey{id}}}"
	cs.top.Store(0)
	r := e.do(owner, q, nil)
	if r.Code() != "COMPLEXITY_LIMIT_EXCEEDED" {
		t.Fatalf("120 aliases of topKeys(first:100): HTTP %d code %q (%d top-keys reads)", r.Status, r.Code(), cs.top.Load())
	}
	if got := cs.top.Load(); got != 0 {
		t.Fatalf("%d top-keys reads for a refused operation", got)
	}
}
