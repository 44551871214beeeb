package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/sqlshared"
)

// Settings, workspaces, accounts, memberships and sessions.

// Empty, in a write transaction, first waits for any other write transaction
// that checked it (bootstrap): READ COMMITTED then sees what that one made.
func (t *tx) Empty(ctx context.Context) (bool, error) {
	if err := t.lockSettings(ctx); err != nil {
		return false, err
	}
	var exists bool
	if err := t.tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM accounts)`).Scan(&exists); err != nil {
		return false, mapErr("empty", err)
	}
	return !exists, nil
}

// Setting, in a write transaction, is serialised like Empty: a setting read
// as missing and then made (the server secret) is made once.
func (t *tx) Setting(ctx context.Context, name string) (string, error) {
	if err := t.lockSettings(ctx); err != nil {
		return "", err
	}
	var v string
	err := t.tx.QueryRow(ctx, `SELECT value FROM settings WHERE name = $1`, name).Scan(&v)
	return v, mapErr("setting", err)
}

func (t *tx) SetSetting(ctx context.Context, name, value string) error {
	_, err := t.exec(ctx, "set setting", false,
		`INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = excluded.value`,
		name, value)
	return err
}

const selectWorkspace = `SELECT id, name, plan, public_client_key, rate_limit_per_minute, rate_limit_per_day, created_at,
	key_max_lifetime_days, key_revoke_unused_days FROM workspaces`

func scanWorkspace(row sqlshared.Row) (*btk.Workspace, error) {
	var (
		w              btk.Workspace
		perMin, perD   *int64
		maxLife, unusd *int64
		created        int64
	)
	if err := row.Scan(&w.ID, &w.Name, &w.Plan, &w.PublicClientKey, &perMin, &perD, &created, &maxLife, &unusd); err != nil {
		return nil, err
	}
	w.RateLimitPerMinute, w.RateLimitPerDay = fromOptInt(perMin), fromOptInt(perD)
	w.KeyPolicy.MaxLifetimeDays, w.KeyPolicy.RevokeUnusedAfterDays = fromOptInt(maxLife), fromOptInt(unusd)
	w.CreatedAt = sqlshared.FromNano(created)
	return &w, nil
}

func (t *tx) Workspace(ctx context.Context, id string) (*btk.Workspace, error) {
	w, err := scanWorkspace(t.tx.QueryRow(ctx, selectWorkspace+` WHERE id = $1`+t.forUpdate(), id))
	return w, mapErr("workspace", err)
}

func (t *tx) WorkspaceByPublicKey(ctx context.Context, publicKey string) (*btk.Workspace, error) {
	w, err := scanWorkspace(t.tx.QueryRow(ctx, selectWorkspace+` WHERE public_client_key = $1`, publicKey))
	return w, mapErr("workspace by public key", err)
}

func (t *tx) Workspaces(ctx context.Context) ([]*btk.Workspace, error) {
	return all(ctx, t, "workspaces", scanWorkspace, selectWorkspace+` ORDER BY created_at, seq`)
}

func (t *tx) CreateWorkspace(ctx context.Context, w *btk.Workspace) error {
	if len(w.ID) < btk.WorkspacePrefixLen {
		return fmt.Errorf("store: create workspace: id %q is shorter than its prefix", w.ID)
	}
	_, err := t.exec(ctx, "create workspace", false,
		`INSERT INTO workspaces (id, name, prefix, plan, public_client_key, rate_limit_per_minute, rate_limit_per_day, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		w.ID, w.Name, w.Prefix(), string(w.Plan), w.PublicClientKey, optInt(w.RateLimitPerMinute), optInt(w.RateLimitPerDay), w.CreatedAt)
	return err
}

func (t *tx) UpdateWorkspace(ctx context.Context, w *btk.Workspace) error {
	_, err := t.exec(ctx, "update workspace", true,
		`UPDATE workspaces SET name = $1, plan = $2, rate_limit_per_minute = $3, rate_limit_per_day = $4,
			key_max_lifetime_days = $5, key_revoke_unused_days = $6 WHERE id = $7`,
		w.Name, string(w.Plan), optInt(w.RateLimitPerMinute), optInt(w.RateLimitPerDay),
		optInt(w.KeyPolicy.MaxLifetimeDays), optInt(w.KeyPolicy.RevokeUnusedAfterDays), w.ID)
	return err
}

const selectAccount = `SELECT id, email, password_hash, platform_admin, created_at, disabled_at FROM accounts`

func scanAccount(row sqlshared.Row) (*btk.Account, error) {
	var (
		a        btk.Account
		created  int64
		disabled *int64
	)
	if err := row.Scan(&a.ID, &a.Email, &a.PasswordHash, &a.PlatformAdmin, &created, &disabled); err != nil {
		return nil, err
	}
	a.CreatedAt, a.DisabledAt = sqlshared.FromNano(created), fromOptNano(disabled)
	return &a, nil
}

func (t *tx) Account(ctx context.Context, id string) (*btk.Account, error) {
	a, err := scanAccount(t.tx.QueryRow(ctx, selectAccount+` WHERE id = $1`+t.forUpdate(), id))
	return a, mapErr("account", err)
}

// AccountByEmail matches lower(email), the unique index.
func (t *tx) AccountByEmail(ctx context.Context, email string) (*btk.Account, error) {
	a, err := scanAccount(t.tx.QueryRow(ctx, selectAccount+` WHERE lower(email) = lower($1)`+t.forUpdate(), email))
	return a, mapErr("account by email", err)
}

func (t *tx) CreateAccount(ctx context.Context, a *btk.Account) error {
	_, err := t.exec(ctx, "create account", false,
		`INSERT INTO accounts (id, email, password_hash, platform_admin, created_at) VALUES ($1, $2, $3, $4, $5)`,
		a.ID, a.Email, a.PasswordHash, a.PlatformAdmin, a.CreatedAt)
	return err
}

func (t *tx) Role(ctx context.Context, workspaceID, accountID string) (btk.Role, error) {
	var r btk.Role
	err := t.tx.QueryRow(ctx, `SELECT role FROM memberships WHERE workspace_id = $1 AND account_id = $2`,
		workspaceID, accountID).Scan(&r)
	return r, mapErr("role", err)
}

func scanMember(row sqlshared.Row) (btk.Member, error) {
	var m btk.Member
	err := row.Scan(&m.AccountID, &m.Email, &m.Role, &m.Disabled)
	return m, err
}

// Memberships are ordered by seq, i.e. by when the membership was first
// made: SetMembership's upsert keeps the row, and with it its place.
func (t *tx) Memberships(ctx context.Context, accountID string) ([]btk.MembershipInfo, error) {
	return all(ctx, t, "memberships", scanMembershipInfo,
		`SELECT m.workspace_id, w.name, m.role FROM memberships m JOIN workspaces w ON w.id = m.workspace_id
		WHERE m.account_id = $1 ORDER BY m.seq`, accountID)
}

func scanMembershipInfo(row sqlshared.Row) (btk.MembershipInfo, error) {
	var m btk.MembershipInfo
	err := row.Scan(&m.WorkspaceID, &m.WorkspaceName, &m.Role)
	return m, err
}

func (t *tx) SetMembership(ctx context.Context, m btk.Membership) error {
	_, err := t.exec(ctx, "set membership", false,
		`INSERT INTO memberships (workspace_id, account_id, role) VALUES ($1, $2, $3)
		ON CONFLICT (workspace_id, account_id) DO UPDATE SET role = excluded.role`,
		m.WorkspaceID, m.AccountID, string(m.Role))
	return err
}

func (t *tx) DeleteMembership(ctx context.Context, workspaceID, accountID string) error {
	_, err := t.exec(ctx, "delete membership", false,
		`DELETE FROM memberships WHERE workspace_id = $1 AND account_id = $2`, workspaceID, accountID)
	return err
}

func (t *tx) Session(ctx context.Context, id string) (*btk.Session, error) {
	var (
		s                btk.Session
		ws               *string
		created, expires int64
		revoked          *int64
	)
	err := t.tx.QueryRow(ctx,
		`SELECT id, account_id, workspace_id, impersonating, created_at, expires_at, revoked_at FROM sessions WHERE id = $1`+t.forUpdate(), id).
		Scan(&s.ID, &s.AccountID, &ws, &s.Impersonating, &created, &expires, &revoked)
	if err != nil {
		return nil, mapErr("session", err)
	}
	s.WorkspaceID = str(ws)
	s.CreatedAt, s.ExpiresAt, s.RevokedAt = sqlshared.FromNano(created), sqlshared.FromNano(expires), fromOptNano(revoked)
	return &s, nil
}

func (t *tx) CreateSession(ctx context.Context, s *btk.Session) error {
	_, err := t.exec(ctx, "create session", false,
		`INSERT INTO sessions (id, account_id, workspace_id, impersonating, created_at, expires_at, revoked_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		s.ID, s.AccountID, optStr(s.WorkspaceID), s.Impersonating, s.CreatedAt, s.ExpiresAt, s.RevokedAt)
	return err
}

// RevokeSession keeps the first revocation time when called twice; only a
// missing session is ErrNotFound.
func (t *tx) RevokeSession(ctx context.Context, id string, at time.Time) error {
	_, err := t.exec(ctx, "revoke session", true,
		`UPDATE sessions SET revoked_at = coalesce(revoked_at, $1) WHERE id = $2`, at, id)
	return err
}

func (t *tx) EndSession(ctx context.Context, id string, at time.Time) error {
	_, err := t.exec(ctx, "end session", true,
		`UPDATE sessions SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL`, at, id)
	return err
}

func (t *tx) RevokeMemberSessions(ctx context.Context, workspaceID, accountID string, at time.Time) error {
	_, err := t.exec(ctx, "revoke member sessions", false,
		`UPDATE sessions SET revoked_at = $1 WHERE workspace_id = $2 AND account_id = $3 AND NOT impersonating AND revoked_at IS NULL`,
		at, workspaceID, accountID)
	return err
}
