package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
	"github.com/btk-project/btk/internal/store/storetest"
)

// explainNode is a node of EXPLAIN (ANALYZE, FORMAT JSON).
type explainNode struct {
	NodeType      string        `json:"Node Type"`
	Relation      string        `json:"Relation Name"`
	ActualRows    float64       `json:"Actual Rows"`
	ActualLoops   float64       `json:"Actual Loops"`
	RemovedFilter float64       `json:"Rows Removed by Filter"`
	RemovedCheck  float64       `json:"Rows Removed by Index Recheck"`
	Plans         []explainNode `json:"Plans"`
}

// rowsRead sums the rows the scans of relation read (kept or filtered out).
func (n explainNode) rowsRead(relation string) float64 {
	var sum float64
	if n.Relation == relation && n.NodeType != "ModifyTable" {
		sum = (n.ActualRows + n.RemovedFilter + n.RemovedCheck) * n.ActualLoops
	}
	for _, c := range n.Plans {
		sum += c.rowsRead(relation)
	}
	return sum
}

// A claim reads a bounded number of webhook_deliveries rows whatever the
// backlog (docs/webhooks.md#the-backlog-bound): counted by EXPLAIN ANALYZE
// with 100 and with 10,000 pending deliveries in one workspace, with the
// plan for the parameters and the generic plan the server keeps for a
// statement run many times. Before, a claim's window functions read every
// due delivery (75–95 ms of a core with 12,000 pending).
func TestClaimReadsBoundedRows(t *testing.T) {
	ctx := context.Background()
	caps := btk.DefaultDeliveryCaps(8)
	for _, perHook := range []int{10, btk.MaxPendingPerWebhook} {
		t.Run(fmt.Sprint("rows=", perHook*btk.MaxWebhooksPerWorkspace), func(t *testing.T) {
			url := pgtest.URL(t)
			db, err := Open(ctx, url, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			now := storetest.SeedClaimBacklog(t, db, perHook).UnixNano()
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, `ANALYZE`); err != nil {
				t.Fatal(err)
			}
			for _, mode := range []string{"auto", "force_generic_plan"} {
				if _, err := conn.Exec(ctx, `SET plan_cache_mode = `+mode); err != nil {
					t.Fatal(err)
				}
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var out []struct{ Plan explainNode }
				var raw []byte
				err = tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+claimStatement, now+int64(60e9), "c", now,
					capOf(caps.PerWebhook), capOf(caps.PerFailingWebhook), capOf(caps.PerWorkspace), capOf(caps.FailingPerWorkspace),
					caps.PerWebhook, 8).Scan(&raw)
				_ = tx.Rollback(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
					t.Fatalf("plan %s: %v", raw, err)
				}
				// 10 webhooks' first 2 due deliveries, the one leased, the
				// quiet workspace's, and the claimed ones locked.
				n := out[0].Plan.rowsRead("webhook_deliveries")
				t.Logf("%s: %v rows of webhook_deliveries read", mode, n)
				if n == 0 || n > 60 {
					t.Errorf("%s: a claim read %v rows of webhook_deliveries, want at most 60:\n%s", mode, n, raw)
				}
			}
		})
	}
}
