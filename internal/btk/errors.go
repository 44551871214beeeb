package btk

import (
	"errors"
	"fmt"
)

// Code classifies an error for callers: it becomes extensions.code in GraphQL
// responses and an exit code in the CLI.
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
	// The reverse proxy's answers about its upstream (docs/gateway.md).
	CodeBadGateway     Code = "BAD_GATEWAY"
	CodeGatewayTimeout Code = "GATEWAY_TIMEOUT"
)

// Error is an error meant for the caller: its message is safe to show.
// Anything that is not an *Error is internal and is shown as "internal error".
type Error struct {
	Code    Code
	Message string
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
	ErrNotFound          = &Error{CodeNotFound, "not found"}
	ErrNameTaken         = &Error{CodeNameTaken, "name is already used by an active key in this workspace"}
	ErrUnauthenticated   = &Error{CodeUnauthenticated, "authentication required"}
	ErrUserRequired      = &Error{CodeUnauthenticated, "this operation needs a user session; an API key alone is not enough"}
	ErrForbidden         = &Error{CodeForbidden, "your role does not allow this operation"}
	ErrElevationRequired = &Error{CodeElevationRequired, "a valid X-Elevation token is required; get one with the elevate mutation"}
	ErrPlanUpgrade       = &Error{CodePlanUpgradeRequired, "the workspace plan does not allow issuing API keys; upgrade to Cloud Pro or above"}
	ErrKeyRevoked        = &Error{CodeKeyRevoked, "the API key is revoked"}
	ErrBadCredentials    = &Error{CodeUnauthenticated, "invalid email or password"}
	ErrWrongPassword     = &Error{CodeUnauthenticated, "wrong password"}
	ErrNoWorkspace       = &Error{CodeNotFound, "the session has no workspace; log in with one or impersonate it"}
	ErrEmailTaken        = &Error{CodeBadUserInput, "an account with this email already exists"}
)
