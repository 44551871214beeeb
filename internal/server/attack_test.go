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

// countingStore counts the reads the service makes of what a key's row
// asks for beyond the key (usage series, last clients, one key's or a
// list's at once), the top keys, the keys read by id, and the read
// transactions: what an operation makes the database do.
type countingStore struct {
	btk.Store
	series, top, keys                      *atomic.Int64
	keysSeries, client, clients, readCalls *atomic.Int64
}

func (s countingStore) Read(ctx context.Context, fn func(btk.Tx) error) error {
	s.readCalls.Add(1)
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

func (t countingTx) KeyUsageSeries(ctx context.Context, f btk.UsageFilter, ids []string, period time.Duration) ([]btk.UsageCount, error) {
	t.s.keysSeries.Add(1)
	return t.Tx.KeyUsageSeries(ctx, f, ids, period)
}

func (t countingTx) KeyClient(ctx context.Context, keyID string) (*btk.KeyClient, error) {
	t.s.client.Add(1)
	return t.Tx.KeyClient(ctx, keyID)
}

func (t countingTx) KeyClients(ctx context.Context, workspaceID string, ids []string) ([]btk.KeyClient, error) {
	t.s.clients.Add(1)
	return t.Tx.KeyClients(ctx, workspaceID, ids)
}

func (t countingTx) TopKeys(ctx context.Context, f btk.UsageFilter, n int) ([]btk.UsageCount, error) {
	t.s.top.Add(1)
	return t.Tx.TopKeys(ctx, f, n)
}

func (t countingTx) APIKey(ctx context.Context, id string) (*btk.APIKey, error) {
	t.s.keys.Add(1)
	return t.Tx.APIKey(ctx, id)
}

// reset sets every count to zero.
func (s countingStore) reset() {
	for _, c := range []*atomic.Int64{s.series, s.top, s.keys, s.keysSeries, s.client, s.clients, s.readCalls} {
		c.Store(0)
	}
}

func newCountingEnv(t *testing.T) (*env, countingStore) {
	cs := countingStore{series: new(atomic.Int64), top: new(atomic.Int64), keys: new(atomic.Int64),
		keysSeries: new(atomic.Int64), client: new(atomic.Int64), clients: new(atomic.Int64), readCalls: new(atomic.Int64)}
	e := newWrappedEnv(t, func(s btk.Store) btk.Store { cs.Store = s; return cs })
	return e, cs
}

// The usage point budget of an operation (20,000) is spent before the
// database is read: a page of keys each asking for 90 days of hours (2,160
// points) is refused whole, its series unread (500 keys, in aliases, were
// 500 reads and 1.08 million points built before the budget refused them).
func TestUsagePointsBudgetSpentBeforeReading(t *testing.T) {
	t.Parallel()
	e, cs := newCountingEnv(t)
	owner := e.admin()
	const n = 30
	for i := range n {
		e.createKey(owner, fmt.Sprintf("k%02d", i))
	}
	since := e.clock.Now().Add(-89 * 24 * time.Hour).Format(time.RFC3339)
	cs.reset()
	r := e.do(owner, `query($s:Time){apiKeys(first:30){nodes{id usage(granularity:HOUR,since:$s){start}}}}`, map[string]any{"s": since})
	if len(r.Errors) == 0 || !strings.Contains(r.Errors[0].Message, "usage points") {
		t.Fatalf("HTTP %d, errors %+v: want the usage points budget refused", r.Status, r.Errors)
	}
	if got := cs.series.Load() + cs.keysSeries.Load(); got != 0 {
		t.Fatalf("%d usage series reads for a page over the budget: the budget is spent after the reads", got)
	}
	// Nine keys' fit (19,224 points): one read for the page.
	r = e.do(owner, `query($s:Time){apiKeys(first:9){nodes{id usage(granularity:HOUR,since:$s){start}}}}`, map[string]any{"s": since})
	if len(r.Errors) > 0 || cs.keysSeries.Load() != 1 || cs.series.Load() != 0 {
		t.Fatalf("nine keys: %+v, %d page reads and %d key reads; want one page read", r.Errors, cs.keysSeries.Load(), cs.series.Load())
	}
	// Each usage field answered spends its points, though its series is
	// the same: aliases of the series, or of the page's nodes.
	for _, q := range []string{
		`query($s:Time){apiKeys(first:9){nodes{a:usage(granularity:HOUR,since:$s){start} b:usage(granularity:HOUR,since:$s){start}}}}`,
		`query($s:Time){apiKeys(first:9){a:nodes{usage(granularity:HOUR,since:$s){start}} b:nodes{usage(granularity:HOUR,since:$s){start}}}}`,
	} {
		cs.reset()
		r = e.do(owner, q, map[string]any{"s": since})
		if len(r.Errors) == 0 || !strings.Contains(r.Errors[0].Message, "usage points") || cs.keysSeries.Load() > 1 {
			t.Errorf("%s: errors %+v, %d page reads; want the budget refused after one read", q, r.Errors, cs.keysSeries.Load())
		}
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
