package btk

import (
	"context"
	"time"
)

// Actor is who makes a request: a user session, or an API key. An API key
// identifies its workspace only: no account, no role, no session.
type Actor struct {
	AccountID     string
	Email         string
	PlatformAdmin bool
	SessionID     string
	// WorkspaceID is the workspace the credential acts in ("" for a session
	// without one).
	WorkspaceID string
	// Role is the account's role in WorkspaceID ("" when none).
	Role Role
	// Impersonating marks a platform admin's impersonation session.
	Impersonating bool
	// Elevated is set when the request carried a valid X-Elevation token for
	// this account and session.
	Elevated bool
	// KeyID is set when the credential is an API key.
	KeyID string
	// KeyScopes are the key's scopes, space-separated (X-Api-Key-Scopes).
	KeyScopes string

	// Request metadata recorded in audit rows.
	IP        string
	UserAgent string
}

// IsUser reports whether the actor is a logged-in account.
func (a *Actor) IsUser() bool { return a != nil && a.AccountID != "" }

// OwnerTier is TenantOwner, or a platform admin impersonating the workspace.
func (a *Actor) OwnerTier() bool {
	return a.Role == RoleOwner || a.PlatformAdmin && a.Impersonating
}

type actorKey struct{}

// WithActor returns a context carrying the actor.
func WithActor(ctx context.Context, a *Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorFrom returns the context's actor, or nil for an anonymous request.
func ActorFrom(ctx context.Context) *Actor {
	a, _ := ctx.Value(actorKey{}).(*Actor)
	return a
}

// permission names each kind of operation the policy decides on.
type permission int

const (
	// permWorkspace: read the caller's own workspace (any credential).
	permWorkspace permission = iota
	// permUser: anything about the caller's account (a user session).
	permUser
	// permReadKeys: list and read API keys (owner tier or ADMIN).
	permReadKeys
	// permManageKeys: create, rotate, revoke, revoke-all, read the audit trail (owner tier).
	permManageKeys
	// permOperate: server-wide operator actions (platform admin).
	permOperate
	// permMembers: change memberships of a workspace (platform admin, or its OWNER).
	permMembers
	// permWorkspaceLimits: change a workspace's default limits (platform admin or owner tier).
	permWorkspaceLimits
)

// authorize is the one place that decides who may do what. workspaceID is the
// workspace acted on ("" for the caller's own). Another workspace's objects
// answer NOT_FOUND, so their existence is never revealed.
func authorize(a *Actor, p permission, workspaceID string) error {
	if a == nil {
		return ErrUnauthenticated
	}
	if p == permWorkspace {
		if a.WorkspaceID == "" {
			return ErrNoWorkspace
		}
		return nil
	}
	if !a.IsUser() {
		return ErrUserRequired
	}
	if a.PlatformAdmin && (p == permOperate || p == permMembers || p == permWorkspaceLimits) {
		return nil
	}
	if p == permUser {
		return nil
	}
	if p == permOperate {
		return ErrForbidden
	}
	if a.WorkspaceID == "" {
		return ErrNoWorkspace
	}
	if workspaceID != "" && workspaceID != a.WorkspaceID {
		return ErrNotFound
	}
	var ok bool
	switch p {
	case permReadKeys:
		ok = a.OwnerTier() || a.Role == RoleAdmin
	case permManageKeys, permWorkspaceLimits:
		ok = a.OwnerTier()
	case permMembers:
		ok = a.Role == RoleOwner
	}
	if !ok {
		return ErrForbidden
	}
	return nil
}

// Clock returns the current time; tests inject their own.
type Clock func() time.Time
