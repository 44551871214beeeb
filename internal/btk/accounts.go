package btk

import (
	"context"
	"errors"
	"strings"

	"github.com/google/uuid"
)

// Account lifecycle (docs/design.md#accounts-and-roles): a password change ends the account's other
// sessions; a platform admin can disable an account, which cannot log in
// and whose sessions, impersonation included, end at once.

// Errors of the account lifecycle.
var (
	ErrAccountDisabled = &Error{Code: CodeUnauthenticated, Message: "the account is disabled; ask a platform admin"}
	ErrDisableSelf     = &Error{Code: CodeBadUserInput, Message: "you cannot disable your own account"}
	ErrAccountRef      = &Error{Code: CodeBadUserInput, Message: "give exactly one of id and email"}
)

// ChangePassword checks the actor's current password and sets a new one. It
// ends every other session of the account (impersonation included); the
// caller's own session stays.
func (s *Service) ChangePassword(ctx context.Context, a *Actor, current, newPassword string) error {
	if err := authorize(a, permUser, ""); err != nil {
		return err
	}
	if err := checkPassword(newPassword); err != nil {
		return err
	}
	acct, err := read(ctx, s.store, func(tx Tx) (*Account, error) { return tx.Account(ctx, a.AccountID) })
	if err != nil {
		return err
	}
	ok, err := s.passwords.check(ctx, s.now(), acct.ID, a.IP, acct.PasswordHash, current)
	if err != nil {
		return err
	}
	if !ok {
		return ErrWrongPassword
	}
	hash := HashPassword(newPassword)
	return s.store.Write(ctx, func(tx Tx) error {
		now := s.now()
		if err := tx.SetAccountPassword(ctx, acct.ID, hash); err != nil {
			return err
		}
		if err := tx.RevokeAccountSessions(ctx, acct.ID, a.SessionID, now); err != nil {
			return err
		}
		return s.accountEvent(ctx, tx, a, EventAccountPasswordChanged, acct)
	})
}

// DisableAccount disables the account named by id or email (exactly one) and
// ends all its sessions; platform admin. Disabling a disabled account changes
// nothing.
func (s *Service) DisableAccount(ctx context.Context, a *Actor, id, email string) (*Account, error) {
	return s.setDisabled(ctx, a, id, email, true)
}

// EnableAccount lets a disabled account log in again; its old sessions stay
// ended. Platform admin.
func (s *Service) EnableAccount(ctx context.Context, a *Actor, id, email string) (*Account, error) {
	return s.setDisabled(ctx, a, id, email, false)
}

func (s *Service) setDisabled(ctx context.Context, a *Actor, id, email string, disable bool) (*Account, error) {
	if err := authorize(a, permOperate, ""); err != nil {
		return nil, err
	}
	id, email = strings.TrimSpace(id), strings.TrimSpace(email)
	if (id == "") == (email == "") {
		return nil, ErrAccountRef
	}
	if id != "" && uuid.Validate(id) != nil {
		return nil, ErrNotFound
	}
	var acct *Account
	err := s.store.Write(ctx, func(tx Tx) (err error) {
		if id != "" {
			acct, err = tx.Account(ctx, id)
		} else {
			acct, err = accountByEmail(ctx, tx, email)
		}
		if err != nil {
			return err
		}
		if acct.ID == a.AccountID && disable {
			return ErrDisableSelf
		}
		if (acct.DisabledAt != nil) == disable {
			return nil // already so
		}
		now := s.now()
		action := EventAccountEnabled
		acct.DisabledAt = nil
		if disable {
			action, acct.DisabledAt = EventAccountDisabled, &now
			if err := tx.RevokeAccountSessions(ctx, acct.ID, "", now); err != nil {
				return err
			}
		}
		if err := tx.SetAccountDisabled(ctx, acct.ID, acct.DisabledAt); err != nil {
			return err
		}
		return s.accountEvent(ctx, tx, a, action, acct)
	})
	if errors.Is(err, ErrNotFound) {
		return nil, Errorf(CodeNotFound, "no such account")
	}
	if err != nil {
		return nil, err
	}
	return acct, nil
}

// accountEvent writes the audit_events row of an account change. Accounts
// belong to no workspace: like account.created, the row is server-wide
// (auditEvents(serverWide: true), for platform admins).
func (s *Service) accountEvent(ctx context.Context, tx Tx, a *Actor, action string, target *Account) error {
	return s.recordEvent(ctx, tx, a, "", action, targetAccount, target.ID,
		requestMeta(a, map[string]any{"email": target.Email}))
}

// ResetPassword is the operator's recovery (btk account reset-password, run
// on the server host against the database): it sets the account's
// password, ends all its sessions, and records account.password_changed
// attributed to "system". It needs no actor: who may run it is who may
// write the database.
func (s *Service) ResetPassword(ctx context.Context, email, password string) (*Account, error) {
	if err := checkPassword(password); err != nil {
		return nil, err
	}
	email = strings.TrimSpace(email)
	var acct *Account
	if err := s.store.Read(ctx, func(tx Tx) (err error) {
		acct, err = accountByEmail(ctx, tx, email)
		return err
	}); err != nil {
		return nil, err
	}
	hash := HashPassword(password) // outside the transaction: argon2id is slow
	err := s.store.Write(ctx, func(tx Tx) error {
		if err := tx.SetAccountPassword(ctx, acct.ID, hash); err != nil {
			return err
		}
		if err := tx.RevokeAccountSessions(ctx, acct.ID, "", s.now()); err != nil {
			return err
		}
		return s.accountEvent(ctx, tx, &Actor{Email: "system"}, EventAccountPasswordChanged, acct)
	})
	if err != nil {
		return nil, err
	}
	return acct, nil
}

// accountByEmail is tx.AccountByEmail for an email a caller typed: text the
// stores cannot hold (a NUL, invalid UTF-8) names no account, on SQLite as
// on PostgreSQL, which would refuse the statement instead. At login that
// makes it an unknown email: charged to the throttles like a wrong password.
func accountByEmail(ctx context.Context, tx Tx, email string) (*Account, error) {
	if !storedText(email) {
		return nil, ErrNotFound
	}
	return tx.AccountByEmail(ctx, email)
}
