// Package store opens the btk.Store that a --db value names; the engines
// live in its subpackages (sqlite, postgres) and pass one conformance suite
// (storetest).
package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/postgres"
	"github.com/btk-project/btk/internal/store/sqlite"
)

// Open opens db: a postgres:// or postgresql:// URL is a PostgreSQL
// database, anything else a SQLite file (created if missing). shared says
// the instances keep their shared state in Redis, so several may use one
// PostgreSQL database; a SQLite file is always one process's.
func Open(ctx context.Context, db string, shared bool) (btk.Store, error) {
	if postgres.IsURL(db) {
		return postgres.Open(ctx, db, postgres.Options{Shared: shared})
	}
	return sqlite.Open(ctx, db)
}

// OpenBeside opens db for a maintenance command that may run beside btk
// serve (btk account reset-password): a SQLite file through
// sqlite.OpenBeside, a PostgreSQL database without the instance lock.
func OpenBeside(ctx context.Context, db string) (btk.Store, error) {
	if postgres.IsURL(db) {
		return postgres.Open(ctx, db, postgres.Options{Maintenance: true})
	}
	return sqlite.OpenBeside(ctx, db)
}

// CheckDB says whether db names a database Open can open: a postgres:// or
// postgresql:// URL, or a SQLite file path. Another URL scheme (mysql://,
// sqlite://) is refused with the list of those supported, rather than
// becoming a file of that name.
func CheckDB(db string) error {
	if db == "" {
		return errors.New("a SQLite file path or a postgres:// URL is required")
	}
	if postgres.IsURL(db) {
		return postgres.CheckURL(db)
	}
	if i := strings.Index(db, "://"); i > 0 && !strings.ContainsAny(db[:i], `/\`) {
		return fmt.Errorf("unsupported database %q: btk supports a SQLite file path (./btk.db) or a postgres:// (postgresql://) URL", db[:i]+"://…")
	}
	if keywordDSN(db) {
		// "host=db password=…" is PostgreSQL's keyword form: taken as a
		// path, it became an empty SQLite database of that name, and the
		// password was logged as the path. Not quoted here either.
		return errors.New("a PostgreSQL connection string in keyword form (host=… dbname=…) is not supported: give a postgres:// URL")
	}
	return nil
}

// keywordDSN reports whether db looks like a libpq keyword connection
// string rather than a file path.
func keywordDSN(db string) bool {
	for _, f := range strings.Fields(db) {
		k, _, ok := strings.Cut(f, "=")
		switch k {
		case "host", "hostaddr", "dbname", "user", "password", "port", "sslmode":
			if ok {
				return true
			}
		}
	}
	return false
}
