package btk

import (
	"context"
	"errors"

	"github.com/btk-project/btk/internal/ratelimit"
)

// switchBudget bounds one account's workspace switches: each opens a
// session and writes a session.login event, and no password check
// throttles it (docs/security.md#what-a-client-can-make-the-server-hold).
var switchBudget = ratelimit.Limits{PerMinute: 10, PerDay: 200}

// ErrTooManySwitches refuses a switch over switchBudget.
var ErrTooManySwitches = &Error{Code: CodeRateLimited, Message: "too many workspace switches; try again later"}

// SwitchWorkspace replaces the actor's session with one in another of its
// account's workspaces without asking the password again (the dashboard's
// workspace switcher): the account proved it at login. The new session ends
// when the replaced one would have, so switching never extends a login past
// its 12 hours, and it replaces the session once: a second switch of the
// same session is refused as an ended session. Impersonation sessions
// cannot switch (a platform admin impersonates again instead). The new
// session is recorded as session.login with "switched".
func (s *Service) SwitchWorkspace(ctx context.Context, a *Actor, workspaceID string) (*SessionInfo, error) {
	if err := authorize(a, permUser, ""); err != nil {
		return nil, err
	}
	switch {
	case a.Impersonating:
		return nil, Errorf(CodeBadUserInput, "an impersonation session cannot switch workspaces")
	case workspaceID == "":
		return nil, Errorf(CodeBadUserInput, "name the workspace to switch to")
	case workspaceID == a.WorkspaceID:
		return nil, Errorf(CodeBadUserInput, "the session is in that workspace already")
	}
	d, err := s.passwords.limiter.Allow(ctx, throttleKey(protectedSwitchKind, a.AccountID), switchBudget, s.now())
	if err != nil {
		return nil, refusal(d, err)
	}
	if !d.Allowed {
		return nil, ErrTooManySwitches
	}
	var info *SessionInfo
	err = s.store.Write(ctx, func(tx Tx) error {
		old, err := tx.Session(ctx, a.SessionID)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				return ErrInvalidSession
			}
			return err
		}
		acct, err := tx.Account(ctx, a.AccountID)
		if err != nil {
			return err
		}
		ms, err := tx.Memberships(ctx, acct.ID)
		if err != nil {
			return err
		}
		m, err := chooseWorkspace(ms, workspaceID, "")
		if err != nil {
			return err
		}
		if err := tx.EndSession(ctx, old.ID, s.now()); err != nil {
			if errors.Is(err, ErrNotFound) { // switched or logged out meanwhile
				return ErrInvalidSession
			}
			return err
		}
		if info, err = s.openSession(ctx, tx, acct, m.WorkspaceID, m.Role, false, old.ExpiresAt); err != nil {
			return err
		}
		// Not the workspace switched from: its owners are not this one's.
		return s.recordEvent(ctx, tx, a, m.WorkspaceID, EventSessionLogin, targetSession, info.SessionID,
			requestMeta(a, map[string]any{"role": string(m.Role), "switched": true}))
	})
	if errors.Is(err, ErrNotFound) {
		return nil, Errorf(CodeNotFound, "no membership in that workspace")
	}
	return info, err
}
