package btk

import (
	"context"
	"errors"
)

// SwitchWorkspace opens a session of the actor's account in another of its
// workspaces without asking the password again (the dashboard's workspace
// switcher): the account proved it at login, and the new session lasts no
// longer than a login's. The caller ends the old session. Impersonation
// sessions cannot switch (a platform admin impersonates again instead). The
// new session is recorded as session.login with switchedFrom.
func (s *Service) SwitchWorkspace(ctx context.Context, a *Actor, workspaceID string) (*SessionInfo, error) {
	if err := authorize(a, permUser, ""); err != nil {
		return nil, err
	}
	if a.Impersonating {
		return nil, Errorf(CodeBadUserInput, "an impersonation session cannot switch workspaces")
	}
	var info *SessionInfo
	err := s.store.Write(ctx, func(tx Tx) error {
		acct, err := tx.Account(ctx, a.AccountID)
		if err != nil {
			return err
		}
		ms, err := memberships(ctx, tx, acct.ID)
		if err != nil {
			return err
		}
		m, err := chooseWorkspace(ms, workspaceID, "")
		if err != nil {
			return err
		}
		if info, err = s.openSession(ctx, tx, acct, m.WorkspaceID, m.Role, false); err != nil {
			return err
		}
		return s.recordEvent(ctx, tx, a, m.WorkspaceID, EventSessionLogin, targetSession, info.SessionID,
			requestMeta(a, map[string]any{"role": string(m.Role), "switchedFrom": a.WorkspaceID}))
	})
	if errors.Is(err, ErrNotFound) {
		return nil, Errorf(CodeNotFound, "no membership in that workspace")
	}
	return info, err
}
