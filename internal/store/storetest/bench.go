package storetest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// The usage-read benchmark of both stores (BenchmarkUsageReads), its
// layout: one busy workspace of UsageBenchKeys keys, each with a row for
// every hour of the days, and UsageBenchOthers other workspaces of
// UsageBenchOtherKeys keys each over the same hours. Workspace w is
// 0badc0de+w-0000-…, its keys xxxxxxxx-000w-… with ids spread like UUIDs,
// so the busy workspace's keys lie among the others' in the primary key.
// Each store seeds it its own fast way.
const (
	UsageBenchKeys      = 1_000
	UsageBenchOthers    = 10
	UsageBenchOtherKeys = 200
)

var (
	UsageBenchWorkspace = fmt.Sprintf("%08x-0000-4000-8000-000000000000", 0x0badc0de)
	// UsageBenchUntil is the end of the benchmark's hours (exclusive), a whole hour.
	UsageBenchUntil = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	// UsageBenchKey is a key of the busy workspace.
	UsageBenchKey = fmt.Sprintf("%08x-0000-4000-8000-%012x", 7*2654435761%(1<<32), 7)
)

// BenchUsageReads times topKeys(first: 10), the series and one key's own
// series over the last days and 7 days of UsageBenchUntil, each in a Read
// transaction, on a store seeded with the layout above.
func BenchUsageReads(b *testing.B, db btk.Store, days int) {
	ctx := context.Background()
	for _, w := range []int{days, 7} {
		f := btk.UsageFilter{WorkspaceID: UsageBenchWorkspace, Since: UsageBenchUntil.Add(-time.Duration(w) * 24 * time.Hour), Until: UsageBenchUntil}
		for _, c := range []struct {
			name string
			want int
			read func(tx btk.Tx) (int, error)
		}{
			{"topKeys", 10, func(tx btk.Tx) (int, error) { r, err := tx.TopKeys(ctx, f, 10); return len(r), err }},
			{"series", w * 24, func(tx btk.Tx) (int, error) { r, err := tx.UsageSeries(ctx, f); return len(r), err }},
			{"keySeries", w * 24, func(tx btk.Tx) (int, error) {
				kf := f
				kf.KeyID = UsageBenchKey
				r, err := tx.UsageSeries(ctx, kf)
				return len(r), err
			}},
		} {
			b.Run(fmt.Sprintf("%s/%dd", c.name, w), func(b *testing.B) {
				for b.Loop() {
					err := db.Read(ctx, func(tx btk.Tx) error {
						n, err := c.read(tx)
						if err == nil && n != c.want {
							err = fmt.Errorf("%d rows, want %d", n, c.want)
						}
						return err
					})
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchUsageFlush times the usage part of a flush that adds one count to
// the latest hour of each of the busy workspace's keys, an existing row
// each (the rows go sorted by key, as the service sends them).
func BenchUsageFlush(b *testing.B, db btk.Store) {
	ctx := context.Background()
	counts := make([]btk.UsageCount, UsageBenchKeys)
	for i := range counts {
		counts[i] = btk.UsageCount{KeyID: fmt.Sprintf("%08x-0000-4000-8000-%012x", i*2654435761%(1<<32), i),
			WorkspaceID: UsageBenchWorkspace, Start: UsageBenchUntil.Add(-time.Hour), Accepted: 1}
	}
	slices.SortFunc(counts, func(x, y btk.UsageCount) int { return strings.Compare(x.KeyID, y.KeyID) })
	b.Run("flush/1000keys", func(b *testing.B) {
		for b.Loop() {
			// Each flush under an id of its own, as the service writes them.
			f := []btk.UsageFlush{{ID: rand.Text(), At: UsageBenchUntil, Counts: counts}}
			if err := db.RecordUsage(ctx, nil, f, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// SeedClaimBacklog lays out the claim benchmark (BenchClaim) and the tests
// of what a claim reads: a busy workspace with the most webhooks a
// workspace may have, each with perHook pending deliveries (at most
// btk.MaxPendingPerWebhook: 10,000 in the workspace), one of them in flight,
// and a quiet workspace with one. It returns the time to claim at, when
// every delivery is due.
func SeedClaimBacklog(tb testing.TB, db btk.Store, perHook int) time.Time {
	busy, quiet := newWorkspace(tb, db), newWorkspace(tb, db)
	for range btk.MaxWebhooksPerWorkspace {
		newWebhook(tb, db, busy)
	}
	newWebhook(tb, db, quiet)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Millisecond) }
	for from := 0; from < perHook; from += 200 {
		addEvents(tb, db, busy.ID, "api_key.updated", at, from, min(200, perHook-from))
	}
	addEvents(tb, db, quiet.ID, "api_key.updated", at, perHook, 1)
	now := at(perHook + 1)
	if ds := claimCaps(tb, db, now, "in-flight", 1, btk.DefaultDeliveryCaps(8)); len(ds) != 1 || ds[0].WorkspaceID != busy.ID {
		tb.Fatalf("the first claim took %d deliveries, want the busy workspace's oldest", len(ds))
	}
	return now
}

// ClaimBenchClaimed is how many deliveries each claim of BenchClaim takes:
// the busy workspace's share (btk.DefaultDeliveryCaps(8)) less the one in
// flight, and the quiet workspace's one.
const ClaimBenchClaimed = 3

var errRollback = errors.New("rolled back")

// BenchClaim times a claim round (8 free workers, the default caps) on a
// store laid out by SeedClaimBacklog, in a write transaction that is then
// rolled back, so that each round claims the same deliveries
// (docs/webhooks.md#the-backlog-bound). Besides ns/op it reports
// cpu-ns/op, this process's CPU time per claim (SQLite's work included;
// PostgreSQL's server is another process).
func BenchClaim(b *testing.B, db btk.Store, now time.Time) {
	caps := btk.DefaultDeliveryCaps(8)
	start := cpuTime()
	defer func() { b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op") }()
	for b.Loop() {
		n := 0
		err := db.Write(ctx, func(tx btk.Tx) error {
			ds, err := tx.ClaimWebhookDeliveries(ctx, now, time.Minute, "bench", 8, caps)
			if err != nil {
				return err
			}
			n = len(ds)
			return errRollback
		})
		if !errors.Is(err, errRollback) || n != ClaimBenchClaimed {
			b.Fatalf("claimed %d deliveries (%v), want %d", n, err, ClaimBenchClaimed)
		}
	}
}
