package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/btk-project/btk/internal/btk"
)

// Every code the domain declares has its status in the one table.
func TestStatusOfEveryCode(t *testing.T) {
	for _, c := range btk.Codes {
		if _, ok := statusOf[c]; !ok {
			t.Errorf("code %s has no HTTP status", c)
		}
	}
	if got := Status(btk.CodeUnavailable); got != http.StatusServiceUnavailable {
		t.Errorf("UNAVAILABLE: %d", got)
	}
}

// A reason goes to extensions.reason beside the code.
func TestWriteErrorReason(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteError(rec, http.StatusUnauthorized, btk.ErrInvalidSession)
	want := `{"errors":[{"message":"invalid or expired session","extensions":{"code":"UNAUTHENTICATED","reason":"SESSION_INVALID"}}]}` + "\n"
	if rec.Body.String() != want {
		t.Errorf("body %s, want %s", rec.Body, want)
	}
	rec = httptest.NewRecorder()
	WriteError(rec, http.StatusUnauthorized, btk.ErrInvalidKey)
	want = `{"errors":[{"message":"invalid API key","extensions":{"code":"UNAUTHENTICATED"}}]}` + "\n"
	if rec.Body.String() != want {
		t.Errorf("body %s, want %s", rec.Body, want)
	}
}
