package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/btk-project/btk/internal/btk"
)

// A database held by another writer past busy_timeout (a second SQLite
// client, say) is ErrUnavailable, which the server
// answers UNAVAILABLE, not an internal error. (The test waits out the 5 s
// busy_timeout.)
func TestBusyDatabaseIsUnavailable(t *testing.T) {
	db, path := newDB(t)
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.SetMaxOpenConns(1)
	ctx := context.Background()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, "ROLLBACK")

	err = db.Write(ctx, func(tx btk.Tx) error { return tx.SetSetting(ctx, "x", "y") })
	if !errors.Is(err, btk.ErrUnavailable) || btk.ErrorCode(err) != btk.CodeUnavailable {
		t.Fatalf("write while another client holds the lock: %v", err)
	}
}
