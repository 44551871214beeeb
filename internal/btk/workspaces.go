package btk

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/btk-project/btk/internal/ratelimit"
)

// Workspace returns the actor's own workspace (tenantInfo); any credential.
// It is served from the key cache when possible.
func (s *Service) Workspace(ctx context.Context, a *Actor) (*Workspace, error) {
	if err := authorize(a, permWorkspace, ""); err != nil {
		return nil, err
	}
	w, gen := s.cache.workspace(a.WorkspaceID)
	if w != nil && (a.KeyID != "" || !s.clustered) {
		// With several instances, a cached workspace is vouched for only by
		// the key check this request passed.
		return w, nil
	}
	err := s.store.Read(ctx, func(tx Tx) (err error) {
		w, err = tx.Workspace(ctx, a.WorkspaceID)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !s.clustered { // with several instances, only a key check fills (under its revision)
		s.cache.fillWorkspace(gen, w)
	}
	return w, nil
}

// Me returns the actor's account; a user session is required.
func (s *Service) Me(ctx context.Context, a *Actor) (*Account, error) {
	if err := authorize(a, permUser, ""); err != nil {
		return nil, err
	}
	return read(ctx, s.store, func(tx Tx) (*Account, error) { return tx.Account(ctx, a.AccountID) })
}

// WorkspaceBranding returns the workspace of a public client key, or nil.
// Public: a bpk_ key identifies a workspace and grants nothing else.
func (s *Service) WorkspaceBranding(ctx context.Context, publicKey string) (*Workspace, error) {
	if !storedText(publicKey) { // no key's, on either store
		return nil, nil
	}
	w, err := read(ctx, s.store, func(tx Tx) (*Workspace, error) {
		return tx.WorkspaceByPublicKey(ctx, publicKey)
	})
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return w, err
}

// Workspaces lists every workspace; platform admin.
func (s *Service) Workspaces(ctx context.Context, a *Actor) ([]*Workspace, error) {
	if err := authorize(a, permOperate, ""); err != nil {
		return nil, err
	}
	return read(ctx, s.store, func(tx Tx) ([]*Workspace, error) { return tx.Workspaces(ctx) })
}

// CreateWorkspace provisions a workspace; platform admin.
func (s *Service) CreateWorkspace(ctx context.Context, a *Actor, name string, plan Plan) (*Workspace, error) {
	if err := authorize(a, permOperate, ""); err != nil {
		return nil, err
	}
	name, err := cleanName("workspace name", name, maxWorkspaceLen)
	if err != nil {
		return nil, err
	}
	if !plan.Valid() {
		return nil, badInput("unknown plan %q", plan)
	}
	var w *Workspace
	err = s.store.Write(ctx, func(tx Tx) (err error) {
		if w, err = s.createWorkspace(ctx, tx, name, plan); err != nil {
			return err
		}
		// The first row of the new workspace's chain: its owners and every
		// platform admin read who provisioned it (docs/design.md#audit).
		return s.recordEvent(ctx, tx, a, w.ID, EventWorkspaceCreated, targetWorkspace, w.ID,
			requestMeta(a, map[string]any{"name": w.Name, "plan": string(w.Plan)}))
	})
	if err != nil {
		return nil, err
	}
	return w, nil
}

// SetWorkspacePlan changes a workspace's plan; platform admin. Keys already
// issued keep authenticating; only issuing depends on the plan.
func (s *Service) SetWorkspacePlan(ctx context.Context, a *Actor, workspaceID string, plan Plan) (*Workspace, error) {
	if err := authorize(a, permOperate, ""); err != nil {
		return nil, err
	}
	if !plan.Valid() {
		return nil, badInput("unknown plan %q", plan)
	}
	return s.updateWorkspace(ctx, a, workspaceID, EventWorkspacePlanChanged, func(w *Workspace) map[string]any {
		old := w.Plan
		w.Plan = plan
		return map[string]any{"plan": string(plan), "previousPlan": string(old)}
	})
}

// SetWorkspaceRateLimits sets a workspace's default limits (nil restores the
// server default); platform admin or owner tier. The next request uses them.
func (s *Service) SetWorkspaceRateLimits(ctx context.Context, a *Actor, workspaceID string, perMinute, perDay *int) (*Workspace, error) {
	if err := authorize(a, permWorkspaceLimits, workspaceID); err != nil {
		return nil, err
	}
	if err := checkLimits(perMinute, perDay); err != nil {
		return nil, err
	}
	return s.updateWorkspace(ctx, a, workspaceID, EventWorkspaceLimitsChanged, func(w *Workspace) map[string]any {
		meta := map[string]any{
			"perMinute": perMinute, "perDay": perDay,
			"previousPerMinute": w.RateLimitPerMinute, "previousPerDay": w.RateLimitPerDay,
		}
		w.RateLimitPerMinute, w.RateLimitPerDay = perMinute, perDay
		return meta
	})
}

// updateWorkspace applies change and writes its audit event (action, with
// the metadata change returns) in one transaction.
func (s *Service) updateWorkspace(ctx context.Context, a *Actor, id, action string, change func(*Workspace) map[string]any) (*Workspace, error) {
	if uuid.Validate(id) != nil {
		return nil, ErrNotFound
	}
	if err := s.spendChange(ctx, a, id); err != nil {
		return nil, err
	}
	var w *Workspace
	var marks untold
	err := s.store.Write(ctx, func(tx Tx) (err error) {
		if w, err = tx.Workspace(ctx, id); err != nil {
			return err
		}
		meta := change(w)
		if err := tx.UpdateWorkspace(ctx, w); err != nil {
			return err
		}
		if err := s.recordEvent(ctx, tx, a, id, action, targetWorkspace, id, requestMeta(a, meta)); err != nil {
			return err
		}
		marks, err = s.markUntold(ctx, tx, id) // last: the order of the sweep's locks
		return err
	})
	if err != nil {
		return nil, err
	}
	s.cache.dropWorkspace(id, false)
	if err := s.tell(ctx, id, marks); err != nil {
		return nil, err
	}
	return w, nil
}

// CreateAccount creates an account; platform admin.
func (s *Service) CreateAccount(ctx context.Context, a *Actor, email, password string, platformAdmin bool) (*Account, error) {
	if err := authorize(a, permOperate, ""); err != nil {
		return nil, err
	}
	email, err := cleanEmail(email)
	if err != nil {
		return nil, err
	}
	if err := checkPassword(password); err != nil {
		return nil, err
	}
	acct := &Account{ID: uuid.NewString(), Email: email, PasswordHash: HashPassword(password), PlatformAdmin: platformAdmin, CreatedAt: s.now()}
	err = s.store.Write(ctx, func(tx Tx) error {
		if err := tx.CreateAccount(ctx, acct); err != nil {
			return err
		}
		// An account belongs to no workspace: a server-wide event.
		return s.recordEvent(ctx, tx, a, "", EventAccountCreated, targetAccount, acct.ID,
			requestMeta(a, map[string]any{"email": acct.Email, "platformAdmin": acct.PlatformAdmin}))
	})
	if err != nil {
		return nil, err
	}
	return acct, nil
}

// Impersonate opens an owner-tier session of a platform admin in a workspace.
func (s *Service) Impersonate(ctx context.Context, a *Actor, workspaceID string) (*SessionInfo, error) {
	if err := authorize(a, permOperate, ""); err != nil {
		return nil, err
	}
	if uuid.Validate(workspaceID) != nil {
		return nil, ErrNotFound
	}
	d, err := s.passwords.limiter.Allow(ctx, throttleKey(protectedImpersonateKind, a.AccountID), impersonateBudget, s.now())
	if err != nil {
		return nil, refusal(d, err)
	}
	if !d.Allowed {
		return nil, ErrTooManyImpersonations
	}
	var info *SessionInfo
	err = s.store.Write(ctx, func(tx Tx) error {
		acct, err := tx.Account(ctx, a.AccountID)
		if err != nil {
			return err
		}
		role, err := tx.Role(ctx, workspaceID, a.AccountID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		// The new session ends when the admin's does: impersonating again
		// from an impersonation session never outlives the login's 12 hours.
		expires := s.now().Add(SessionTTL)
		if a.SessionID != "" {
			from, err := tx.Session(ctx, a.SessionID)
			if errors.Is(err, ErrNotFound) {
				return ErrInvalidSession
			}
			if err != nil {
				return err
			}
			expires = minTime(expires, from.ExpiresAt)
		}
		if info, err = s.openSession(ctx, tx, acct, workspaceID, role, true, expires); err != nil {
			return err
		}
		// Attributed to the admin, who is also the impersonator from now on.
		imp := *a
		imp.Impersonating = true
		return s.recordEvent(ctx, tx, &imp, workspaceID, EventSessionImpersonated, targetSession, info.SessionID,
			requestMeta(a, map[string]any{"workspaceName": info.Workspace.Name}))
	})
	return info, err
}

// impersonateBudget bounds one platform admin's impersonations: each opens
// a session and writes an event, with no password check to throttle it
// (docs/security.md#what-a-client-can-make-the-server-hold).
var impersonateBudget = ratelimit.Limits{PerMinute: 10, PerDay: 200}

// ErrTooManyImpersonations refuses an impersonation over impersonateBudget.
var ErrTooManyImpersonations = &Error{Code: CodeRateLimited, Message: "too many impersonations; try again later"}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// Membership errors of an OWNER (not a platform admin).
var (
	ErrOwnerCannotAdd = &Error{Code: CodeForbidden, Message: "only a platform admin can add an account to a workspace; an OWNER changes or removes existing members"}
	ErrNotMember      = &Error{Code: CodeNotFound, Message: "no such member in this workspace"}
	ErrLastOwner      = &Error{Code: CodeBadUserInput, Reason: ReasonLastOwner,
		Message: "a workspace keeps at least one OWNER whose account is enabled: make another member OWNER first"}
)

// SetMembership gives an account a role in a workspace, or removes it when
// role is "". A platform admin may add any account; an OWNER of that
// workspace (acting in it) changes the role of an existing member or removes
// one. Nobody, a platform admin included, demotes or removes a workspace's
// last OWNER: without one nobody in the workspace could revoke its keys in
// an incident (docs/security.md#accounts).
func (s *Service) SetMembership(ctx context.Context, a *Actor, workspaceID, accountID string, role Role) error {
	if err := authorize(a, permMembers, workspaceID); err != nil {
		return err
	}
	if role != "" && !role.Valid() {
		return badInput("unknown role %q", role)
	}
	if uuid.Validate(workspaceID) != nil || uuid.Validate(accountID) != nil {
		return ErrNotFound
	}
	if role != "" { // a removal only takes away: never refused
		if err := s.spendChange(ctx, a, workspaceID); err != nil {
			return err
		}
	}
	return s.store.Write(ctx, func(tx Tx) error {
		if _, err := tx.Workspace(ctx, workspaceID); err != nil {
			return err
		}
		previous, err := tx.Role(ctx, workspaceID, accountID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if previous == "" && !a.PlatformAdmin {
			// An OWNER changes and removes existing members only, and
			// learns nothing about accounts outside the workspace: the
			// answer is the same whether the account exists or not.
			if role != "" {
				return ErrOwnerCannotAdd
			}
			return ErrNotMember
		}
		if previous == RoleOwner && role != RoleOwner {
			// tx.Workspace locked the workspace row above (FOR UPDATE on
			// PostgreSQL, the one writer on SQLite): two owners demoting
			// each other take turns, and the second sees the first's change.
			if err := keepAnOwner(ctx, tx, workspaceID, accountID); err != nil {
				return err
			}
		}
		member, err := tx.Account(ctx, accountID)
		if err != nil {
			return err
		}
		if role == "" {
			// End its sessions there too, so that a later membership does
			// not bring an old (possibly stolen) token back to life.
			if err := tx.RevokeMemberSessions(ctx, workspaceID, accountID, s.now()); err != nil {
				return err
			}
			err = tx.DeleteMembership(ctx, workspaceID, accountID)
		} else {
			err = tx.SetMembership(ctx, Membership{WorkspaceID: workspaceID, AccountID: accountID, Role: role})
		}
		if err != nil {
			return err
		}
		meta := map[string]any{"accountId": accountID, "email": member.Email, "role": nil, "previousRole": nil}
		if role != "" {
			meta["role"] = string(role)
		}
		if previous != "" {
			meta["previousRole"] = string(previous)
		}
		return s.recordEvent(ctx, tx, a, workspaceID, EventMembershipChanged, targetAccount, accountID, requestMeta(a, meta))
	})
}

// keepAnOwner refuses a change that takes the OWNER role from accountID when
// no other member of the workspace whose account is enabled holds it.
func keepAnOwner(ctx context.Context, tx Tx, workspaceID, accountID string) error {
	members, err := tx.WorkspaceMembers(ctx, workspaceID)
	if err != nil {
		return err
	}
	for _, m := range members {
		// A disabled OWNER cannot log in to revoke anything: it does not
		// count (disabling one is never refused: a platform admin acts on
		// a compromised account at once, and appoints another OWNER).
		if m.Role == RoleOwner && m.AccountID != accountID && !m.Disabled {
			return nil
		}
	}
	return ErrLastOwner
}

// KeyAuditPage is a page of the key audit log.
type KeyAuditPage struct {
	Entries []*AuditEntry
	// Next is the cursor of the next page, "" when none follows.
	Next string
	// Chain, when the log of one key is asked for (its APIKeyID), is the
	// part of the key's rotation chain the entries cover; nil for an
	// unknown key.
	Chain *ChainCoverage
}

// KeyAuditLog pages through the key audit log, newest first: owner tier for
// its own workspace, a platform admin for any.
func (s *Service) KeyAuditLog(ctx context.Context, a *Actor, f AuditFilter) (*KeyAuditPage, error) {
	if err := s.authorizeAudit(a, &f); err != nil {
		return nil, err
	}
	release, err := s.scan(ctx, f.WorkspaceID)
	if err != nil {
		return nil, err
	}
	defer release()
	var p KeyAuditPage
	err = s.store.Read(ctx, func(tx Tx) (err error) {
		p = KeyAuditPage{}
		if f.WorkspaceID != a.WorkspaceID { // a platform admin's look elsewhere
			if _, err := tx.Workspace(ctx, f.WorkspaceID); err != nil {
				return err
			}
		}
		if f.APIKeyID != "" {
			// One logical key: every key of its rotation chain. The names
			// in the rows are the names at the time.
			if f.APIKeyIDs, p.Chain, err = keyChain(ctx, tx, f.WorkspaceID, f.APIKeyID); errors.Is(err, ErrNotFound) {
				f.APIKeyIDs, err = nil, nil // unknown here: no entries, as before
			}
			if err != nil {
				return err
			}
		}
		if p.Entries, p.Next, err = tx.AuditEntries(ctx, f); err != nil {
			return err
		}
		return impersonatorEmails(ctx, tx, p.Entries)
	})
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// AuditEvents pages through the workspace's audit_events, newest first:
// owner tier for its own workspace; a platform admin for any workspaceID, or
// with f.NoWorkspace for the server-wide events (accounts created, logins
// without a workspace).
func (s *Service) AuditEvents(ctx context.Context, a *Actor, f AuditFilter) ([]*AuditEvent, string, error) {
	f.APIKeyID, f.APIKeyIDs, f.Action = "", nil, ""
	if f.NoWorkspace {
		if err := authorize(a, permOperate, ""); err != nil {
			return nil, "", err
		}
		f.WorkspaceID = ""
		if err := checkAuditFilter(&f); err != nil {
			return nil, "", err
		}
	} else if err := s.authorizeAudit(a, &f); err != nil {
		return nil, "", err
	}
	release, err := s.scan(ctx, f.WorkspaceID)
	if err != nil {
		return nil, "", err
	}
	defer release()
	var events []*AuditEvent
	var next string
	err = s.store.Read(ctx, func(tx Tx) (err error) {
		if !f.NoWorkspace && f.WorkspaceID != a.WorkspaceID {
			if _, err := tx.Workspace(ctx, f.WorkspaceID); err != nil {
				return err
			}
		}
		if events, next, err = tx.AuditEvents(ctx, f); err != nil {
			return err
		}
		return impersonatorEmails(ctx, tx, events)
	})
	return events, next, err
}

// epoch is before any event: an earlier since (the zero time included) is
// no bound at all, an earlier until matches nothing.
var epoch = time.Unix(0, 0)

// errEmptyRange refuses a range whose since is not before its until.
var errEmptyRange = &Error{Code: CodeBadUserInput, Reason: ReasonTimeRange, Message: "since must be before until"}

func checkAuditFilter(f *AuditFilter) error {
	if f.Since != nil && f.Since.Before(epoch) {
		f.Since = nil
	}
	if f.Until != nil && f.Until.Before(epoch) {
		return badInput("until must be after 1970-01-01T00:00:00Z")
	}
	if (f.Since != nil && !StoredTime(*f.Since)) || (f.Until != nil && !StoredTime(*f.Until)) {
		return ErrTimeRange // past 2262: refused here as the store would
	}
	if f.Since != nil && f.Until != nil && !f.Since.Before(*f.Until) {
		return errEmptyRange
	}
	// The filters a caller types (ids are matched as text too): the same
	// answer on both stores, not PostgreSQL's refusal of the statement.
	for _, s := range []string{f.APIKeyID, f.ActorEmail, f.EventAction} {
		if !storedText(s) {
			return ErrBadText
		}
	}
	return checkPage(f.Page)
}

func (s *Service) authorizeAudit(a *Actor, f *AuditFilter) error {
	// A platform admin reads any workspace's trail; others their own.
	if a.IsUser() && a.PlatformAdmin && f.WorkspaceID != "" {
		if uuid.Validate(f.WorkspaceID) != nil {
			return ErrNotFound
		}
	} else {
		if err := authorize(a, permManageKeys, f.WorkspaceID); err != nil {
			return err
		}
		f.WorkspaceID = a.WorkspaceID
	}
	if f.Action != "" && !f.Action.Valid() {
		return badInput("unknown action %q", f.Action)
	}
	return checkAuditFilter(f)
}
