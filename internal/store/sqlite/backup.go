package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
)

// ErrBackupExists is returned by Backup when the destination exists and
// overwriting was not asked for.
var ErrBackupExists = errors.New("the backup file exists")

// Backup writes a consistent copy of the database at path to dest with
// VACUUM INTO, while a server may be running on it and writing: the copy is
// one read transaction's snapshot (WAL lets the writer go on meanwhile), and
// the copy is compacted, free of WAL and of deleted rows' pages.
//
// Backup opens the database read-only and does not take the server's lock
// (lockFile): that lock keeps a second server off, not readers. The copy
// holds password hashes and possibly the server secret, so it is created
// with mode 0600 before any byte is written: VACUUM INTO fills a temporary
// file of that mode next to dest, which is synced and then moved to dest.
// Without force an existing dest is refused (ErrBackupExists), also when it
// appears while the copy is made.
func Backup(ctx context.Context, path, dest string, force bool) (err error) {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("store: backup: %w", err)
	}
	if !force {
		if _, err := os.Lstat(dest); err == nil {
			return fmt.Errorf("store: backup: %s: %w", dest, ErrBackupExists)
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("store: backup: %w", err)
		}
	}
	dir := filepath.Dir(dest)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(dest)+".tmp-*") // mode 0600
	if err != nil {
		return fmt.Errorf("store: backup: %w", err)
	}
	tmpPath := tmp.Name()
	_ = tmp.Close()
	defer func() {
		if err != nil {
			_ = os.Remove(tmpPath)
		}
	}()

	// mode=ro: no write to the database, no lock file; the pragmas of the
	// server's connections are not needed for one read.
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return fmt.Errorf("store: backup: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	// VACUUM INTO refuses a non-empty file, and accepts this empty one.
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, tmpPath); err != nil {
		return fmt.Errorf("store: backup: %w", err)
	}
	if err := syncFile(tmpPath); err != nil {
		return fmt.Errorf("store: backup: %w", err)
	}
	if force {
		err = os.Rename(tmpPath, dest)
	} else {
		// A hard link fails if dest exists: never clobber what appeared meanwhile.
		if err = os.Link(tmpPath, dest); err == nil {
			_ = os.Remove(tmpPath)
		} else if errors.Is(err, os.ErrExist) {
			err = fmt.Errorf("%s: %w", dest, ErrBackupExists)
		}
	}
	if err != nil {
		return fmt.Errorf("store: backup: %w", err)
	}
	syncDir(dir) // the new name survives a crash; best effort
	return nil
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0) // #nosec G304 -- the backup file the operator named (btk backup FILE)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(dir string) {
	if runtime.GOOS == "windows" {
		return // directories cannot be opened for syncing there
	}
	if d, err := os.Open(dir); err == nil { // #nosec G304 -- the directory of the backup file the operator named
		_ = d.Sync()
		_ = d.Close()
	}
}
