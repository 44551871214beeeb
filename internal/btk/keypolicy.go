package btk

import (
	"context"
	"errors"
	"slices"
	"time"
)

// Editing a key and the workspace key policy (docs/access.md).

// EventWorkspaceKeyPolicyChanged is the audit_events action of
// setWorkspaceKeyPolicy.
const EventWorkspaceKeyPolicyChanged = "workspace.key_policy_changed"

// MaxPolicyDays bounds both settings of a key policy.
const MaxPolicyDays = 3650

// SystemActorEmail names the actor of what the server does on its own (the
// unused-key sweep) in audit rows.
const SystemActorEmail = "system"

// Change is one field of an update: Set false leaves it unchanged; Set with
// a nil Value clears it.
type Change[T any] struct {
	Set   bool
	Value *T
}

// checkedList is the checked new value of a list change (null clears the
// list); nil when the list does not change.
func checkedList(c Change[[]string], check func([]string) ([]string, error)) ([]string, error) {
	if !c.Set {
		return nil, nil
	}
	var list []string
	if c.Value != nil {
		list = *c.Value
	}
	return check(list)
}

// sameItems reports whether a and b hold the same items in any order: a
// key's scopes and networks are sets (each list holds an item once), so
// reordering them is no change to audit (docs/access.md#editing-a-key).
func sameItems(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// UpdateKeyInput is what updateApiKey accepts.
type UpdateKeyInput struct {
	Name               Change[string]
	RateLimitPerMinute Change[int]
	RateLimitPerDay    Change[int]
	Scopes             Change[[]string]
	AllowedCIDRs       Change[[]string]
}

// UpdateKey edits a key's name, limits, scopes and networks; owner tier, on
// every plan. The next request of the key, on any instance, sees the change.
// A revoked key is KEY_REVOKED; an update that changes nothing writes no
// audit rows, but tells the other instances all the same.
func (s *Service) UpdateKey(ctx context.Context, a *Actor, id string, in UpdateKeyInput) (*APIKey, error) {
	if err := authorize(a, permManageKeys, ""); err != nil {
		return nil, err
	}
	var name string
	if in.Name.Set {
		if in.Name.Value == nil {
			return nil, badInput("name cannot be cleared")
		}
		var err error
		if name, err = cleanName("name", *in.Name.Value, MaxNameLen); err != nil {
			return nil, err
		}
	}
	scopes, err := checkedList(in.Scopes, checkScopes)
	if err != nil {
		return nil, err
	}
	cidrs, err := checkedList(in.AllowedCIDRs, checkCIDRs)
	if err != nil {
		return nil, err
	}
	if err := s.spendChange(ctx, a, ""); err != nil {
		return nil, err
	}
	var k *APIKey
	var changed bool
	var marks untold
	err = s.store.Write(ctx, func(tx Tx) error {
		old, err := ownKey(ctx, tx, a, id)
		if err != nil {
			return err
		}
		if old.RevokedAt != nil {
			return ErrKeyRevoked
		}
		nk := *old
		meta := map[string]any{}
		if in.Name.Set && name != old.Name {
			meta["name"] = map[string]any{"from": old.Name, "to": name}
			nk.Name = name
		}
		if in.RateLimitPerMinute.Set && !sameInt(in.RateLimitPerMinute.Value, old.RateLimitPerMinute) {
			meta["rateLimitPerMinute"] = map[string]any{"from": old.RateLimitPerMinute, "to": in.RateLimitPerMinute.Value}
			nk.RateLimitPerMinute = in.RateLimitPerMinute.Value
		}
		if in.RateLimitPerDay.Set && !sameInt(in.RateLimitPerDay.Value, old.RateLimitPerDay) {
			meta["rateLimitPerDay"] = map[string]any{"from": old.RateLimitPerDay, "to": in.RateLimitPerDay.Value}
			nk.RateLimitPerDay = in.RateLimitPerDay.Value
		}
		if err := checkLimits(nk.RateLimitPerMinute, nk.RateLimitPerDay); err != nil {
			return err
		}
		if in.Scopes.Set && !sameItems(scopes, old.Scopes) {
			meta["scopes"] = map[string]any{"from": nonNil(old.Scopes), "to": scopes}
			nk.Scopes = scopes
		}
		if in.AllowedCIDRs.Set && !sameItems(cidrs, old.AllowedCIDRs) {
			meta["allowedCidrs"] = map[string]any{"from": nonNil(old.AllowedCIDRs), "to": cidrs}
			nk.AllowedCIDRs = cidrs
		}
		k = &nk
		if len(meta) == 0 {
			return nil
		}
		if err := tx.UpdateAPIKey(ctx, &nk); err != nil {
			return err
		}
		changed = true
		if err := s.audit(ctx, tx, a, AuditEntry{Action: AuditUpdated, APIKeyID: nk.ID, APIKeyName: nk.Name},
			map[string]any{"name": nk.Name, "changes": meta}); err != nil {
			return err
		}
		marks, err = s.markUntold(ctx, tx, a.WorkspaceID) // last: the order of the sweep's locks
		return err
	})
	if err != nil {
		return nil, err
	}
	if changed {
		s.cache.dropKey(k.Hash)
	}
	// Also when nothing changed: this may be the repeat of an update whose
	// answer could not tell the other instances (see changed), and they
	// keep the old networks, scopes and limits until told.
	if err := s.tell(ctx, a.WorkspaceID, marks); err != nil {
		return nil, err
	}
	k.restrictions = nil
	return k, nil
}

func sameInt(a, b *int) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// checkPolicyDays validates one setting of a key policy.
func checkPolicyDays(what string, d *int) error {
	if d != nil && (*d < 1 || *d > MaxPolicyDays) {
		return badInput("%s must be 1-%d days", what, MaxPolicyDays)
	}
	return nil
}

// SetWorkspaceKeyPolicy sets (or, with nil, turns off) a workspace's maximum
// key lifetime and the revocation of unused keys; owner tier or platform
// admin. Keys in use are measured against it from their next request.
func (s *Service) SetWorkspaceKeyPolicy(ctx context.Context, a *Actor, workspaceID string, maxLifetimeDays, revokeUnusedAfterDays *int) (*Workspace, error) {
	if err := authorize(a, permWorkspaceLimits, workspaceID); err != nil {
		return nil, err
	}
	if err := checkPolicyDays("maxLifetimeDays", maxLifetimeDays); err != nil {
		return nil, err
	}
	if err := checkPolicyDays("revokeUnusedAfterDays", revokeUnusedAfterDays); err != nil {
		return nil, err
	}
	return s.updateWorkspace(ctx, a, workspaceID, EventWorkspaceKeyPolicyChanged, func(w *Workspace) map[string]any {
		meta := map[string]any{
			"maxLifetimeDays": maxLifetimeDays, "revokeUnusedAfterDays": revokeUnusedAfterDays,
			"previousMaxLifetimeDays":       w.KeyPolicy.MaxLifetimeDays,
			"previousRevokeUnusedAfterDays": w.KeyPolicy.RevokeUnusedAfterDays,
		}
		w.KeyPolicy = KeyPolicy{MaxLifetimeDays: maxLifetimeDays, RevokeUnusedAfterDays: revokeUnusedAfterDays}
		return meta
	})
}

// checkLifetime enforces the workspace's maximum key lifetime on a key
// being issued (create, rotate): it needs an expiresAt within it.
func checkLifetime(w *Workspace, expiresAt *time.Time, now time.Time) error {
	d := w.KeyPolicy.MaxLifetimeDays
	if d == nil {
		return nil
	}
	if expiresAt == nil || expiresAt.Sub(now) > time.Duration(*d)*24*time.Hour {
		e := badInput("the workspace's key policy allows keys of at most %d days: give an expiresAt within %d days", *d, *d)
		e.Reason = ReasonLifetimePolicy // the CLI names its flags instead
		return e
	}
	return nil
}

// MaxExpiry is the latest expiresAt the workspace's policy allows for a key
// issued at now, or nil when there is no maximum lifetime (the dashboard,
// which offers no expiry field, uses it).
func MaxExpiry(w *Workspace, now time.Time) *time.Time {
	d := w.KeyPolicy.MaxLifetimeDays
	if d == nil {
		return nil
	}
	t := now.Add(time.Duration(*d) * 24 * time.Hour).UTC().Truncate(time.Second)
	return &t
}

// RotationExpiry is the expiry a rotation with ExpiryWithinPolicy gives the
// new key (docs/access.md#workspace-key-policy): the old key's when the
// workspace's maximum lifetime allows it for a key issued at now, else that
// maximum. Without a maximum lifetime it is the old key's, as any rotation.
func RotationExpiry(w *Workspace, old *APIKey, now time.Time) *time.Time {
	max := MaxExpiry(w, now)
	if max == nil || (old.ExpiresAt != nil && !old.ExpiresAt.After(*max)) {
		return old.ExpiresAt
	}
	return max
}

// sweepBatch bounds the keys one sweep transaction revokes.
const sweepBatch = 500

// SweepUnusedKeys revokes, in every workspace with revokeUnusedAfterDays,
// the keys unused (by lastUsedAt, else createdAt) for that long, each with
// its audit pair attributed to the actor "system"; canary keys, which are
// unused by design and a revoked one records nothing, are left alone
// (docs/access.md#workspace-key-policy). Several instances may
// sweep at once: the store revokes a key only if it is still active and
// unused in the same UPDATE, so each key is revoked, and audited, once.
// It first tells the instances what an earlier revocation, on any
// instance, could not tell them (TellUntold). It returns how many keys it
// revoked.
func (s *Service) SweepUnusedKeys(ctx context.Context) (int, error) {
	errs := []error{s.TellUntold(ctx)}
	ws, err := read(ctx, s.store, func(tx Tx) ([]*Workspace, error) { return tx.Workspaces(ctx) })
	if err != nil {
		return 0, errors.Join(append(errs, err)...)
	}
	total := 0
	for _, w := range ws {
		d := w.KeyPolicy.RevokeUnusedAfterDays
		if d == nil {
			continue
		}
		for {
			n, err := s.sweepWorkspace(ctx, w.ID, *d)
			total += n
			if err != nil {
				errs = append(errs, err)
				break
			}
			if n < sweepBatch {
				break
			}
		}
	}
	return total, errors.Join(errs...)
}

func (s *Service) sweepWorkspace(ctx context.Context, workspaceID string, days int) (int, error) {
	now := s.now()
	before := now.Add(-time.Duration(days) * 24 * time.Hour)
	a := &Actor{WorkspaceID: workspaceID, Email: SystemActorEmail}
	var revoked []*APIKey
	var marks untold
	err := s.store.Write(ctx, func(tx Tx) (err error) {
		if revoked, err = tx.RevokeUnusedAPIKeys(ctx, workspaceID, before, now, sweepBatch); err != nil || len(revoked) == 0 {
			return err
		}
		for _, k := range revoked {
			err := s.audit(ctx, tx, a, AuditEntry{Action: AuditRevoked, APIKeyID: k.ID, APIKeyName: k.Name},
				map[string]any{"name": k.Name, "reason": "unused", "revokeUnusedAfterDays": days})
			if err != nil {
				return err
			}
		}
		marks, err = s.markUntold(ctx, tx, workspaceID)
		return err
	})
	if err != nil || len(revoked) == 0 {
		return 0, err
	}
	for _, k := range revoked {
		s.forgetKey(k)
	}
	return len(revoked), s.tell(ctx, workspaceID, marks)
}
