package btk

import (
	"context"
	"fmt"
	"time"

	"github.com/btk-project/btk/internal/ratelimit"
)

// A workspace's change budget (docs/security.md#what-a-client-can-make-the-server-hold).
//
// Every change to a workspace writes rows nothing deletes: a key, its audit
// pair, the events its webhooks are sent. An owner looping rotations under
// one elevation wrote 878 a second, about 420 MB per elevation. The budget
// bounds the changes that add something: creating, rotating and updating
// keys, creating webhooks, changing a member's role, the workspace's
// limits, key policy and plan. Changes that only take away — revoking a
// key, revoke-all, a leak report's revocation, deleting a webhook, removing
// a member — are never refused: each undoes what a budgeted change (or a
// platform admin) made, so they are bounded by those, and an attacker who
// spends the budget with a stolen OWNER session must not keep the real
// owner from revoking keys. A platform admin acting on another workspace
// than its session's (impersonating it, or naming it) is neither counted
// nor refused: the operator, who makes workspaces and accounts without a
// budget already, acts on a workspace whose budget an attacker spent.

// DefaultChangeBudget is a workspace's budget of changes: a CI job
// rotating a few keys never meets it, a batch import of thousands of keys
// runs at 10 a second past its first 600, and a workspace grows by at most
// about 20,000 changes a day (docs/design.md#api-keys).
var DefaultChangeBudget = ratelimit.Limits{PerMinute: 600, PerDay: 20_000}

// budgeted reports whether a's change to workspaceID spends the
// workspace's budget.
func budgeted(a *Actor, workspaceID string) bool {
	return !a.Impersonating && (!a.PlatformAdmin || workspaceID == a.WorkspaceID)
}

// spendChange counts one change of a to workspaceID ("" for the actor's
// own), before its transaction, so that a refusal writes nothing. Over the
// budget it is RATE_LIMITED, saying when to try again; a shared budget that
// does not answer refuses (UNAVAILABLE), as the password throttles do.
func (s *Service) spendChange(ctx context.Context, a *Actor, workspaceID string) error {
	if workspaceID == "" {
		workspaceID = a.WorkspaceID
	}
	if !budgeted(a, workspaceID) {
		return nil
	}
	d, err := s.passwords.limiter.Allow(ctx, throttleKey(protectedChangeKind, workspaceID), s.cfg.ChangeBudget, s.now())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if !d.Allowed {
		return errSpent("too many changes in this workspace (revoking keys is never refused)", d.RetryAfter)
	}
	return nil
}

// chargeChange counts one change that is never refused (revoke-all) and
// reports whether the budget had room for it.
func (s *Service) chargeChange(ctx context.Context, a *Actor) bool {
	return s.spendChange(ctx, a, "") == nil
}

// errSpent refuses what a budget does not allow now, saying when it takes
// one again, rounded up to the second: a script knows how long to wait.
func errSpent(what string, retry time.Duration) *Error {
	if retry <= 0 {
		return &Error{Code: CodeRateLimited, Message: what + "; try again later"}
	}
	return Errorf(CodeRateLimited, "%s; try again in %s", what, (retry + time.Second - 1).Truncate(time.Second))
}
