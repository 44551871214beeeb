package postgres

import (
	"context"

	"github.com/btk-project/btk/internal/btk"
)

// AddAuditEvent writes one audit_events row, as AddAudit does for its second row.
func (t *tx) AddAuditEvent(ctx context.Context, ev *btk.AuditEvent) error {
	return t.AddAudit(ctx, nil, ev)
}

// Accounts are ordered by creation, then insertion (seq), as SQLite's rowid.
func (t *tx) Accounts(ctx context.Context) ([]*btk.Account, error) {
	return all(ctx, t, "accounts", scanAccount, selectAccount+` ORDER BY created_at, seq`)
}

// WorkspaceMembers are ordered by seq, as Memberships are.
func (t *tx) WorkspaceMembers(ctx context.Context, workspaceID string) ([]btk.Membership, error) {
	return all(ctx, t, "workspace members", scanMembership,
		selectMembership+` WHERE workspace_id = $1 ORDER BY seq`, workspaceID)
}
