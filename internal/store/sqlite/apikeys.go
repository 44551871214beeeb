package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/sqlshared"
)

const selectKey = `SELECT seq, id, workspace_id, name, hash, display_prefix, hint,
	rate_limit_per_minute, rate_limit_per_day, expires_at, scopes, created_at, created_by,
	last_used_at, revoked_at, revoked_by, rotated_from_id, replaced_by_id, day_state, canary, allowed_cidrs
	FROM api_keys`

const keyCursor = 'k'

func scanKey(row sqlshared.Row) (*btk.APIKey, int64, error) {
	var (
		k                              btk.APIKey
		seq, created                   int64
		perMin, perDay                 sql.NullInt64
		expires, lastUsed, revoked     sql.NullInt64
		scopes, cidrs                  string
		createdBy, revokedBy, from, to sql.NullString
	)
	err := row.Scan(&seq, &k.ID, &k.WorkspaceID, &k.Name, &k.Hash, &k.DisplayPrefix, &k.Hint,
		&perMin, &perDay, &expires, &scopes, &created, &createdBy,
		&lastUsed, &revoked, &revokedBy, &from, &to, &k.DayState, &k.Canary, &cidrs)
	if err != nil {
		return nil, 0, err
	}
	if scopes != "[]" {
		if err := json.Unmarshal([]byte(scopes), &k.Scopes); err != nil {
			return nil, 0, fmt.Errorf("key %s scopes: %w", k.ID, err)
		}
	}
	if cidrs != "[]" {
		if err := json.Unmarshal([]byte(cidrs), &k.AllowedCIDRs); err != nil {
			return nil, 0, fmt.Errorf("key %s allowed cidrs: %w", k.ID, err)
		}
	}
	k.RateLimitPerMinute, k.RateLimitPerDay = fromOptInt(perMin), fromOptInt(perDay)
	k.ExpiresAt, k.LastUsedAt, k.RevokedAt = fromOptNano(expires), fromOptNano(lastUsed), fromOptNano(revoked)
	k.CreatedAt = sqlshared.FromNano(created)
	k.CreatedBy, k.RevokedBy = createdBy.String, revokedBy.String
	k.RotatedFromID, k.ReplacedByID = from.String, to.String
	return &k, seq, nil
}

func (t *tx) APIKey(ctx context.Context, id string) (*btk.APIKey, error) {
	k, _, err := scanKey(t.tx.QueryRowContext(ctx, selectKey+` WHERE id = ?`, id))
	return k, mapErr("api key", err)
}

// APIKeyByHash is the cold path of authentication: one prepared statement
// (compiled once per connection) seeking the unique hash index.
func (t *tx) APIKeyByHash(ctx context.Context, hash []byte) (*btk.APIKey, error) {
	k, _, err := scanKey(t.tx.StmtContext(ctx, t.byHash).QueryRowContext(ctx, hash))
	return k, mapErr("api key by hash", err)
}

// APIKeyByHash is the hash lookup outside any Read: a lone SELECT is its own
// read transaction, so this saves the BEGIN and COMMIT round trips of Read
// (about a third of a cold lookup). Not part of btk.Store yet.
func (db *DB) APIKeyByHash(ctx context.Context, hash []byte) (*btk.APIKey, error) {
	k, _, err := scanKey(db.byHashR.QueryRowContext(ctx, hash))
	return k, mapErr("api key by hash", err)
}

func (t *tx) APIKeys(ctx context.Context, f btk.KeyFilter) ([]*btk.APIKey, string, error) {
	q := selectKey + ` WHERE workspace_id = ?`
	if !f.IncludeRevoked {
		q += ` AND revoked_at IS NULL`
	}
	return list(ctx, t, "api keys", keyCursor, f.Page, q, []any{f.WorkspaceID}, scanKey)
}

func (t *tx) CreateAPIKey(ctx context.Context, k *btk.APIKey) error {
	scopes, cidrs, err := sqlshared.KeyLists(k)
	if err != nil {
		return fmt.Errorf("store: create api key: %w", err)
	}
	_, err = t.exec(ctx, "create api key", false,
		`INSERT INTO api_keys (id, workspace_id, name, hash, display_prefix, hint,
			rate_limit_per_minute, rate_limit_per_day, expires_at, scopes, created_at, created_by,
			last_used_at, revoked_at, revoked_by, rotated_from_id, replaced_by_id, day_state, canary, allowed_cidrs)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.WorkspaceID, k.Name, k.Hash, k.DisplayPrefix, k.Hint,
		optInt(k.RateLimitPerMinute), optInt(k.RateLimitPerDay), k.ExpiresAt, scopes, k.CreatedAt, optStr(k.CreatedBy),
		k.LastUsedAt, k.RevokedAt, optStr(k.RevokedBy), optStr(k.RotatedFromID), optStr(k.ReplacedByID), k.DayState, k.Canary, cidrs)
	return err
}

func (t *tx) UpdateAPIKey(ctx context.Context, k *btk.APIKey) error {
	scopes, cidrs, err := sqlshared.KeyLists(k)
	if err != nil {
		return fmt.Errorf("store: update api key: %w", err)
	}
	_, err = t.exec(ctx, "update api key", true,
		`UPDATE api_keys SET name = ?, rate_limit_per_minute = ?, rate_limit_per_day = ?,
			scopes = ?, allowed_cidrs = ?
		WHERE id = ? AND revoked_at IS NULL`,
		k.Name, optInt(k.RateLimitPerMinute), optInt(k.RateLimitPerDay), scopes, cidrs, k.ID)
	return err
}

// RevokeUnusedAPIKeys revokes and returns, in one conditional UPDATE, the
// keys a concurrent sweep has not revoked already.
func (t *tx) RevokeUnusedAPIKeys(ctx context.Context, workspaceID string, before, at time.Time, limit int) ([]*btk.APIKey, error) {
	b, err := sqlshared.UnixNano(before)
	if err != nil {
		return nil, err
	}
	n, err := sqlshared.UnixNano(at)
	if err != nil {
		return nil, err
	}
	ids, err := all(ctx, t, "revoke unused api keys", func(row sqlshared.Row) (id string, err error) {
		err = row.Scan(&id)
		return id, err
	}, `UPDATE api_keys SET revoked_at = ?
		WHERE id IN (SELECT id FROM api_keys WHERE workspace_id = ? AND revoked_at IS NULL AND canary = 0
			AND coalesce(last_used_at, created_at) < ? LIMIT ?)
		AND revoked_at IS NULL AND coalesce(last_used_at, created_at) < ?
		RETURNING id`, n, workspaceID, b, limit, b)
	if err != nil {
		return nil, err
	}
	keys := make([]*btk.APIKey, 0, len(ids))
	for _, id := range ids {
		k, err := t.APIKey(ctx, id)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

func (t *tx) RevokeAPIKey(ctx context.Context, id string, at time.Time, by, replacedBy string) error {
	_, err := t.exec(ctx, "revoke api key", true,
		`UPDATE api_keys SET revoked_at = ?, revoked_by = ?, replaced_by_id = ? WHERE id = ? AND revoked_at IS NULL`,
		at, optStr(by), optStr(replacedBy), id)
	return err
}

// CountActiveAPIKeys reads the partial index api_keys_workspace_active.
func (t *tx) CountActiveAPIKeys(ctx context.Context, workspaceID string) (int, error) {
	var n int
	err := t.tx.QueryRowContext(ctx,
		`SELECT count(*) FROM api_keys WHERE workspace_id = ? AND revoked_at IS NULL`, workspaceID).Scan(&n)
	return n, mapErr("count active api keys", err)
}

// RevokeAllAPIKeys also revokes expired keys: they are not revoked yet, and
// listing shows them until they are.
func (t *tx) RevokeAllAPIKeys(ctx context.Context, workspaceID string, at time.Time, by string) (int, error) {
	count, err := t.exec(ctx, "revoke all api keys", false,
		`UPDATE api_keys SET revoked_at = ?, revoked_by = ? WHERE workspace_id = ? AND revoked_at IS NULL`,
		at, optStr(by), workspaceID)
	return int(count), err
}

// ClaimCanaryMark records that a canary key's use is being recorded at
// at, unless one was recorded after notBefore (docs/leaks.md): one
// conditional upsert, so concurrent instances never both win.
func (t *tx) ClaimCanaryMark(ctx context.Context, keyID string, at, notBefore time.Time) (bool, error) {
	count, err := t.exec(ctx, "claim canary mark", false,
		`INSERT INTO canary_marks (api_key_id, recorded_at) VALUES (?, ?)
		ON CONFLICT (api_key_id) DO UPDATE SET recorded_at = excluded.recorded_at
		WHERE canary_marks.recorded_at <= ?`, keyID, at, notBefore)
	return count == 1, err
}

// rotationChainQuery walks a rotation chain both ways in one statement,
// one primary-key seek a key (docs/design.md#the-audit-commands): ?1 the
// key, ?2 its workspace, ?3 how many keys each way.
const rotationChainQuery = `WITH RECURSIVE
	older(id, next, n) AS (
		SELECT id, rotated_from_id, 0 FROM api_keys WHERE id = ?1 AND workspace_id = ?2
		UNION ALL
		SELECT k.id, k.rotated_from_id, o.n + 1 FROM older o JOIN api_keys k ON k.id = o.next
		WHERE o.n < ?3 AND k.workspace_id = ?2),
	newer(id, next, n) AS (
		SELECT id, replaced_by_id, 0 FROM api_keys WHERE id = ?1 AND workspace_id = ?2
		UNION ALL
		SELECT k.id, k.replaced_by_id, w.n + 1 FROM newer w JOIN api_keys k ON k.id = w.next
		WHERE w.n < ?3 AND k.workspace_id = ?2)
	SELECT 0, id, n FROM older UNION ALL SELECT 1, id, n FROM newer`

func (t *tx) RotationChain(ctx context.Context, workspaceID, keyID string, n int) (older, newer []string, err error) {
	links, err := all(ctx, t, "rotation chain", sqlshared.ScanChainLink, rotationChainQuery, keyID, workspaceID, n)
	if err != nil {
		return nil, nil, err
	}
	return sqlshared.ChainSides(links)
}
