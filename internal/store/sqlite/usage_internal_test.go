package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/store/storetest"
)

// The usage reads keep their plans (see usageSeriesQuery): without
// statistics, as btk runs, and with them (an operator's ANALYZE). A
// workspace's series reads the covering index alone, in hour order; a key's
// series and the top keys read the primary key a key at a time, and the top
// keys sort only the keys' sums.
func TestUsageQueryPlans(t *testing.T) {
	ctx := context.Background()
	db := tempDB(t)
	plan := func(q string, args ...any) string {
		t.Helper()
		rows, err := db.r.QueryContext(ctx, `EXPLAIN QUERY PLAN `+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, detail)
		}
		return strings.Join(lines, "\n")
	}
	ws, key := "0badc0de-0000-4000-8000-000000000000", "a"
	for _, stats := range []bool{false, true} {
		if stats {
			seedUsage(t, db, 2)
			if _, err := db.w.ExecContext(ctx, `ANALYZE`); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct {
			name, query string
			args        []any
			want        []string
		}{
			{"workspace series", usageSeriesQuery, []any{ws, 0, 1},
				[]string{"SEARCH api_key_usage USING COVERING INDEX api_key_usage_workspace_covering (workspace_id=? AND hour>? AND hour<?)"}},
			{"key series", keyUsageSeriesQuery, []any{key, 0, 1, ws},
				[]string{"SEARCH api_key_usage USING PRIMARY KEY (api_key_id=? AND hour>? AND hour<?)"}},
			{"top keys", topKeysQuery, []any{ws, 0, 1, 10}, []string{
				"SEARCH k USING INDEX api_keys_workspace (workspace_id=?)",
				"SEARCH u USING PRIMARY KEY (api_key_id=? AND hour>? AND hour<?)",
				"USE TEMP B-TREE FOR ORDER BY",
			}},
			// A page of keys: a seek of the primary key per key of the list.
			{"keys series", keysUsageSeriesQuery, []any{`["a","b"]`, 0, 1, int64(time.Hour), ws}, []string{
				"SEARCH api_key_usage USING PRIMARY KEY (api_key_id=? AND hour>? AND hour<?)",
				"LIST SUBQUERY 1",
				"SCAN json_each VIRTUAL TABLE INDEX 1:",
				"USE TEMP B-TREE FOR GROUP BY",
			}},
			{"key clients", keyClientsQuery, []any{`["a","b"]`, ws}, []string{
				"SEARCH c USING PRIMARY KEY (api_key_id=?)",
				"LIST SUBQUERY 1",
				"SCAN json_each VIRTUAL TABLE INDEX 1:",
				"SEARCH k EXISTS USING INDEX sqlite_autoindex_api_keys_1 (id=?)",
			}},
			// A rotation chain: a seek of the primary key per key, each way.
			{"rotation chain", rotationChainQuery, []any{key, ws, 10}, []string{
				"COMPOUND QUERY", "LEFT-MOST SUBQUERY", "CO-ROUTINE older", "SETUP",
				"SEARCH api_keys USING INDEX sqlite_autoindex_api_keys_1 (id=?)",
				"RECURSIVE STEP", "SCAN o", "SEARCH k USING INDEX sqlite_autoindex_api_keys_1 (id=?)",
				"SCAN older", "UNION ALL", "CO-ROUTINE newer", "SETUP",
				"SEARCH api_keys USING INDEX sqlite_autoindex_api_keys_1 (id=?)",
				"RECURSIVE STEP", "SCAN w", "SEARCH k USING INDEX sqlite_autoindex_api_keys_1 (id=?)",
				"SCAN newer",
			}},
		} {
			if got := plan(c.query, c.args...); got != strings.Join(c.want, "\n") {
				t.Errorf("%s (statistics %v): plan\n%s\nwant\n%s", c.name, stats, got, strings.Join(c.want, "\n"))
			}
		}
	}
}

// A database upgraded from migration 0010 keeps its usage rows: 0011 only
// swaps the workspace index of api_key_usage for the covering one, and the
// reads find every row through it.
func TestMigrationKeepsUsageRows(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "btk.db")
	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	seeded := storetest.SeedUsage(t, db)
	// Back to 0010's schema: its index, and no record of 0011.
	if _, err := db.w.ExecContext(ctx, `DROP INDEX api_key_usage_workspace_covering;
		CREATE INDEX api_key_usage_workspace ON api_key_usage (workspace_id, hour);
		DELETE FROM schema_migrations WHERE version = 11`); err != nil {
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
	var rows int
	var indexes []string
	if err := db.r.QueryRowContext(ctx, `SELECT count(*) FROM api_key_usage`).Scan(&rows); err != nil || rows != seeded.Rows() {
		t.Fatalf("%d usage rows after the upgrade (%v), want %d", rows, err, seeded.Rows())
	}
	list, err := db.r.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'api_key_usage' AND sql IS NOT NULL ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for list.Next() {
		var name string
		if err := list.Scan(&name); err != nil {
			t.Fatal(err)
		}
		indexes = append(indexes, name)
	}
	list.Close()
	if want := "api_key_usage_hour api_key_usage_workspace_covering"; strings.Join(indexes, " ") != want {
		t.Fatalf("indexes %v, want %s", indexes, want)
	}
	seeded.Check(t, db)
}
