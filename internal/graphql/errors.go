package graphql

import (
	"context"
	"errors"
	"log/slog"

	"github.com/99designs/gqlgen/graphql"
	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/gateway"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// resolverError marks an error a resolver returned. gqlgen wraps every
// error in a *gqlerror.Error before the presenter sees it, its own
// (coercion) errors as well as a resolver's, so the mark is what tells a
// resolver's failure (internal unless the domain made it) from gqlgen's
// (the caller's mistake).
type resolverError struct{ err error }

func (e *resolverError) Error() string { return e.err.Error() }
func (e *resolverError) Unwrap() error { return e.err }

// markResolverErrors is the field middleware that marks resolver errors.
func markResolverErrors(ctx context.Context, next graphql.Resolver) (any, error) {
	res, err := next(ctx)
	if err != nil {
		var re *resolverError
		if !errors.As(err, &re) {
			err = &resolverError{err}
		}
	}
	return res, err
}

// presentError sets extensions.code (docs/design.md#error-codes). Domain errors keep their
// message; gqlgen's own errors (syntax, validation, input coercion,
// transport) are the caller's mistake and keep theirs; a busy or
// unreachable dependency is UNAVAILABLE; anything else is INTERNAL "internal
// error", its detail in the server log only (with the operation, never the
// variables, which may hold a password).
func (h *handler) presentError(ctx context.Context, err error) *gqlerror.Error {
	gerr := graphql.DefaultErrorPresenter(ctx, err)
	var be *btk.Error
	if errors.As(err, &be) {
		if be.Code == btk.CodeUnavailable {
			h.logFailure(ctx, slog.LevelWarn, "dependency unavailable", gerr, err)
		}
		gerr.Message = be.Message
		gerr.Extensions = gateway.Extensions(be)
		presentChoices(err, gerr)
		return gerr
	}
	if btk.Unavailable(err) {
		h.logFailure(ctx, slog.LevelWarn, "dependency unavailable", gerr, err)
		gerr.Message = btk.ErrUnavailable.Message
		gerr.Extensions = map[string]any{"code": string(btk.CodeUnavailable)}
		return gerr
	}
	var re *resolverError
	var ge *gqlerror.Error
	if !errors.As(err, &re) && errors.As(err, &ge) { // made by gqlgen
		if gerr.Extensions["code"] == nil {
			gerr.Extensions = map[string]any{"code": string(btk.CodeBadUserInput)}
		}
		return gerr
	}
	h.logFailure(ctx, slog.LevelError, "internal error", gerr, err)
	gerr.Message = "internal error"
	gerr.Extensions = map[string]any{"code": string(btk.CodeInternal)}
	return gerr
}

// logFailure logs a failed field with its operation's name, its path and
// the error. The client chose the name and the path's aliases, which the
// error repeats: a key pasted into them is redacted.
func (h *handler) logFailure(ctx context.Context, level slog.Level, msg string, gerr *gqlerror.Error, err error) {
	h.log.Log(ctx, level, msg, "operation", btk.Redacted(operationName(ctx)), "path", btk.Redacted(gerr.Path.String()), "err", btk.Redacted(err.Error()))
}

// operationName names the operation for the log: its name, else its kind.
func operationName(ctx context.Context) string {
	if !graphql.HasOperationContext(ctx) {
		return ""
	}
	rc := graphql.GetOperationContext(ctx)
	if rc.Operation == nil {
		return rc.OperationName
	}
	if rc.Operation.Name != "" {
		return rc.Operation.Name
	}
	return string(rc.Operation.Operation)
}
