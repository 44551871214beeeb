package main

import (
	"errors"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/client"
)

// hintKey chooses a hint: an error code and, where one code covers cases
// the CLI tells apart, the server's extensions.reason ("" matches any).
type hintKey struct {
	code   btk.Code
	reason btk.Reason
}

// hints rewrite the server's messages, which speak GraphQL (arguments,
// mutations, headers), into the command line's flags and commands. They are
// chosen by code and reason, never by the wording of a message; an error
// without a hint keeps the server's own message.
var hints = map[hintKey]string{
	{btk.CodeBadUserInput, btk.ReasonExpiryRequired}:    "the key has expired: give the new key an expiry with --expires-in or --expires-at, or none with --no-expiry",
	{btk.CodeBadUserInput, btk.ReasonLifetimePolicy}:    "the workspace's key policy limits how long a key may live: give it an expiry within the maximum lifetime with --expires-in or --expires-at ('btk workspace policy' shows it)",
	{btk.CodeElevationRequired, ""}:                     "rotating needs a fresh proof of your password: let 'btk rotate' ask for it, pass it with --password-stdin, or pass a token from 'btk elevate' with --elevation-token",
	{btk.CodeUnauthenticated, btk.ReasonSessionInvalid}: "invalid or expired session: run 'btk login' (sessions last 12 hours)",
	{btk.CodeUnauthenticated, btk.ReasonUserRequired}:   "this command needs a user session, not an API key: unset BTK_TOKEN (or --token) and run 'btk login'",
	{btk.CodeNotFound, btk.ReasonNoWorkspace}:           "the session has no workspace: run 'btk login --workspace NAME', or 'btk impersonate WORKSPACE' as a platform admin",
	{btk.CodeBadUserInput, btk.ReasonTimeRange}:         "--since must be before --until",
	{btk.CodePlanUpgradeRequired, ""}:                   "the workspace's plan (CLOUD_STARTER) does not allow issuing API keys: a platform admin can change it with 'btk workspace set-plan WORKSPACE cloud_pro'",
	{client.CodeUnreachable, client.ReasonTimeout}:      "no answer from the btk server in time: try again, or allow longer with --timeout (BTK_TIMEOUT)",
	{btk.CodeBadUserInput, btk.ReasonWorkspaceChoice}:   "the account belongs to several workspaces: choose one with --workspace NAME or ID",
}

// hint returns err with its message in the command line's terms.
func hint(err error) error {
	var ce *client.Error
	if !errors.As(err, &ce) {
		return err
	}
	msg, ok := hints[hintKey{ce.Code, ce.Reason}]
	if !ok {
		msg, ok = hints[hintKey{ce.Code, ""}]
	}
	if !ok {
		return err
	}
	out := *ce
	out.Message = msg
	return &out
}

func asClientError(err error, target **client.Error) bool { return errors.As(err, target) }
