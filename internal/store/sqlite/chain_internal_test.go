package sqlite

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/btk-project/btk/internal/btk"
)

// Rows written before migration 0007 get their chain at that migration:
// here the rows are written as an older btk did (no link), and the
// migration's step links them.
func TestMigrationChainsExistingRows(t *testing.T) {
	ctx := context.Background()
	db := tempDB(t)
	ws := uuid.NewString()
	if _, err := db.w.ExecContext(ctx, `INSERT INTO workspaces (id, prefix, name, plan, public_client_key, created_at)
		VALUES (?, ?, 'w', 'SELF_HOSTED', 'bpk_x', 1)`, ws, ws[:8]); err != nil {
		t.Fatal(err)
	}
	for i, w := range []any{ws, nil, ws, ws, nil} {
		if _, err := db.w.ExecContext(ctx, `INSERT INTO audit_events (id, workspace_id, action, actor_email, target_type, metadata, created_at)
			VALUES (?, ?, 'api_key.created', 'a@example.com', 'api_key', '{"i": 1}', ?)`, uuid.NewString(), w, 1000+i); err != nil {
			t.Fatal(err)
		}
	}
	if err := inTx(ctx, db.w, func(tx *sql.Tx) error { return chainExisting(ctx, tx) }); err != nil {
		t.Fatal(err)
	}
	svc, err := btk.NewService(ctx, db, []byte("0123456789abcdef0123456789abcdef"), btk.Config{})
	if err != nil {
		t.Fatal(err)
	}
	admin := &btk.Actor{AccountID: uuid.NewString(), PlatformAdmin: true}
	for _, c := range []struct {
		ws    string
		wide  bool
		count int64
	}{{ws, false, 3}, {"", true, 2}} {
		res, err := svc.VerifyAuditChain(ctx, admin, c.ws, c.wide)
		if err != nil || !res.Intact || res.Count != c.count || res.Head.Count != c.count {
			t.Fatalf("chain %q after migration: %+v %v", c.ws, res, err)
		}
	}
	// New rows continue the migrated chain.
	if err := db.Write(ctx, func(tx btk.Tx) error {
		return tx.AddAuditEvent(ctx, &btk.AuditEvent{WorkspaceID: ws, Action: "x.y", TargetType: "t", CreatedAt: time.Now()})
	}); err != nil {
		t.Fatal(err)
	}
	if res, err := svc.VerifyAuditChain(ctx, admin, ws, false); err != nil || !res.Intact || res.Count != 4 {
		t.Fatalf("after a new row: %+v %v", res, err)
	}
}
