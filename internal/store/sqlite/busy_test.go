package sqlite_test

import (
	"context"
	"errors"
	"testing"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/sqlite/sqlitetest"
)

// A database held by another writer past busy_timeout (a second SQLite
// client, say) is ErrUnavailable, which the server
// answers UNAVAILABLE, not an internal error. (The test waits out the 5 s
// busy_timeout.)
func TestBusyDatabaseIsUnavailable(t *testing.T) {
	db, path := newDB(t)
	sqlitetest.HoldWriter(t, path)
	ctx := context.Background()
	err := db.Write(ctx, func(tx btk.Tx) error { return tx.SetSetting(ctx, "x", "y") })
	if !errors.Is(err, btk.ErrUnavailable) || btk.ErrorCode(err) != btk.CodeUnavailable {
		t.Fatalf("write while another client holds the lock: %v", err)
	}
}
