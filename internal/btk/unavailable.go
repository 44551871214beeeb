package btk

import (
	"context"
	"errors"
	"net"
	"syscall"
)

// CodeUnavailable marks a failure of a dependency that is busy or down (the
// database locked by another writer, a deadline passed while waiting for
// it): nothing is wrong with the request, and retrying it later may work.
const CodeUnavailable Code = "UNAVAILABLE"

// ErrUnavailable is what a store wraps around a busy or unreachable
// database: callers see this message and code, the log the wrapped detail.
var ErrUnavailable = &Error{CodeUnavailable, "the service is busy or cannot reach its database; retry shortly"}

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
