// Package sqlitetest holds a SQLite database's write lock from another
// client, for the tests of what the store and the server do while a write
// has to wait.
package sqlitetest

import (
	"context"
	"database/sql"
	"net/url"
	"sync"
	"testing"

	_ "modernc.org/sqlite" // the driver "sqlite"
)

// HoldWriter takes the write lock of the database file at path (BEGIN
// IMMEDIATE on a connection of its own, as a second SQLite client would)
// and holds it until release is called or the test ends.
func HoldWriter(t testing.TB, path string) (release func()) {
	t.Helper()
	other, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	other.SetMaxOpenConns(1)
	ctx := context.Background()
	conn, err := other.Conn(ctx)
	if err != nil {
		_ = other.Close()
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		_ = conn.Close()
		_ = other.Close()
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			_, _ = conn.ExecContext(ctx, "ROLLBACK") // closing the connection ends the transaction anyway
			_ = conn.Close()
			_ = other.Close()
		})
	}
	t.Cleanup(release)
	return release
}
