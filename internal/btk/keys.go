package btk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// DefaultMaxKeysPerWorkspace bounds a workspace's keys that are not
// revoked (expired ones count until they are revoked; Config.MaxKeysPerWorkspace):
// every create adds a row, and revoke-all revokes them all in one
// transaction (docs/security.md, what a client can make the server hold).
// It sits well above the 10,000 active keys the product's budgets are
// measured with (docs/design.md#budgets), as the key cache's 100,000 does.
// Rotation replaces a key, so it is never refused by it; revoked keys stay
// as the record (docs/design.md#api-keys).
const DefaultMaxKeysPerWorkspace = 100_000

// errTooManyKeys refuses a create past the bound max. It is
// BAD_USER_INPUT, as the workspace's webhook bound is: no plan raises it.
func errTooManyKeys(max int) error {
	return &Error{Code: CodeBadUserInput, Message: fmt.Sprintf(
		"a workspace has at most %d keys that are not revoked; revoke keys it no longer uses (expired keys count until revoked)", max)}
}

// CreateKeyInput is what createApiKey accepts.
type CreateKeyInput struct {
	Name               string
	RateLimitPerMinute *int
	RateLimitPerDay    *int
	ExpiresAt          *time.Time
	Scopes             []string
	// Canary issues a trap key (docs/leaks.md): never accepted, its use recorded.
	Canary       bool
	AllowedCIDRs []string
}

// RotateKeyInput overrides what the new key inherits. ExpiresAtSet
// distinguishes "keep the old expiry" (false) from a new one or none.
type RotateKeyInput struct {
	Name         *string
	ExpiresAt    *time.Time
	ExpiresAtSet bool
	// ExpiryWithinPolicy, without ExpiresAtSet, keeps the old expiry only if
	// the workspace's maximum lifetime allows it, else sets that maximum
	// (RotationExpiry): for the dashboard, which has no expiry field. The
	// API and the CLI say the expiry they want instead.
	ExpiryWithinPolicy bool
}

// NewKeyResult is a key just issued, with its plaintext (shown once).
type NewKeyResult struct {
	Key       *APIKey
	Plaintext string
	Revoked   *APIKey // the key a rotation replaced
}

// ListKeys pages through the actor's workspace's keys, newest first.
func (s *Service) ListKeys(ctx context.Context, a *Actor, includeRevoked bool, p Page) ([]*APIKey, string, error) {
	if err := authorize(a, permReadKeys, ""); err != nil {
		return nil, "", err
	}
	if err := checkPage(p); err != nil {
		return nil, "", err
	}
	var keys []*APIKey
	var next string
	err := s.store.Read(ctx, func(tx Tx) (err error) {
		if keys, next, err = tx.APIKeys(ctx, KeyFilter{WorkspaceID: a.WorkspaceID, IncludeRevoked: includeRevoked, Page: p}); err != nil {
			return err
		}
		return applyPolicy(ctx, tx, a.WorkspaceID, keys...)
	})
	return keys, next, err
}

// Key returns one key of the actor's workspace, or nil.
func (s *Service) Key(ctx context.Context, a *Actor, id string) (*APIKey, error) {
	if err := authorize(a, permReadKeys, ""); err != nil {
		return nil, err
	}
	var k *APIKey
	err := s.store.Read(ctx, func(tx Tx) (err error) {
		if k, err = ownKey(ctx, tx, a, id); err != nil {
			return err
		}
		return applyPolicy(ctx, tx, a.WorkspaceID, k)
	})
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return k, err
}

// applyPolicy reads the workspace's key policy and sets it on keys
// (withPolicy).
func applyPolicy(ctx context.Context, tx Tx, workspaceID string, keys ...*APIKey) error {
	w, err := tx.Workspace(ctx, workspaceID)
	if err != nil {
		return err
	}
	withPolicy(w, keys...)
	return nil
}

// ownKey reads a key of the actor's workspace; any other key is NOT_FOUND.
func ownKey(ctx context.Context, tx Tx, a *Actor, id string) (*APIKey, error) {
	return inWorkspace(ctx, tx.APIKey, a.WorkspaceID, id)
}

// A workspaceRow belongs to one workspace: a key, a webhook.
type workspaceRow interface{ workspace() string }

func (k *APIKey) workspace() string  { return k.WorkspaceID }
func (w *Webhook) workspace() string { return w.WorkspaceID }

// inWorkspace reads the row id with get. A row of another workspace is
// NOT_FOUND, like an id that is no UUID or no row's: a workspace cannot tell
// another's rows from missing ones.
func inWorkspace[T workspaceRow](ctx context.Context, get func(context.Context, string) (T, error), workspaceID, id string) (T, error) {
	var none T
	if uuid.Validate(id) != nil {
		return none, ErrNotFound
	}
	row, err := get(ctx, id)
	if err != nil {
		return none, err
	}
	if row.workspace() != workspaceID {
		return none, ErrNotFound
	}
	return row, nil
}

// CreateKey issues a new key. Owner tier; the plan must allow issuing.
func (s *Service) CreateKey(ctx context.Context, a *Actor, in CreateKeyInput) (*NewKeyResult, error) {
	if err := authorize(a, permManageKeys, ""); err != nil {
		return nil, err
	}
	name, err := cleanName("name", in.Name, MaxNameLen)
	if err != nil {
		return nil, err
	}
	if err := checkLimits(in.RateLimitPerMinute, in.RateLimitPerDay); err != nil {
		return nil, err
	}
	if err := checkExpiry(in.ExpiresAt, s.now()); err != nil {
		return nil, err
	}
	scopes, err := checkScopes(in.Scopes)
	if err != nil {
		return nil, err
	}
	cidrs, err := checkCIDRs(in.AllowedCIDRs)
	if err != nil {
		return nil, err
	}
	// A full workspace is refused in a read transaction: counting 10,000
	// keys takes about 10 ms on SQLite, which creates refused over and
	// over would otherwise hold its one writer for.
	if err := s.store.Read(ctx, func(tx Tx) error { return s.checkKeyCount(ctx, tx, a.WorkspaceID) }); err != nil {
		return nil, err
	}
	if err := s.spendChange(ctx, a, ""); err != nil {
		return nil, err
	}
	var res *NewKeyResult
	err = s.store.Write(ctx, func(tx Tx) error {
		w, err := s.checkPlan(ctx, tx, a.WorkspaceID)
		if err != nil {
			return err
		}
		if err := checkLifetime(w, in.ExpiresAt, s.now()); err != nil {
			return err
		}
		// Counted again after checkPlan locked the workspace row
		// (PostgreSQL), so concurrent creates cannot all pass at the bound.
		if err := s.checkKeyCount(ctx, tx, a.WorkspaceID); err != nil {
			return err
		}
		k := &APIKey{
			Name: name, RateLimitPerMinute: in.RateLimitPerMinute, RateLimitPerDay: in.RateLimitPerDay,
			ExpiresAt: utc(in.ExpiresAt), Scopes: scopes, AllowedCIDRs: cidrs, Canary: in.Canary,
		}
		if res, err = s.issue(ctx, tx, a, k); err != nil {
			return err
		}
		meta := map[string]any{"name": k.Name, "displayPrefix": k.DisplayPrefix, "hint": k.Hint}
		if k.Canary {
			meta["canary"] = true
		}
		return s.audit(ctx, tx, a, AuditEntry{Action: AuditCreated, APIKeyID: k.ID, APIKeyName: k.Name}, meta)
	})
	return res, err
}

// RotateKey revokes a key and issues its replacement in one transaction. The
// new key inherits name, expiry, scopes and limits; name and expiry may be
// overridden. Owner tier, an elevated session, and a plan that allows issuing.
func (s *Service) RotateKey(ctx context.Context, a *Actor, id string, in RotateKeyInput) (*NewKeyResult, error) {
	if err := authorize(a, permManageKeys, ""); err != nil {
		return nil, err
	}
	if !a.Elevated {
		return nil, ErrElevationRequired
	}
	var name string
	if in.Name != nil {
		var err error
		if name, err = cleanName("name", *in.Name, MaxNameLen); err != nil {
			return nil, err
		}
	}
	now := s.now()
	if in.ExpiresAtSet {
		if err := checkExpiry(in.ExpiresAt, now); err != nil {
			return nil, err
		}
	}
	if err := s.spendChange(ctx, a, ""); err != nil {
		return nil, err
	}
	var res *NewKeyResult
	var marks untold
	err := s.store.Write(ctx, func(tx Tx) error {
		old, err := ownKey(ctx, tx, a, id)
		if err != nil {
			return err
		}
		switch old.Status(now) {
		case KeyRevoked:
			return ErrKeyRevoked
		case KeyExpired:
			if !in.ExpiresAtSet {
				return &Error{Code: CodeBadUserInput, Reason: ReasonExpiryRequired, Message: "the key has expired: give the new key an expiresAt (or null for none)"}
			}
		}
		w, err := s.checkPlan(ctx, tx, a.WorkspaceID)
		if err != nil {
			return err
		}
		k := &APIKey{
			ID: uuid.NewString(), Name: old.Name, RateLimitPerMinute: old.RateLimitPerMinute,
			RateLimitPerDay: old.RateLimitPerDay, ExpiresAt: old.ExpiresAt, Scopes: old.Scopes,
			AllowedCIDRs: old.AllowedCIDRs, RotatedFromID: old.ID, Canary: old.Canary,
		}
		if in.Name != nil {
			k.Name = name
		}
		if in.ExpiresAtSet {
			k.ExpiresAt = utc(in.ExpiresAt)
		} else if in.ExpiryWithinPolicy {
			k.ExpiresAt = RotationExpiry(w, old, now)
		}
		if err := checkLifetime(w, k.ExpiresAt, now); err != nil {
			return err
		}
		// Revoke first: the new key may take the old key's name.
		if err := tx.RevokeAPIKey(ctx, old.ID, now, a.AccountID, k.ID); err != nil {
			return err
		}
		if res, err = s.issue(ctx, tx, a, k); err != nil {
			return err
		}
		if res.Revoked, err = tx.APIKey(ctx, old.ID); err != nil {
			return err
		}
		if err := s.audit(ctx, tx, a, AuditEntry{Action: AuditRotated, APIKeyID: old.ID, APIKeyName: old.Name, NewAPIKeyID: k.ID},
			map[string]any{"name": old.Name, "newApiKeyId": k.ID, "newName": k.Name}); err != nil {
			return err
		}
		marks, err = s.markUntold(ctx, tx, a.WorkspaceID) // last: the order of the sweep's locks
		return err
	})
	if errors.Is(err, ErrKeyRevoked) {
		// Tell the other instances again: an earlier answer may have failed
		// to (see changed).
		return nil, errors.Join(err, s.changed(ctx, a.WorkspaceID))
	}
	if err != nil {
		return nil, err
	}
	s.forgetKey(res.Revoked)
	if err := s.tell(ctx, a.WorkspaceID, marks); err != nil {
		return nil, err
	}
	return res, nil
}

// RevokeKey revokes a key at once; on every plan. Revoking a revoked key
// returns it unchanged and writes no audit rows.
func (s *Service) RevokeKey(ctx context.Context, a *Actor, id string) (*APIKey, error) {
	if err := authorize(a, permManageKeys, ""); err != nil {
		return nil, err
	}
	var k *APIKey
	var revoked bool
	var marks untold
	err := s.store.Write(ctx, func(tx Tx) error {
		var err error
		if k, err = ownKey(ctx, tx, a, id); err != nil || k.RevokedAt != nil {
			return err
		}
		if err := tx.RevokeAPIKey(ctx, k.ID, s.now(), a.AccountID, ""); err != nil {
			return err
		}
		if k, err = tx.APIKey(ctx, k.ID); err != nil {
			return err
		}
		revoked = true
		if err := s.audit(ctx, tx, a, AuditEntry{Action: AuditRevoked, APIKeyID: k.ID, APIKeyName: k.Name},
			map[string]any{"name": k.Name}); err != nil {
			return err
		}
		marks, err = s.markUntold(ctx, tx, a.WorkspaceID) // last: the order of the sweep's locks
		return err
	})
	if err != nil {
		return nil, err
	}
	if revoked {
		s.forgetKey(k)
	}
	// Also when it was revoked already: an earlier answer may have failed
	// to tell the other instances (see changed).
	if err := s.tell(ctx, a.WorkspaceID, marks); err != nil {
		return nil, err
	}
	return k, nil
}

// RevokeAllKeys revokes every key of the actor's workspace (incident
// response); on every plan. It writes one pair of audit rows even when there
// was nothing to revoke, as long as the workspace's change budget has room:
// it counts once against that budget and is never refused by it, but a
// revoke-all that revokes nothing past the budget writes nothing.
func (s *Service) RevokeAllKeys(ctx context.Context, a *Actor) (int, error) {
	if err := authorize(a, permManageKeys, ""); err != nil {
		return 0, err
	}
	room := s.chargeChange(ctx, a)
	var n int
	var marks untold
	err := s.store.Write(ctx, func(tx Tx) error {
		// The entry's time is the keys' revoked_at: a key's audit log finds
		// the revoke-all that revoked it by it (docs/design.md#audit).
		now := s.now()
		var err error
		if n, err = tx.RevokeAllAPIKeys(ctx, a.WorkspaceID, now, a.AccountID); err != nil {
			return err
		}
		// One that revoked keys is bounded by their creations; one that
		// revoked nothing only by the budget.
		if n > 0 || room {
			if err := s.audit(ctx, tx, a, AuditEntry{Action: AuditRevokedAll, RevokedCount: &n, CreatedAt: now},
				map[string]any{"revokedCount": n}); err != nil {
				return err
			}
		}
		marks, err = s.markUntold(ctx, tx, a.WorkspaceID) // last: the order of the sweep's locks
		return err
	})
	if err != nil {
		return 0, err
	}
	s.cache.dropWorkspace(a.WorkspaceID, true)
	if err := s.tell(ctx, a.WorkspaceID, marks); err != nil {
		return 0, err
	}
	return n, nil
}

// issue completes k (id, secret, audit fields) and stores it.
func (s *Service) issue(ctx context.Context, tx Tx, a *Actor, k *APIKey) (*NewKeyResult, error) {
	if k.ID == "" {
		k.ID = uuid.NewString()
	}
	plaintext, hash, displayPrefix, hint := NewKey(a.WorkspaceID)
	k.WorkspaceID, k.Hash, k.DisplayPrefix, k.Hint = a.WorkspaceID, hash, displayPrefix, hint
	k.CreatedAt, k.CreatedBy = s.now(), a.AccountID
	if k.Scopes == nil {
		k.Scopes = []string{}
	}
	if k.AllowedCIDRs == nil {
		k.AllowedCIDRs = []string{}
	}
	if err := tx.CreateAPIKey(ctx, k); err != nil {
		return nil, err
	}
	return &NewKeyResult{Key: k, Plaintext: plaintext}, nil
}

// checkKeyCount refuses a key more in a workspace that has
// Config.MaxKeysPerWorkspace keys not revoked.
func (s *Service) checkKeyCount(ctx context.Context, tx Tx, workspaceID string) error {
	n, err := tx.CountActiveAPIKeys(ctx, workspaceID)
	if err != nil {
		return err
	}
	if n >= s.cfg.MaxKeysPerWorkspace {
		return errTooManyKeys(s.cfg.MaxKeysPerWorkspace)
	}
	return nil
}

// checkPlan refuses issuing keys on a plan that does not allow it, and
// returns the workspace.
func (s *Service) checkPlan(ctx context.Context, tx Tx, workspaceID string) (*Workspace, error) {
	w, err := tx.Workspace(ctx, workspaceID)
	if err != nil {
		return nil, err
	}
	if !w.Plan.AllowsIssuing() {
		return nil, ErrPlanUpgrade
	}
	return w, nil
}

// audit writes the two audit rows of a change, in the change's transaction.
func (s *Service) audit(ctx context.Context, tx Tx, a *Actor, e AuditEntry, metadata map[string]any) error {
	return s.auditAs(ctx, tx, a, e, e.Action.EventAction(), metadata)
}

// auditAs is audit with the audit_events action named (api_key.leaked pairs
// with a REVOKED entry).
func (s *Service) auditAs(ctx context.Context, tx Tx, a *Actor, e AuditEntry, eventAction string, metadata map[string]any) error {
	now := e.CreatedAt // set by a change that stored the same time
	if now.IsZero() {
		now = s.now()
	}
	e.ID, e.WorkspaceID, e.CreatedAt = uuid.NewString(), a.WorkspaceID, now
	e.ActorID, e.ActorEmail, e.IP, e.UserAgent = a.AccountID, a.Email, ClientString(a.IP), ClientString(a.UserAgent)
	if a.Impersonating {
		e.ImpersonatorID = a.AccountID
	}
	// The event carries the client's address and user agent too, as the
	// key audit row does (the audit page shows where a change came from).
	meta, err := json.Marshal(requestMeta(a, metadata))
	if err != nil {
		return err
	}
	target := e.APIKeyID
	targetType := "api_key"
	if e.Action == AuditRevokedAll {
		target, targetType = a.WorkspaceID, "workspace"
	}
	ev := &AuditEvent{
		ID: uuid.NewString(), WorkspaceID: e.WorkspaceID, Action: eventAction,
		ActorID: e.ActorID, ActorEmail: e.ActorEmail, ImpersonatorID: e.ImpersonatorID,
		TargetType: targetType, TargetID: target, Metadata: string(meta), CreatedAt: now,
	}
	return tx.AddAudit(ctx, &e, ev)
}

// forgetKey drops a revoked key from the cache and the limiter once its
// revocation is committed, so the very next request reads it revoked.
func (s *Service) forgetKey(k *APIKey) {
	s.cache.dropKey(k.Hash)
	s.gate.Forget(k.ID)
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
