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
	rows, err := t.tx.QueryContext(ctx, selectAccount+` ORDER BY created_at, rowid`)
	if err != nil {
		return nil, mapErr("accounts", err)
	}
	defer rows.Close()
	var out []*btk.Account
	for rows.Next() {
		a, err := scanAccount(rows)
		if err != nil {
			return nil, mapErr("accounts", err)
		}
		out = append(out, a)
	}
	return out, mapErr("accounts", rows.Err())
}

// WorkspaceMembers are ordered by rowid, as Memberships are.
func (t *tx) WorkspaceMembers(ctx context.Context, workspaceID string) ([]btk.Membership, error) {
	rows, err := t.tx.QueryContext(ctx,
		`SELECT workspace_id, account_id, role FROM memberships WHERE workspace_id = ? ORDER BY rowid`, workspaceID)
	if err != nil {
		return nil, mapErr("workspace members", err)
	}
	defer rows.Close()
	var ms []btk.Membership
	for rows.Next() {
		var m btk.Membership
		if err := rows.Scan(&m.WorkspaceID, &m.AccountID, &m.Role); err != nil {
			return nil, mapErr("workspace members", err)
		}
		ms = append(ms, m)
	}
	return ms, mapErr("workspace members", rows.Err())
}
