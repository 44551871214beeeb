package main

import (
	"errors"
	"strings"

	"github.com/btk-project/btk/internal/client"
)

// hints rewrite the server's messages, which speak GraphQL (arguments,
// mutations, headers), into the command line's flags and commands. Matched
// by a fragment of the message, so that a server with other wording still
// shows its own message.
var hints = []struct {
	code, fragment, message string
}{
	{"BAD_USER_INPUT", "give the new key an expiresAt",
		"the key has expired: give the new key an expiry with --expires-in or --expires-at, or none with --no-expiry"},
	{"ELEVATION_REQUIRED", "elevate mutation",
		"rotating needs a fresh proof of your password: let 'btk rotate' ask for it, pass it with --password-stdin, or pass a token from 'btk elevate' with --elevation-token"},
	{"UNAUTHENTICATED", "invalid or expired session",
		"invalid or expired session: run 'btk login' (sessions last 12 hours)"},
	{"UNAUTHENTICATED", "needs a user session",
		"this command needs a user session, not an API key: unset BTK_TOKEN (or --token) and run 'btk login'"},
	{"NOT_FOUND", "the session has no workspace",
		"the session has no workspace: run 'btk login --workspace NAME', or 'btk impersonate WORKSPACE' as a platform admin"},
	{"BAD_USER_INPUT", "since must be before until",
		"--since must be before --until"},
	{"PLAN_UPGRADE_REQUIRED", "upgrade to Cloud Pro",
		"the workspace's plan (CLOUD_STARTER) does not allow issuing API keys: a platform admin can change it with 'btk workspace set-plan WORKSPACE cloud_pro'"},
	{client.CodeUnreachable, "within the timeout",
		"no answer from the btk server in time: try again, or allow longer with --timeout (BTK_TIMEOUT)"},
	{"BAD_USER_INPUT", "choose one with workspaceId",
		"the account belongs to several workspaces: choose one with --workspace NAME or ID"},
}

// hint returns err with its message in the command line's terms.
func hint(err error) error {
	var ce *client.Error
	if !errors.As(err, &ce) {
		return err
	}
	for _, h := range hints {
		if ce.Code == h.code && strings.Contains(ce.Message, h.fragment) {
			out := *ce
			out.Message = h.message
			return &out
		}
	}
	return err
}

func asClientError(err error, target **client.Error) bool { return errors.As(err, target) }
