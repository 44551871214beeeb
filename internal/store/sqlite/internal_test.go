package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/btk-project/btk/internal/btk"
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

// A full disk is UNAVAILABLE (retry: space may be freed), not INTERNAL:
// clients were told not to retry while /readyz said all was well. The
// database is made full with max_page_count.
func TestFullDatabaseIsUnavailable(t *testing.T) {
	ctx := context.Background()
	db := tempDB(t)
	var pages int
	if err := db.w.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := db.w.ExecContext(ctx, fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+2)); err != nil {
		t.Fatal(err)
	}
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		err = db.Write(ctx, func(tx btk.Tx) error {
			return tx.CreateAccount(ctx, &btk.Account{ID: uuid.NewString(), Email: fmt.Sprintf("%d-%s@example.com", i, strings.Repeat("x", 200)), CreatedAt: time.Now()})
		})
	}
	if !errors.Is(err, btk.ErrUnavailable) {
		t.Fatalf("a write to a full database: %v; want UNAVAILABLE", err)
	}
}
