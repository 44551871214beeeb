package btk

// CodeUnavailable marks a failure of a dependency that is busy or down (the
// database locked by another writer, a deadline passed while waiting for
// it): nothing is wrong with the request, and retrying it later may work.
const CodeUnavailable Code = "UNAVAILABLE"

// ErrUnavailable is what a store wraps around a busy or unreachable
// database: callers see this message and code, the log the wrapped detail.
var ErrUnavailable = &Error{CodeUnavailable, "the service is busy or cannot reach its database; retry shortly"}
