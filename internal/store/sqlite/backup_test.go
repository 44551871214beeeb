package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/sqlite"
)

func countKeys(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM api_keys`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Backup copies an open database (its lock held) into a new file of mode
// 0600, refuses an existing file unless forced, and leaves no temporary file.
func TestBackup(t *testing.T) {
	ctx := context.Background()
	db, path := newDB(t)
	ws := newWorkspace(t, db)
	createKey(t, db, key(ws, "one"))

	dir := t.TempDir()
	dest := filepath.Join(dir, "copy.db")
	if err := sqlite.Backup(ctx, path, dest, false); err != nil {
		t.Fatalf("Backup while the database is open: %v", err)
	}
	fi, err := os.Stat(dest)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if n := countKeys(t, dest); n != 1 {
		t.Errorf("%d keys in the copy, want 1", n)
	}

	createKey(t, db, key(ws, "two"))
	if err := sqlite.Backup(ctx, path, dest, false); !errors.Is(err, sqlite.ErrBackupExists) {
		t.Errorf("Backup onto an existing file: %v, want ErrBackupExists", err)
	}
	if n := countKeys(t, dest); n != 1 {
		t.Errorf("the refused backup changed the existing file: %d keys", n)
	}
	if err := sqlite.Backup(ctx, path, dest, true); err != nil {
		t.Fatalf("Backup with force: %v", err)
	}
	if n := countKeys(t, dest); n != 2 {
		t.Errorf("%d keys in the forced copy, want 2", n)
	}
	if fi, _ := os.Stat(dest); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after force %v, want 0600", fi.Mode().Perm())
	}

	if err := sqlite.Backup(ctx, filepath.Join(dir, "missing.db"), filepath.Join(dir, "x.db"), false); err == nil {
		t.Error("Backup of a missing database succeeded")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("files in the backup directory: %v, want copy.db alone", names)
	}

	// The copy opens as a btk database, with the key in it.
	copyDB := open(t, dest)
	defer copyDB.Close()
	err = copyDB.Read(ctx, func(tx btk.Tx) error {
		_, err := tx.Workspace(ctx, ws.ID)
		return err
	})
	if err != nil {
		t.Errorf("the copy: %v", err)
	}
}
