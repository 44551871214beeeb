package postgres_test

import (
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/postgres"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
	"github.com/btk-project/btk/internal/store/storetest"
)

// A database user edits, deletes and inserts audit_events rows directly:
// the chain verification names the row.
func TestAuditChainTamper(t *testing.T) {
	pgtest.URL(t) // skips without BTK_TEST_POSTGRES
	var urls sync.Map
	storetest.Tamper(t, func(t *testing.T) btk.Store {
		url := pgtest.URL(t)
		db := open(t, url, postgres.Options{MaxConns: 4})
		urls.Store(db, url)
		return db
	}, func(t *testing.T, db btk.Store, query string) {
		url, _ := urls.Load(db)
		conn, err := pgx.Connect(ctx, url.(string))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, query); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
	})
}

// A database upgraded from migration 0013 keeps its pending deliveries and
// counts them on their webhooks (migration 0014), so claims, which visit
// the webhooks that count a backlog, take them all.
func TestMigrationCountsPendingDeliveries(t *testing.T) {
	url := pgtest.URL(t)
	db, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	check := storetest.SeedBacklogForUpgrade(t, db)
	db.Close()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, storetest.UndoMigration0014); err != nil {
		t.Fatal(err)
	}
	check(t, open(t, url, postgres.Options{}))
}
