package sqlite

import (
	"context"

	"github.com/btk-project/btk/internal/btk"
)

// AddAuditEvent writes one audit_events row, as AddAudit does for its second row.
func (t *tx) AddAuditEvent(ctx context.Context, ev *btk.AuditEvent) error {
	return t.AddAudit(ctx, nil, ev)
}

func (t *tx) Accounts(ctx context.Context) ([]*btk.Account, error) {
	return all(ctx, t, "accounts", scanAccount, selectAccount+` ORDER BY created_at, rowid`)
}

// WorkspaceMembers are ordered by rowid, as Memberships are.
func (t *tx) WorkspaceMembers(ctx context.Context, workspaceID string) ([]btk.Member, error) {
	return all(ctx, t, "workspace members", scanMember,
		`SELECT m.account_id, a.email, m.role, a.disabled_at IS NOT NULL FROM memberships m JOIN accounts a ON a.id = m.account_id
		WHERE m.workspace_id = ? ORDER BY m.rowid`, workspaceID)
}
