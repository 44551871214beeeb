package sqlite_test

import (
	"database/sql"
	"sync"
	"testing"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/storetest"
)

// A database user edits, deletes and inserts audit_events rows directly:
// the chain verification names the row.
func TestAuditChainTamper(t *testing.T) {
	var paths sync.Map
	storetest.Tamper(t, func(t *testing.T) btk.Store {
		db, path := newDB(t)
		paths.Store(db, path)
		return db
	}, func(t *testing.T, db btk.Store, query string) {
		path, _ := paths.Load(db)
		raw, err := sql.Open("sqlite", "file:"+path.(string)+"?_pragma=busy_timeout(5000)")
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		if _, err := raw.Exec(query); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
	})
}
