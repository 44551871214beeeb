package sqlite_test

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/sqlite"
)

func TestMigrationsIdempotentOnReopen(t *testing.T) {
	db, path := newDB(t)
	newWorkspace(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		db := open(t, path)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var n, distinct int
	if err := raw.QueryRow(`SELECT count(*), count(DISTINCT version) FROM schema_migrations`).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir("migrations")
	if n != len(entries) || distinct != n {
		t.Fatalf("schema_migrations has %d rows (%d distinct), want %d", n, distinct, len(entries))
	}
}

func TestFileIsPrivate(t *testing.T) {
	_, path := newDB(t)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Fatalf("database file mode %v, want 0600", perm)
	}
}

func TestSurvivesCloseAndOpen(t *testing.T) {
	db, path := newDB(t)
	ws := newWorkspace(t, db)
	k := createKey(t, db, key(ws, "ci"))
	write(t, db, func(tx btk.Tx) error { return tx.RevokeAPIKey(ctx, k.ID, t0.Add(time.Hour), "acct", "") })
	db.Close()

	db = open(t, path)
	defer db.Close()
	read(t, db, func(tx btk.Tx) error {
		got, err := tx.APIKey(ctx, k.ID)
		if err != nil {
			return err
		}
		if got.RevokedAt == nil || !got.RevokedAt.Equal(t0.Add(time.Hour)) {
			t.Errorf("revocation lost: RevokedAt = %v", got.RevokedAt)
		}
		_, err = tx.Workspace(ctx, ws.ID)
		return err
	})
}

// A second server on the same database would not see the first one's
// revocations in its key cache: Open refuses while another holds it.
func TestOpenRefusesADatabaseInUse(t *testing.T) {
	db, path := newDB(t)
	if second, err := sqlite.Open(context.Background(), path); err == nil {
		second.Close()
		t.Fatal("a second Open of a database in use succeeded")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	again.Close()
}
