package btk

import (
	"errors"
	"fmt"
)

// Code classifies an error for callers: it becomes extensions.code in GraphQL
// responses, an HTTP status (gateway.Status) and an exit code in the CLI
// (cmd/btk/exit.go). Every code the domain gives is declared here, and only
// here (docs/design.md#error-codes); the two others are declared where they
// arise: the GraphQL layer's refusals of a document before it runs
// (internal/graphql) and the client's failures before any answer
// (internal/client).
type Code string

const (
	CodeUnauthenticated     Code = "UNAUTHENTICATED"
	CodeForbidden           Code = "FORBIDDEN"
	CodeElevationRequired   Code = "ELEVATION_REQUIRED"
	CodePlanUpgradeRequired Code = "PLAN_UPGRADE_REQUIRED"
	CodeNameTaken           Code = "NAME_TAKEN"
	CodeNotFound            Code = "NOT_FOUND"
	CodeKeyRevoked          Code = "KEY_REVOKED"
	CodeBadUserInput        Code = "BAD_USER_INPUT"
	CodeRateLimited         Code = "RATE_LIMITED"
	CodeInternal            Code = "INTERNAL"
	// CodeUnavailable marks a failure of a dependency that is busy or down
	// (the database locked by another writer, a deadline passed while
	// waiting for it): nothing is wrong with the request, and retrying it
	// later may work.
	CodeUnavailable Code = "UNAVAILABLE"
	// CodeBadGateway and CodeGatewayTimeout answer a proxied request whose
	// upstream did not answer, or not in time (docs/gateway.md).
	CodeBadGateway     Code = "BAD_GATEWAY"
	CodeGatewayTimeout Code = "GATEWAY_TIMEOUT"
)

// Codes lists every code, for the tables that map them (HTTP status, exit
// code) to check that they miss none.
var Codes = []Code{
	CodeUnauthenticated, CodeForbidden, CodeElevationRequired, CodePlanUpgradeRequired, CodeNameTaken,
	CodeNotFound, CodeKeyRevoked, CodeBadUserInput, CodeRateLimited, CodeInternal, CodeUnavailable,
	CodeBadGateway, CodeGatewayTimeout,
}

// Reason tells apart errors of one code where a client acts differently on
// each (the CLI's hints): extensions.reason in GraphQL answers. Optional:
// most errors have none, and a client must work with the code alone.
type Reason string

const (
	ReasonSessionInvalid  Reason = "SESSION_INVALID"  // bad, expired or ended session token: log in again
	ReasonUserRequired    Reason = "USER_REQUIRED"    // an API key was given where a user session is needed
	ReasonNoWorkspace     Reason = "NO_WORKSPACE"     // the session has no workspace
	ReasonExpiryRequired  Reason = "EXPIRY_REQUIRED"  // rotating an expired key needs a new expiry (or none)
	ReasonLifetimePolicy  Reason = "LIFETIME_POLICY"  // the workspace's maximum key lifetime needs an expiry within it
	ReasonTimeRange       Reason = "TIME_RANGE"       // since is not before until
	ReasonWorkspaceChoice Reason = "WORKSPACE_CHOICE" // the account has several workspaces: choose one (extensions.workspaces)
	ReasonBadCredentials  Reason = "BAD_CREDENTIALS"  // wrong email or password at login
	ReasonLastOwner       Reason = "LAST_OWNER"       // the change would leave the workspace without an OWNER
)

// Error is an error meant for the caller: its message is safe to show.
// Anything that is not an *Error is internal and is shown as "internal error".
type Error struct {
	Code    Code
	Message string
	Reason  Reason // optional
}

func (e *Error) Error() string { return e.Message }

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err, or CodeInternal when err is not an *Error.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrorReason returns the reason of err, or "".
func ErrorReason(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// ErrorMessage returns the caller-safe message of err.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

// Errors shared by several layers. Stores return ErrNotFound for a missing row
// and ErrNameTaken when the active-name index refuses a row.
var (
	ErrNotFound          = &Error{Code: CodeNotFound, Message: "not found"}
	ErrNameTaken         = &Error{Code: CodeNameTaken, Message: "name is already used by an active key in this workspace"}
	ErrUnauthenticated   = &Error{Code: CodeUnauthenticated, Message: "authentication required"}
	ErrUserRequired      = &Error{Code: CodeUnauthenticated, Message: "this operation needs a user session; an API key alone is not enough", Reason: ReasonUserRequired}
	ErrForbidden         = &Error{Code: CodeForbidden, Message: "your role does not allow this operation"}
	ErrElevationRequired = &Error{Code: CodeElevationRequired, Message: "a valid X-Elevation token is required; get one with the elevate mutation"}
	ErrPlanUpgrade       = &Error{Code: CodePlanUpgradeRequired, Message: "the workspace plan does not allow issuing API keys; upgrade to Cloud Pro or above"}
	ErrKeyRevoked        = &Error{Code: CodeKeyRevoked, Message: "the API key is revoked"}
	ErrBadCredentials    = &Error{Code: CodeUnauthenticated, Message: "invalid email or password", Reason: ReasonBadCredentials}
	ErrWrongPassword     = &Error{Code: CodeUnauthenticated, Message: "wrong password"}
	ErrNoWorkspace       = &Error{Code: CodeNotFound, Message: "the session has no workspace; log in with one or impersonate it", Reason: ReasonNoWorkspace}
	ErrEmailTaken        = &Error{Code: CodeBadUserInput, Message: "an account with this email already exists"}
	// ErrBadText refuses text the stores cannot hold: PostgreSQL's text
	// holds no NUL character and no invalid UTF-8 (docs/security.md).
	ErrBadText = &Error{Code: CodeBadUserInput, Message: "text must be valid UTF-8 without NUL characters"}
	// ErrTimeRange refuses a time the stores cannot hold (StoredTime).
	ErrTimeRange = &Error{Code: CodeBadUserInput, Message: "time must be between the years 1678 and 2262"}
)
