package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/sqlshared"
)

const selectKey = `SELECT seq, id, workspace_id, name, hash, display_prefix, hint,
	rate_limit_per_minute, rate_limit_per_day, expires_at, scopes::text, created_at, created_by,
	last_used_at, revoked_at, revoked_by, rotated_from_id, replaced_by_id, day_state, canary, allowed_cidrs::text
	FROM api_keys`

const keyCursor = 'k'

func scanKey(row sqlshared.Row) (*btk.APIKey, int64, error) {
	var (
		k                              btk.APIKey
		seq, created                   int64
		perMin, perDay                 *int64
		expires, lastUsed, revoked     *int64
		scopes, cidrs                  string
		createdBy, revokedBy, from, to *string
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
	k.CreatedBy, k.RevokedBy = str(createdBy), str(revokedBy)
	k.RotatedFromID, k.ReplacedByID = str(from), str(to)
	return &k, seq, nil
}

// APIKey, in a write transaction, locks the key until commit: a rotation or
// revocation racing this one waits, then reads the revoked key.
func (t *tx) APIKey(ctx context.Context, id string) (*btk.APIKey, error) {
	k, _, err := scanKey(t.tx.QueryRow(ctx, selectKey+` WHERE id = $1`+t.forUpdate(), id))
	return k, mapErr("api key", err)
}

// APIKeyByHash is the cold path of authentication: one statement (prepared
// once per connection by pgx's statement cache) seeking the unique hash
// index.
func (t *tx) APIKeyByHash(ctx context.Context, hash []byte) (*btk.APIKey, error) {
	k, _, err := scanKey(t.tx.QueryRow(ctx, selectKey+` WHERE hash = $1`, hash))
	return k, mapErr("api key by hash", err)
}

// APIKeyByHash is the hash lookup outside any Read: a lone SELECT is its own
// transaction, which saves the BEGIN and COMMIT round trips of Read. Not part
// of btk.Store yet (as on SQLite).
func (db *DB) APIKeyByHash(ctx context.Context, hash []byte) (*btk.APIKey, error) {
	k, _, err := scanKey(db.pool.QueryRow(ctx, selectKey+` WHERE hash = $1`, hash))
	return k, mapErr("api key by hash", err)
}

func (t *tx) APIKeys(ctx context.Context, f btk.KeyFilter) ([]*btk.APIKey, string, error) {
	var a args
	q := selectKey + ` WHERE workspace_id = ` + a.add(f.WorkspaceID)
	if !f.IncludeRevoked {
		q += ` AND revoked_at IS NULL`
	}
	return list(ctx, t, "api keys", keyCursor, f.Page, q, a, scanKey)
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
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, CAST($10::text AS json), $11, $12, $13, $14, $15, $16, $17, $18, $19, CAST($20::text AS json))`,
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
		`UPDATE api_keys SET name = $1, rate_limit_per_minute = $2, rate_limit_per_day = $3,
			scopes = CAST($4::text AS json), allowed_cidrs = CAST($5::text AS json)
		WHERE id = $6 AND revoked_at IS NULL`,
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
	}, `UPDATE api_keys SET revoked_at = $1
		WHERE id IN (SELECT id FROM api_keys WHERE workspace_id = $2 AND revoked_at IS NULL AND NOT canary
			AND coalesce(last_used_at, created_at) < $3 LIMIT $4)
		AND revoked_at IS NULL AND coalesce(last_used_at, created_at) < $3
		RETURNING id`, n, workspaceID, b, limit)
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
		`UPDATE api_keys SET revoked_at = $1, revoked_by = $2, replaced_by_id = $3 WHERE id = $4 AND revoked_at IS NULL`,
		at, optStr(by), optStr(replacedBy), id)
	return err
}

// CountActiveAPIKeys reads the partial index api_keys_workspace_active.
func (t *tx) CountActiveAPIKeys(ctx context.Context, workspaceID string) (int, error) {
	var n int
	err := t.tx.QueryRow(ctx,
		`SELECT count(*) FROM api_keys WHERE workspace_id = $1 AND revoked_at IS NULL`, workspaceID).Scan(&n)
	return n, mapErr("count active api keys", err)
}

// RevokeAllAPIKeys also revokes expired keys: they are not revoked yet, and
// listing shows them until they are.
//
// It revokes in two passes around a lock of the workspace row. The first
// pass locks every active key, waiting for rotations in flight. Every key
// insert holds a share lock on its workspace row (the foreign key check), so
// once the lock is granted every concurrent insert has committed, and the
// second pass (a new snapshot at READ COMMITTED) revokes those keys too; a
// later insert waits until this transaction commits. Locking the workspace
// first instead could deadlock with a rotation holding its key's row.
//
// The second pass must not wait for a key while holding the workspace row:
// a key created between the passes may be locked meanwhile by an update,
// revocation or rotation of it, which then needs the workspace row (its
// audit rows' foreign key, checkPlan), and the two would deadlock (40P01).
// So the second pass does not wait (NOWAIT): when such a key is locked, the
// workspace lock is given back (the savepoint), the locked keys are waited
// for without it, and the workspace is locked again.
//
// Two revoke-alls of one workspace take turns (a transaction-scoped advisory
// lock, taken before any row): each locks keys over several passes, so
// together they could each hold a key the other's later pass waits for
// (40P01, seen under TestConcurrentChangesUnderTheUntoldList). It is the
// transaction's first lock, so waiting for it holds nothing another needs.
func (t *tx) RevokeAllAPIKeys(ctx context.Context, workspaceID string, at time.Time, by string) (int, error) {
	if _, err := t.exec(ctx, "revoke all api keys", false,
		`SELECT pg_advisory_xact_lock(hashtextextended('btk revoke-all ' || $1, 0))`, workspaceID); err != nil {
		return 0, err
	}
	// Rows are locked in id order, the order RecordUsage takes them in, so
	// that a usage flush and a revoke-all never deadlock.
	const revoke = `WITH locked AS MATERIALIZED (
			SELECT id FROM api_keys WHERE workspace_id = $3 AND revoked_at IS NULL ORDER BY id FOR UPDATE%s
		)
		UPDATE api_keys k SET revoked_at = $1, revoked_by = $2 FROM locked l WHERE k.id = l.id AND k.revoked_at IS NULL`
	waiting, nowait := fmt.Sprintf(revoke, ""), fmt.Sprintf(revoke, " NOWAIT")
	n, err := t.exec(ctx, "revoke all api keys", false, waiting, at, optStr(by), workspaceID)
	if err != nil {
		return 0, err
	}
	if !t.write {
		second, err := t.exec(ctx, "revoke all api keys", false, waiting, at, optStr(by), workspaceID)
		return int(n + second), err
	}
	for try := 0; ; try++ {
		if _, err := t.exec(ctx, "revoke all api keys", false, `SAVEPOINT revoke_all`); err != nil {
			return 0, err
		}
		if _, err := t.exec(ctx, "revoke all api keys", false, `SELECT FROM workspaces WHERE id = $1 FOR UPDATE`, workspaceID); err != nil {
			return 0, err
		}
		// Past maxRevokeAllTries (keys created and locked again and
		// again), it waits as it did before NOWAIT: PostgreSQL then
		// breaks a deadlock, should one form.
		q := nowait
		if try == maxRevokeAllTries {
			q = waiting
		}
		second, err := t.exec(ctx, "revoke all api keys", false, q, at, optStr(by), workspaceID)
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || pe.Code != "55P03" { // lock_not_available
			return int(n + second), err
		}
		if _, err := t.exec(ctx, "revoke all api keys", false, `ROLLBACK TO SAVEPOINT revoke_all`); err != nil {
			return 0, err
		}
		more, err := t.exec(ctx, "revoke all api keys", false, waiting, at, optStr(by), workspaceID)
		if err != nil {
			return 0, err
		}
		n += more
	}
}

// maxRevokeAllTries bounds how often RevokeAllAPIKeys gives back the
// workspace lock to wait for a key.
const maxRevokeAllTries = 16

// ClaimCanaryMark records that a canary key's use is being recorded at
// at, unless one was recorded after notBefore (docs/leaks.md): one
// conditional upsert, so concurrent instances never both win.
func (t *tx) ClaimCanaryMark(ctx context.Context, keyID string, at, notBefore time.Time) (bool, error) {
	count, err := t.exec(ctx, "claim canary mark", false,
		`INSERT INTO canary_marks (api_key_id, recorded_at) VALUES ($1, $2)
		ON CONFLICT (api_key_id) DO UPDATE SET recorded_at = excluded.recorded_at
		WHERE canary_marks.recorded_at <= $3`, keyID, at, notBefore)
	return count == 1, err
}

// rotationChainQuery walks a rotation chain both ways in one statement,
// one primary-key seek a key (docs/design.md#the-audit-commands): $1 the
// key, $2 its workspace, $3 how many keys each way.
const rotationChainQuery = `WITH RECURSIVE
	older(id, next, n) AS (
		SELECT id, rotated_from_id, 0 FROM api_keys WHERE id = $1 AND workspace_id = $2
		UNION ALL
		SELECT k.id, k.rotated_from_id, o.n + 1 FROM older o JOIN api_keys k ON k.id = o.next
		WHERE o.n < $3 AND k.workspace_id = $2),
	newer(id, next, n) AS (
		SELECT id, replaced_by_id, 0 FROM api_keys WHERE id = $1 AND workspace_id = $2
		UNION ALL
		SELECT k.id, k.replaced_by_id, w.n + 1 FROM newer w JOIN api_keys k ON k.id = w.next
		WHERE w.n < $3 AND k.workspace_id = $2)
	SELECT 0, id, n FROM older UNION ALL SELECT 1, id, n FROM newer`

func (t *tx) RotationChain(ctx context.Context, workspaceID, keyID string, n int) (older, newer []string, err error) {
	links, err := all(ctx, t, "rotation chain", sqlshared.ScanChainLink, rotationChainQuery, keyID, workspaceID, n)
	if err != nil {
		return nil, nil, err
	}
	return sqlshared.ChainSides(links)
}
