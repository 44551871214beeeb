package gateway

import (
	"net/http"

	"github.com/btk-project/btk/internal/btk"
)

// statusOf is the one table from an error code (internal/btk) to the HTTP
// status of a request-level answer or a dashboard page that fails with it
// (docs/design.md#error-codes). Field-level GraphQL errors answer 200 with
// the code in extensions.
var statusOf = map[btk.Code]int{
	btk.CodeUnauthenticated:     http.StatusUnauthorized,
	btk.CodeForbidden:           http.StatusForbidden,
	btk.CodeElevationRequired:   http.StatusForbidden,
	btk.CodePlanUpgradeRequired: http.StatusForbidden,
	btk.CodeNotFound:            http.StatusNotFound,
	btk.CodeNameTaken:           http.StatusConflict,
	btk.CodeKeyRevoked:          http.StatusConflict,
	btk.CodeBadUserInput:        http.StatusBadRequest,
	btk.CodeRateLimited:         http.StatusTooManyRequests,
	btk.CodeUnavailable:         http.StatusServiceUnavailable,
	btk.CodeBadGateway:          http.StatusBadGateway,
	btk.CodeGatewayTimeout:      http.StatusGatewayTimeout,
	btk.CodeInternal:            http.StatusInternalServerError,
}

// Status is the HTTP status of code; 500 for a code it does not know.
func Status(code btk.Code) int {
	if s, ok := statusOf[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// ErrorStatus is the HTTP status of err: that of its code (INTERNAL for an
// error the domain did not make).
func ErrorStatus(err error) int { return Status(btk.ErrorCode(err)) }

// Fail answers a request-level failure with the status of err's code.
func Fail(w http.ResponseWriter, err error) { WriteError(w, ErrorStatus(err), err) }
