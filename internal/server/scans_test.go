package server_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// scanStore holds every workspace-wide usage and audit read (a scan) until
// released, and reports the deadline of each.
type scanStore struct {
	btk.Store
	entered   chan time.Time // each scan's deadline (zero: none), as it starts
	release   chan struct{}
	scanning  *atomic.Int32
	maxAtOnce *atomic.Int32
}

func (s scanStore) Read(ctx context.Context, fn func(btk.Tx) error) error {
	return s.Store.Read(ctx, func(tx btk.Tx) error { return fn(scanTx{tx, s}) })
}

type scanTx struct {
	btk.Tx
	s scanStore
}

func (t scanTx) hold(ctx context.Context) {
	n := t.s.scanning.Add(1)
	defer t.s.scanning.Add(-1)
	for m := t.s.maxAtOnce.Load(); n > m && !t.s.maxAtOnce.CompareAndSwap(m, n); m = t.s.maxAtOnce.Load() {
	}
	deadline, _ := ctx.Deadline()
	t.s.entered <- deadline
	select {
	case <-t.s.release:
	case <-ctx.Done():
	}
}

func (t scanTx) AuditEvents(ctx context.Context, f btk.AuditFilter) ([]*btk.AuditEvent, string, error) {
	t.hold(ctx)
	return t.Tx.AuditEvents(ctx, f)
}

func (t scanTx) TopKeys(ctx context.Context, f btk.UsageFilter, n int) ([]btk.UsageCount, error) {
	t.hold(ctx)
	return t.Tx.TopKeys(ctx, f, n)
}

// A read that may walk much of a workspace's usage or audit rows waits for
// one of the instance's btk.MaxScans slots, and is refused UNAVAILABLE if
// none frees up in time, while other requests are served; a user's
// operation has a deadline (its work stops when its answer could no longer
// be written). Before, one owner's operation of 20 aliased topKeys held
// every SQLite reader for 85 s (149 s of CPU) and another account's {me}
// waited 7 s; nothing stopped the work when the client had gone. A
// workspace's reads also run one at a time: one owner asking in a loop
// held both slots, and every other workspace's usage and audit pages
// waited 10 s and failed.
func TestScansBounded(t *testing.T) {
	t.Parallel()
	ss := scanStore{entered: make(chan time.Time, 16), release: make(chan struct{}), scanning: new(atomic.Int32), maxAtOnce: new(atomic.Int32)}
	e := newWrappedEnv(t, func(s btk.Store) btk.Store { ss.Store = s; return ss }, func(c *btk.Config) { c.ScanWait = 200 * time.Millisecond })
	admin := e.admin()
	// One owner per workspace: the admin owns Default, and owners of their
	// own workspaces fill the other slots.
	owners := []cred{admin}
	for i := 1; i <= btk.MaxScans; i++ {
		name := fmt.Sprintf("scan%d", i)
		ws := e.createWorkspace(admin, name, "SELF_HOSTED")
		acct := e.createAccount(admin, name+"@example.com", "a-long-password-"+name, false)
		e.setMember(admin, ws, acct, "OWNER")
		owners = append(owners, cred{Bearer: e.login(name+"@example.com", "a-long-password-"+name, ws)})
	}
	queries := []string{`{auditEvents(first:1){nodes{id}}}`, `{workspaceUsage{topKeys(first:1){accepted}}}`}
	var wg sync.WaitGroup
	answers := make([]response, btk.MaxScans)
	held := func(n int) {
		t.Helper()
		for range n {
			select {
			case deadline := <-ss.entered:
				if deadline.IsZero() || time.Until(deadline) > 30*time.Second {
					t.Errorf("a user's scan runs with deadline %v; want at most 30 s from now", deadline)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the scans did not start")
			}
		}
	}
	// The first workspace's scan holds a slot; its second waits for the
	// workspace's turn however free the other slot is, and is refused once
	// its wait is over, never reaching the database.
	wg.Go(func() { answers[0] = e.do(owners[0], queries[0], nil) })
	held(1)
	if r := e.do(owners[0], queries[1], nil); r.Code() != "UNAVAILABLE" {
		t.Errorf("a workspace's second scan at once: %q %+v; want UNAVAILABLE", r.Code(), r.Errors)
	}
	// Another workspace's scan takes the free slot at once.
	for i := 1; i < btk.MaxScans; i++ {
		wg.Go(func() { answers[i] = e.do(owners[i], queries[i%len(queries)], nil) })
	}
	held(btk.MaxScans - 1)
	// Both slots held: a third workspace's scan is refused once its wait is
	// over; other reads are served meanwhile.
	if r := e.do(owners[btk.MaxScans], queries[0], nil); r.Code() != "UNAVAILABLE" {
		t.Errorf("a scan beyond %d at once: %q %+v; want UNAVAILABLE", btk.MaxScans, r.Code(), r.Errors)
	}
	var me struct{ Me struct{ Email string } }
	e.must(admin, `{me{email}}`, nil, &me)
	close(ss.release)
	wg.Wait()
	for i, r := range answers {
		if len(r.Errors) > 0 {
			t.Errorf("held scan %d: %+v", i, r.Errors)
		}
	}
	if n := ss.maxAtOnce.Load(); n != btk.MaxScans {
		t.Errorf("%d scans ran at once; want %d", n, btk.MaxScans)
	}
	// Once the slots are free, the workspace's reads run again.
	if r := e.do(owners[0], queries[1], nil); len(r.Errors) > 0 {
		t.Errorf("after the others ended: %+v", r.Errors)
	}
}

// Aliases of a scan no longer multiply it: at most four in one operation.
// Before, 100 aliases of auditEvents(first: 1) with a filter matching
// nothing walked a 300,000-row log 100 times (14 s of CPU).
func TestScanAliasesBounded(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	for _, field := range []string{
		`auditEvents(first:1, action:"nothing.here"){nodes{id}}`,
		`apiKeyAuditLog(first:1, actorEmail:"nobody@example.com"){nodes{id}}`,
		`workspaceUsage{since}`,
	} {
		if r := e.do(owner, aliasQuery(4, field), nil); len(r.Errors) > 0 {
			t.Errorf("4 aliases of %s: %+v", field, r.Errors)
		}
		if r := e.do(owner, aliasQuery(5, field), nil); r.Code() != "COMPLEXITY_LIMIT_EXCEEDED" {
			t.Errorf("5 aliases of %s: %q %+v; want COMPLEXITY_LIMIT_EXCEEDED", field, r.Code(), r.Errors)
		}
	}
	// The CLI's usage query (a series and the top keys) fits.
	var out struct{ WorkspaceUsage struct{ Since string } }
	e.must(owner, `{workspaceUsage{since until granularity points{start accepted rateLimited refused} topKeys(first:5){apiKey{id name} accepted rateLimited refused}}}`, nil, &out)
}

// seriesStore counts the reads of a list of keys' usage series made at
// once; each stays a moment, so that reads asked for together would
// overlap.
type seriesStore struct {
	btk.Store
	reading, maxAtOnce, reads *atomic.Int32
}

func (s seriesStore) Read(ctx context.Context, fn func(btk.Tx) error) error {
	return s.Store.Read(ctx, func(tx btk.Tx) error { return fn(seriesTx{tx, s}) })
}

type seriesTx struct {
	btk.Tx
	s seriesStore
}

func (t seriesTx) KeyUsageSeries(ctx context.Context, f btk.UsageFilter, ids []string, period time.Duration) ([]btk.UsageCount, error) {
	n := t.s.reading.Add(1)
	for m := t.s.maxAtOnce.Load(); n > m && !t.s.maxAtOnce.CompareAndSwap(m, n); m = t.s.maxAtOnce.Load() {
	}
	time.Sleep(20 * time.Millisecond)
	t.s.reading.Add(-1)
	t.s.reads.Add(1)
	return t.Tx.KeyUsageSeries(ctx, f, ids, period)
}

// A page of keys asks for every key's usage series: they are one read for
// the page, and it takes the workspace's turn like its other scans, so
// pages asked for together (aliases) read one at a time. Before, each key's
// series was a read of its own, resolved at once: one owner's
// apiKeys(first: 215) with 90 days of each key's usage, in six loops, kept
// both cores busy (12.9 s of CPU in 6 s) and another workspace's
// apiKeys(first: 5) took up to a second instead of 1.5 ms.
func TestKeyUsageSeriesTakeTheWorkspaceTurn(t *testing.T) {
	t.Parallel()
	ss := seriesStore{reading: new(atomic.Int32), maxAtOnce: new(atomic.Int32), reads: new(atomic.Int32)}
	e := newWrappedEnv(t, func(s btk.Store) btk.Store { ss.Store = s; return ss })
	owner := e.admin()
	const keys = 8
	for i := range keys {
		e.createKey(owner, fmt.Sprintf("k%d", i))
	}
	const pages = 4
	var out map[string]struct {
		Nodes []struct{ Usage []struct{ Accepted int } }
	}
	e.must(owner, aliasQuery(pages, `apiKeys(first:20){nodes{usage{accepted}}}`), nil, &out)
	for alias, page := range out {
		if len(page.Nodes) != keys {
			t.Fatalf("%s: %d keys answered, want %d", alias, len(page.Nodes), keys)
		}
		for i, n := range page.Nodes {
			if len(n.Usage) == 0 {
				t.Errorf("%s: key %d: no usage points", alias, i)
			}
		}
	}
	if n, m := ss.reads.Load(), ss.maxAtOnce.Load(); len(out) != pages || n != pages || m != 1 {
		t.Errorf("%d pages of %d keys: %d series reads, at most %d at once; want %d, one at a time", len(out), keys, n, m, pages)
	}
}
