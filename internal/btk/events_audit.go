package btk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// audit_events actions beyond the key actions (docs/design.md#audit). Each is written
// in the transaction of the change it records, attributed to the acting
// account and, in an impersonation session, to the impersonating platform
// admin. Events that belong to no workspace (an account created, a login or
// elevation of a session without a workspace) are stored with no workspace
// and read by platform admins with auditEvents(serverWide: true).
const (
	EventSessionLogin           = "session.login"
	EventSessionElevated        = "session.elevated"
	EventSessionImpersonated    = "session.impersonated"
	EventMembershipChanged      = "membership.changed"
	EventWorkspacePlanChanged   = "workspace.plan_changed"
	EventWorkspaceLimitsChanged = "workspace.limits_changed"
	EventAccountCreated         = "account.created"
	// The first row of a workspace's chain: who provisioned it, with which
	// name and plan (createWorkspace; "system" for the bootstrap's Default).
	EventWorkspaceCreated = "workspace.created"
)

// EventActions is every audit_events action btk writes, for clients that
// offer them (btk events --action): docs/webhooks.md#events.
func EventActions() []string {
	return []string{
		AuditCreated.EventAction(), AuditRotated.EventAction(), AuditRevoked.EventAction(),
		AuditRevokedAll.EventAction(), AuditUpdated.EventAction(),
		EventKeyLeaked, EventCanaryUsed, EventKeyExpiring,
		EventSessionLogin, EventSessionElevated, EventSessionImpersonated,
		EventMembershipChanged, EventWorkspaceCreated, EventWorkspacePlanChanged,
		EventWorkspaceLimitsChanged, EventWorkspaceKeyPolicyChanged,
		EventWebhookCreated, EventWebhookDeleted,
		EventAccountCreated, EventAccountPasswordChanged, EventAccountDisabled, EventAccountEnabled,
	}
}

// Target types of audit_events.
const (
	targetAccount   = "account"
	targetWorkspace = "workspace"
	targetSession   = "session"
)

// recordEvent writes one audit_events row in tx for the actor's change.
func (s *Service) recordEvent(ctx context.Context, tx Tx, a *Actor, workspaceID, action, targetType, targetID string, metadata map[string]any) error {
	meta, err := json.Marshal(metadata)
	if err != nil {
		return err
	}
	ev := &AuditEvent{
		ID: uuid.NewString(), WorkspaceID: workspaceID, Action: action,
		ActorID: a.AccountID, ActorEmail: a.Email,
		TargetType: targetType, TargetID: targetID, Metadata: string(meta), CreatedAt: s.now(),
	}
	if a.Impersonating {
		ev.ImpersonatorID = a.AccountID
	}
	return tx.AddAuditEvent(ctx, ev)
}

// requestMeta is the request's address and client, kept in event metadata
// (audit_events has no columns of its own for them).
func requestMeta(a *Actor, m map[string]any) map[string]any {
	if m == nil {
		m = map[string]any{}
	}
	if a.IP != "" {
		m["ip"] = ClientString(a.IP)
	}
	if a.UserAgent != "" {
		m["userAgent"] = ClientString(a.UserAgent)
	}
	return m
}

// MembershipInfo is one of an account's memberships, with the workspace's name.
type MembershipInfo struct {
	WorkspaceID   string
	WorkspaceName string
	Role          Role
}

// Memberships lists the actor's own memberships (me.memberships).
func (s *Service) Memberships(ctx context.Context, a *Actor) ([]MembershipInfo, error) {
	if err := authorize(a, permUser, ""); err != nil {
		return nil, err
	}
	return read(ctx, s.store, func(tx Tx) ([]MembershipInfo, error) {
		return tx.Memberships(ctx, a.AccountID)
	})
}

// WorkspaceChoiceError is the login failure of an account that belongs to
// several workspaces and named none. It carries the choices so that a
// client can offer them; it is returned only after the password was checked.
type WorkspaceChoiceError struct {
	Err        *Error
	Workspaces []MembershipInfo
}

func (e *WorkspaceChoiceError) Error() string { return e.Err.Error() }
func (e *WorkspaceChoiceError) Unwrap() error { return e.Err }

// chooseWorkspace picks the membership a login names by id or by name ("" for
// none): a name matches exactly, else case-insensitively when that is unique.
func chooseWorkspace(ms []MembershipInfo, id, name string) (MembershipInfo, error) {
	switch {
	case id != "":
		for _, m := range ms {
			if m.WorkspaceID == id {
				return m, nil
			}
		}
		return MembershipInfo{}, ErrNotFound
	case name != "":
		var folded []MembershipInfo
		for _, m := range ms {
			if m.WorkspaceName == name {
				return m, nil
			}
			if strings.EqualFold(m.WorkspaceName, name) {
				folded = append(folded, m)
			}
		}
		if len(folded) == 1 {
			return folded[0], nil
		}
		if len(folded) > 1 {
			return MembershipInfo{}, badInput("several of your workspaces are named %q: choose one by id", name)
		}
		return MembershipInfo{}, ErrNotFound
	case len(ms) == 1:
		return ms[0], nil
	case len(ms) > 1:
		names := make([]string, len(ms))
		for i, m := range ms {
			names[i] = m.WorkspaceName
		}
		return MembershipInfo{}, &WorkspaceChoiceError{
			Err: &Error{Code: CodeBadUserInput, Reason: ReasonWorkspaceChoice,
				Message: fmt.Sprintf("the account belongs to %d workspaces (%s); choose one with workspaceId or workspaceName", len(ms), strings.Join(names, ", "))},
			Workspaces: ms,
		}
	}
	return MembershipInfo{}, nil // no membership: a session without a workspace
}

// Member is one account's membership of a workspace.
type Member struct {
	AccountID string
	Email     string
	Role      Role
	Disabled  bool // the account is disabled: it cannot log in
}

// Members lists a workspace's members: a platform admin, or an OWNER or
// ADMIN of that workspace acting in it.
func (s *Service) Members(ctx context.Context, a *Actor, workspaceID string) ([]Member, error) {
	if !(a.IsUser() && a.PlatformAdmin) {
		if err := authorize(a, permReadKeys, workspaceID); err != nil {
			return nil, err
		}
	}
	if uuid.Validate(workspaceID) != nil {
		return nil, ErrNotFound
	}
	return read(ctx, s.store, func(tx Tx) ([]Member, error) {
		if _, err := tx.Workspace(ctx, workspaceID); err != nil {
			return nil, err
		}
		return tx.WorkspaceMembers(ctx, workspaceID)
	})
}

// Accounts lists every account; platform admin.
func (s *Service) Accounts(ctx context.Context, a *Actor) ([]*Account, error) {
	if err := authorize(a, permOperate, ""); err != nil {
		return nil, err
	}
	return read(ctx, s.store, func(tx Tx) ([]*Account, error) { return tx.Accounts(ctx) })
}

// MaxChainKeys bounds the keys of a rotation chain that one key's audit log
// covers on each side of the key asked for: the chain is walked in one
// statement (a primary-key seek a key), and its entries are read by their
// keys' ids. A key rotated every day for two years has 730 keys before it.
// Walked a read at a time up to 10,000 each way, a chain of 13,671
// rotations (about 32 s to make) cost every look at a key's history 0.33 s
// or more. A longer chain is reported cut (ChainCoverage), never silently:
// the log of its farthest key covered reads on
// (docs/design.md#the-audit-commands).
const MaxChainKeys = 1000

// ChainCoverage is the part of a key's rotation chain that its audit log
// covers.
type ChainCoverage struct {
	// Keys is how many keys the entries are about, the key asked for
	// included.
	Keys int
	// OldestID and NewestID are the farthest keys covered on each side: the
	// key asked for when it has none on that side.
	OldestID, NewestID string
	// OlderCut and NewerCut report that the chain goes on beyond OldestID
	// or NewestID (more than MaxChainKeys keys on that side): the entries of
	// the keys beyond are left out. OldestID's log goes on back, NewestID's
	// forward.
	OlderCut, NewerCut bool
}

// keyChain returns the ids of the keys of id's rotation chain, both ways
// (rotatedFromId back, replacedById forward), up to MaxChainKeys each way,
// so that one logical key's history shows whole, and what they cover. A
// key of another workspace is NOT_FOUND.
func keyChain(ctx context.Context, tx Tx, workspaceID, id string) ([]string, *ChainCoverage, error) {
	if uuid.Validate(id) != nil {
		return nil, nil, ErrNotFound
	}
	// One more than the bound: whether the chain goes on.
	older, newer, err := tx.RotationChain(ctx, workspaceID, id, MaxChainKeys+1)
	if err != nil {
		return nil, nil, err
	}
	c := &ChainCoverage{OldestID: id, NewestID: id}
	ids := []string{id}
	seen := map[string]bool{id: true}
	take := func(side []string, farthest *string, cut *bool) {
		for i, next := range side {
			if seen[next] { // a chain corrupted into a loop ends there
				return
			}
			if i == MaxChainKeys {
				*cut = true
				return
			}
			seen[next] = true
			ids = append(ids, next)
			*farthest = next
		}
	}
	take(older, &c.OldestID, &c.OlderCut)
	take(newer, &c.NewestID, &c.NewerCut)
	c.Keys = len(ids)
	return ids, c, nil
}

// An impersonated row (an audit entry, an audit event) names the platform
// admin who acted by impersonating its workspace, if any, and has room for
// that admin's email.
type impersonated interface {
	impersonator() (id string, email *string)
}

func (e *AuditEntry) impersonator() (string, *string) { return e.ImpersonatorID, &e.ImpersonatorEmail }
func (e *AuditEvent) impersonator() (string, *string) { return e.ImpersonatorID, &e.ImpersonatorEmail }

// impersonatorEmails fills in ImpersonatorEmail from the accounts table.
func impersonatorEmails[T impersonated](ctx context.Context, tx Tx, rows []T) error {
	emails := map[string]string{}
	for _, row := range rows {
		id, to := row.impersonator()
		if id == "" {
			continue
		}
		email, ok := emails[id]
		if !ok {
			acct, err := tx.Account(ctx, id)
			if err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			if acct != nil {
				email = acct.Email
			}
			emails[id] = email
		}
		*to = email
	}
	return nil
}
