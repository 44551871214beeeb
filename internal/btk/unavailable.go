package btk

import (
	"context"
	"errors"
	"net"
	"syscall"
)

// ErrUnavailable is what a store wraps around a busy or unreachable
// database: callers see this message and code, the log the wrapped detail.
var ErrUnavailable = &Error{Code: CodeUnavailable, Message: "the service is busy or cannot reach its database; retry shortly"}

// Unavailable reports an error of a dependency that is busy or down rather
// than broken: a store's ErrUnavailable, a deadline passed while waiting (or
// a client gone while it waited), a refused or reset connection, a network
// timeout. Such a failure is UNAVAILABLE (retry), never INTERNAL.
func Unavailable(err error) bool {
	if errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
