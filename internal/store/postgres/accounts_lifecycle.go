package postgres

import (
	"context"
	"time"
)

// SetAccountPassword replaces the account's password hash.
func (t *tx) SetAccountPassword(ctx context.Context, accountID, hash string) error {
	_, err := t.exec(ctx, "set account password", true,
		`UPDATE accounts SET password_hash = $1 WHERE id = $2`, hash, accountID)
	return err
}

// SetAccountDisabled disables the account at *at, or enables it when at is nil.
func (t *tx) SetAccountDisabled(ctx context.Context, accountID string, at *time.Time) error {
	_, err := t.exec(ctx, "set account disabled", true,
		`UPDATE accounts SET disabled_at = $1 WHERE id = $2`, at, accountID)
	return err
}

// RevokeAccountSessions ends every session of the account, impersonation
// included, except the session exceptID ("" for none).
func (t *tx) RevokeAccountSessions(ctx context.Context, accountID, exceptID string, at time.Time) error {
	_, err := t.exec(ctx, "revoke account sessions", false,
		`UPDATE sessions SET revoked_at = $1 WHERE account_id = $2 AND id <> $3 AND revoked_at IS NULL`,
		at, accountID, exceptID)
	return err
}
