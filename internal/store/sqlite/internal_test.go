package sqlite

import (
	"context"
	"path/filepath"
	"testing"
)

// tempDB opens a fresh database in t's temporary directory, closed when t
// ends: for the tests and benchmarks inside the package.
func tempDB(t testing.TB) *DB {
	t.Helper()
	db, err := Open(context.Background(), filepath.Join(t.TempDir(), "btk.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestPragmasOnEveryConnection(t *testing.T) {
	ctx := context.Background()
	db := tempDB(t)
	want := map[string]string{"journal_mode": "wal", "synchronous": "2", "foreign_keys": "1", "busy_timeout": "5000"}
	check := func(name string, q func(string) string, queryOnly string) {
		for p, v := range want {
			if got := q(p); got != v {
				t.Errorf("%s: pragma %s = %q, want %q", name, p, got, v)
			}
		}
		if got := q("query_only"); got != queryOnly {
			t.Errorf("%s: query_only = %q, want %q", name, got, queryOnly)
		}
	}
	// Hold several reader connections at once so the check covers more than
	// the first pooled one.
	conns := make([]interface{ Close() error }, 0, 4)
	for i := range 4 {
		c, err := db.r.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		check("reader", func(p string) (v string) {
			if err := c.QueryRowContext(ctx, "PRAGMA "+p).Scan(&v); err != nil {
				t.Fatalf("reader %d: %v", i, err)
			}
			return v
		}, "1")
	}
	for _, c := range conns {
		c.Close()
	}
	check("writer", func(p string) (v string) {
		if err := db.w.QueryRowContext(ctx, "PRAGMA "+p).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}, "0")
}
