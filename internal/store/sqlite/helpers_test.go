package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/sqlite"
	"github.com/btk-project/btk/internal/store/storetest"
)

var ctx = context.Background()

// The conformance suite, on a fresh database file per test.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) btk.Store {
		db, _ := newDB(t)
		return db
	})
}

func open(t testing.TB, path string) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return db
}

// newDB opens a fresh database file that is closed when the test ends.
func newDB(t testing.TB) (*sqlite.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "btk.db")
	db := open(t, path)
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db, path
}

var (
	t0           = storetest.T0
	newWorkspace = storetest.NewWorkspace
	key          = storetest.Key
	createKey    = storetest.CreateKey
)

func write(t testing.TB, db btk.Store, fn func(btk.Tx) error) {
	t.Helper()
	if err := db.Write(ctx, fn); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

func read(t testing.TB, db btk.Store, fn func(btk.Tx) error) {
	t.Helper()
	if err := db.Read(ctx, fn); err != nil {
		t.Fatalf("Read: %v", err)
	}
}
