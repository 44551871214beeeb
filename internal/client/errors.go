package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/Khan/genqlient/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/btk-project/btk/internal/btk"
)

// Codes an *Error carries besides the server's extensions.code values (the
// btk.Code constants). The server never sends these: they name what went
// wrong before any answer of btk's arrived, so they are the client's own.
const (
	// CodeUnreachable: no HTTP answer at all (connection refused, DNS, TLS, timeout).
	CodeUnreachable btk.Code = "UNREACHABLE"
	// CodeBadResponse: the server answered something that is not GraphQL.
	CodeBadResponse btk.Code = "BAD_RESPONSE"
	// CodeCanceled: the call's context was canceled (Ctrl-C).
	CodeCanceled btk.Code = "CANCELED"
	// CodeTooLarge: a list, followed page by page, is more than the client
	// holds in memory (MaxKeptNodes, MaxKeptBytes).
	CodeTooLarge btk.Code = "TOO_LARGE"
	// ReasonTimeout: the reason of a CodeUnreachable error when the server
	// did not answer within the client's timeout.
	ReasonTimeout btk.Reason = "TIMEOUT"
)

// Error is a failed call to the server.
type Error struct {
	// Code is the server's extensions.code, or one of the client's own
	// codes above. A 401 without a code is UNAUTHENTICATED, a 429
	// RATE_LIMITED.
	Code btk.Code
	// Message is fit to show to the user.
	Message string
	// Status is the HTTP status of a request-level failure, 0 otherwise.
	Status int
	// Err is the underlying error, if any.
	Err error
	// Reason is the server's extensions.reason, which tells apart errors of
	// one code (such as SESSION_INVALID among UNAUTHENTICATED), or
	// ReasonTimeout; often "".
	Reason btk.Reason
	// Extensions are the GraphQL error's extensions (code included), if any.
	Extensions map[string]any
	// RetryAfter is the server's Retry-After of a 429, 0 when none.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Message }
func (e *Error) Unwrap() error { return e.Err }

// toError turns whatever the GraphQL client returned into an *Error: a
// GraphQL error list (field-level failure, HTTP 200), an HTTP error status
// with a GraphQL-shaped body (request-level failure: 401, 429, ...), or a
// transport failure (server unreachable). It is the only place that knows
// these shapes.
func toError(err error, server string, last *lastResponse) error {
	if err == nil {
		return nil
	}
	e, ok := toError1(err, server).(*Error)
	if !ok || last == nil {
		return e
	}
	if e.Status == http.StatusTooManyRequests || e.Code == btk.CodeRateLimited {
		if secs, err := strconv.Atoi(last.retryAfter); err == nil && secs >= 0 {
			e.RetryAfter = time.Duration(secs) * time.Second
			e.Message = fmt.Sprintf("%s: retry in %ds", strings.TrimSuffix(e.Message, "."), secs)
		}
	}
	return e
}

func toError1(err error, server string) error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var httpErr *graphql.HTTPError
	if errors.As(err, &httpErr) {
		e = fromList(httpErr.Response.Errors)
		if e.Code == "" && httpErr.StatusCode != http.StatusTooManyRequests && httpErr.StatusCode != http.StatusUnauthorized {
			// Not a GraphQL body (genqlient passes the raw body on as the
			// message): not btk talking. Say so on one line.
			e.Message = ""
		}
		e.Status = httpErr.StatusCode
		e.Err = err
		if e.Code == "" {
			switch httpErr.StatusCode {
			case http.StatusUnauthorized:
				e.Code = btk.CodeUnauthenticated
			case http.StatusTooManyRequests:
				e.Code = btk.CodeRateLimited
			case http.StatusServiceUnavailable:
				// A proxy in front of btk may answer 503 without a body of btk's.
				e.Code = btk.CodeUnavailable
			default:
				e.Code = CodeBadResponse
			}
		}
		if e.Message == "" {
			e.Message = fmt.Sprintf("server answered HTTP %d", httpErr.StatusCode)
			if httpErr.StatusCode == http.StatusNotFound || httpErr.StatusCode == http.StatusMethodNotAllowed {
				e.Message = fmt.Sprintf("%s answered HTTP %d to %s/graphql: is it a btk server, and is --server its base address (such as http://127.0.0.1:8080)?",
					server, httpErr.StatusCode, server)
			}
		}
		return e
	}
	var list gqlerror.List
	if errors.As(err, &list) {
		e = fromList(list)
		e.Err = err
		return e
	}
	if errors.Is(err, context.Canceled) {
		return &Error{Code: CodeCanceled, Message: "interrupted", Err: err}
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) && urlErr.Timeout() {
		return &Error{Code: CodeUnreachable, Reason: ReasonTimeout, Message: fmt.Sprintf("no answer from the btk server at %s within the timeout", server), Err: err}
	}
	if errors.As(err, &urlErr) {
		return &Error{Code: CodeUnreachable, Message: fmt.Sprintf("cannot reach the btk server at %s: %v", server, urlErr.Err), Err: err}
	}
	// The timeout may also run out while the answer's body arrives (not a
	// *url.Error then): the same retryable failure.
	var netErr net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout() {
		return &Error{Code: CodeUnreachable, Reason: ReasonTimeout, Message: fmt.Sprintf("no complete answer from the btk server at %s within the timeout", server), Err: err}
	}
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &syntaxErr) || errors.As(err, &typeErr) {
		return &Error{Code: CodeBadResponse, Message: fmt.Sprintf("unexpected answer from %s: %v", server, err), Err: err}
	}
	return &Error{Message: err.Error(), Err: err}
}

// fromList takes the first error of a GraphQL error list; it is the one the
// server means (btk answers one error per failed request or field).
func fromList(list gqlerror.List) *Error {
	if len(list) == 0 || list[0] == nil {
		return &Error{}
	}
	e := &Error{Message: list[0].Message, Extensions: list[0].Extensions}
	if code, ok := list[0].Extensions["code"].(string); ok {
		e.Code = btk.Code(code)
	}
	if reason, ok := list[0].Extensions["reason"].(string); ok {
		e.Reason = btk.Reason(reason)
	}
	return e
}
