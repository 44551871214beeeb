package sqlite

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/storetest"
)

// planNode is one line of EXPLAIN QUERY PLAN.
type planNode struct {
	id, parent int
	detail     string
}

func queryPlan(t *testing.T, db *DB, q string, args ...any) []planNode {
	t.Helper()
	rows, err := db.r.QueryContext(context.Background(), `EXPLAIN QUERY PLAN `+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []planNode
	for rows.Next() {
		var n planNode
		var unused int
		if err := rows.Scan(&n.id, &n.parent, &unused, &n.detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, n)
	}
	return plan
}

// A claim reads a bounded number of rows whatever the backlog
// (docs/webhooks.md#the-backlog-bound), without statistics, as btk runs, and
// with them (an operator's ANALYZE), on a busy workspace's full backlog:
// no scan of webhook_deliveries; the leased deliveries through their
// index; each webhook's first due deliveries through the index on
// (webhook_id, next_attempt_at), in its order (no sort: the LIMIT stops the
// walk), the webhooks with a backlog through theirs. The outbox figures
// read the first entry of the index by age, and a claim's rows are read
// back through the index of leases. Before, a claim's window functions
// read every due delivery: 75–95 ms with 12,000 pending.
func TestClaimQueryPlans(t *testing.T) {
	db := tempDB(t)
	storetest.SeedClaimBacklog(t, db, btk.MaxPendingPerWebhook)
	deliveries := []string{"webhook_deliveries", "d", "x", "nd"} // the table and its aliases in the claim
	for _, stats := range []bool{false, true} {
		if stats {
			if _, err := db.w.ExecContext(context.Background(), `ANALYZE`); err != nil {
				t.Fatal(err)
			}
		}
		plan := queryPlan(t, db, claimStatement, 1, "c", 1, 2, 1, 3, 2, 2, 8)
		var lines []string
		for _, n := range plan {
			lines = append(lines, n.detail)
			for _, a := range deliveries {
				if strings.HasPrefix(n.detail, "SCAN "+a+" ") || n.detail == "SCAN "+a {
					t.Errorf("statistics %v: the claim scans %s: %q", stats, a, n.detail)
				}
			}
			if strings.HasPrefix(n.detail, "CORRELATED LIST SUBQUERY") {
				var inner []string
				for _, c := range plan {
					if c.parent == n.id {
						inner = append(inner, c.detail)
					}
				}
				want := []string{"SEARCH x USING INDEX webhook_deliveries_next (webhook_id=? AND next_attempt_at<?)"}
				if !slices.Equal(inner, want) {
					t.Errorf("statistics %v: a webhook's first deliveries are read by %q, want %q", stats, inner, want)
				}
			}
		}
		all := strings.Join(lines, "\n")
		for _, want := range []string{
			"SEARCH d USING INDEX webhook_deliveries_leased (lease_until>?)",
			"SCAN w USING INDEX webhooks_backlog",
			"CORRELATED LIST SUBQUERY",
			"SEARCH nd USING INTEGER PRIMARY KEY (rowid=?)",
		} {
			if !strings.Contains(all, want) {
				t.Errorf("statistics %v: the claim's plan has no %q:\n%s", stats, want, all)
			}
		}
		for _, c := range []struct {
			query, want string
			args        []any
		}{
			{`SELECT min(created_at) FROM webhook_deliveries WHERE status = 'PENDING'`,
				"SEARCH webhook_deliveries USING COVERING INDEX webhook_deliveries_pending_age", nil},
			{selectDelivery + ` WHERE d.lease_until = ? AND d.claim = ? AND d.status = 'PENDING' ORDER BY d.next_attempt_at`,
				"SEARCH d USING INDEX webhook_deliveries_leased (lease_until=?)", []any{1, "c"}},
		} {
			plan := queryPlan(t, db, c.query, c.args...)
			if len(plan) == 0 || plan[0].detail != c.want {
				t.Errorf("statistics %v: %s: plan %v, want %q first", stats, c.query, plan, c.want)
			}
		}
	}
}

// A database upgraded from migration 0013 keeps its pending deliveries and
// counts them on their webhooks (migration 0014), so claims, which visit
// the webhooks that count a backlog, take them all.
func TestMigrationCountsPendingDeliveries(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "btk.db")
	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	check := storetest.SeedBacklogForUpgrade(t, db)
	if _, err := db.w.ExecContext(ctx, storetest.UndoMigration0014); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	check(t, db)
}
