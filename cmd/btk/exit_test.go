package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/client"
	"github.com/btk-project/btk/internal/testproc"
)

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{errors.New("boom"), exitError},
		{usageErrorf("bad flag"), exitUsage},
		{fmt.Errorf("wrapped: %w", usageErrorf("bad flag")), exitUsage},
		{&client.Error{Code: "UNAUTHENTICATED"}, exitAuth},
		{&client.Error{Code: "INTERNAL", Status: 401}, exitAuth},
		{&client.Error{Code: "FORBIDDEN"}, exitForbidden},
		{&client.Error{Code: "ELEVATION_REQUIRED"}, exitForbidden},
		{&client.Error{Code: "PLAN_UPGRADE_REQUIRED"}, exitForbidden},
		{&client.Error{Code: "NOT_FOUND"}, exitNotFound},
		{&client.Error{Code: "NAME_TAKEN"}, exitConflict},
		{&client.Error{Code: "KEY_REVOKED"}, exitConflict},
		{&client.Error{Code: "RATE_LIMITED"}, exitRateLimited},
		{&client.Error{Code: "", Status: 429}, exitRateLimited},
		{&client.Error{Code: client.CodeUnreachable}, exitUnreachable},
		{fmt.Errorf("context: %w", &client.Error{Code: client.CodeUnreachable}), exitUnreachable},
		{&client.Error{Code: "BAD_USER_INPUT"}, exitError},
		{&client.Error{Code: "INTERNAL"}, exitError},
		{&client.Error{Code: "UNAVAILABLE"}, exitUnavailable},
		{&client.Error{Code: "UNAVAILABLE", Status: 503}, exitUnavailable},
		{&client.Error{Code: client.CodeBadResponse, Status: 502}, exitError},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%#v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// TestExitCodeFromServer drives the whole path: server answer, client
// error, exit code and the "btk: <message> (<CODE>)" line on stderr.
func TestExitCodeFromServer(t *testing.T) {
	gqlErr := func(msg, code string) string {
		return `{"errors":[{"message":"` + msg + `","path":["apiKeys"],"extensions":{"code":"` + code + `"}}],"data":null}`
	}
	for _, tc := range []struct {
		name, response string
		want           int
		stderr         string
	}{
		{"revoked key", `401 {"errors":[{"message":"API key is revoked or expired","extensions":{"code":"UNAUTHENTICATED"}}]}`, exitAuth, "btk: API key is revoked or expired (UNAUTHENTICATED)\n"},
		{"401 without a body", `401 unauthorized`, exitAuth, "(UNAUTHENTICATED)"},
		{"rate limited", `429 {"errors":[{"message":"rate limit exceeded","extensions":{"code":"RATE_LIMITED"}}]}`, exitRateLimited, "btk: rate limit exceeded (RATE_LIMITED)\n"},
		// A budget refused in the answer (HTTP 200): a workspace's changes.
		{"change budget", gqlErr("too many changes in this workspace (revoking keys is never refused); try again in 3s", "RATE_LIMITED"), exitRateLimited,
			"btk: too many changes in this workspace (revoking keys is never refused); try again in 3s (RATE_LIMITED)\n"},
		{"forbidden", gqlErr("owner tier required", "FORBIDDEN"), exitForbidden, "btk: owner tier required (FORBIDDEN)\n"},
		{"plan", gqlErr("upgrade", "PLAN_UPGRADE_REQUIRED"), exitForbidden, "(PLAN_UPGRADE_REQUIRED)"},
		{"not found", gqlErr("not found", "NOT_FOUND"), exitNotFound, "(NOT_FOUND)"},
		{"internal", gqlErr("internal error", "INTERNAL"), exitError, "btk: internal error (INTERNAL)\n"},
		{"bad gateway", `502 <html>bad gateway</html>`, exitError, "btk: "},
		// UNAVAILABLE has its own exit code: scripts retry it.
		{"unavailable", `503 {"errors":[{"message":"the service is busy or cannot reach its database; retry shortly","extensions":{"code":"UNAVAILABLE"}}]}`, exitUnavailable, "(UNAVAILABLE)\n"},
		{"unavailable field", gqlErr("busy", "UNAVAILABLE"), exitUnavailable, "btk: busy (UNAVAILABLE)\n"},
		{"503 from a proxy", `503 <html>down</html>`, exitUnavailable, "(UNAVAILABLE)"},
		// Hints are chosen by code and extensions.reason, not by wording.
		{"reason", `401 {"errors":[{"message":"session refused","extensions":{"code":"UNAUTHENTICATED","reason":"SESSION_INVALID"}}]}`, exitAuth,
			"btk: invalid or expired session: run 'btk login' (sessions last 12 hours) (UNAUTHENTICATED)\n"},
		{"no reason", `401 {"errors":[{"message":"invalid or expired session","extensions":{"code":"UNAUTHENTICATED"}}]}`, exitAuth,
			"btk: invalid or expired session (UNAUTHENTICATED)\n"},
		{"code alone", gqlErr("a valid X-Elevation token is required", "ELEVATION_REQUIRED"), exitForbidden, "rotating needs a fresh proof of your password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			isolate(t)
			srv := newFakeServer(t, map[string]string{"ApiKeys": tc.response})
			s, out, errOut := testStreams(pipe, "")
			if code := btkRun(s, "list", "--server", srv.URL, "--token", "tok"); code != tc.want {
				t.Errorf("exit %d, want %d; stderr %q", code, tc.want, errOut)
			}
			if !strings.Contains(errOut.String(), tc.stderr) || !strings.HasPrefix(errOut.String(), "btk: ") {
				t.Errorf("stderr %q, want %q", errOut, tc.stderr)
			}
			if out.Len() != 0 {
				t.Errorf("stdout on failure: %q", out)
			}
		})
	}
}

func TestExitCodeUnreachable(t *testing.T) {
	isolate(t)
	srv := newFakeServer(t, nil)
	srv.Close()
	s, _, errOut := testStreams(pipe, "")
	if code := btkRun(s, "list", "--server", srv.URL, "--token", "tok"); code != exitUnreachable {
		t.Errorf("exit %d, want %d", code, exitUnreachable)
	}
	if !strings.Contains(errOut.String(), "cannot reach the btk server at "+srv.URL) {
		t.Errorf("stderr: %s", errOut)
	}
}

func TestExitCodeUsage(t *testing.T) {
	isolate(t)
	for _, args := range [][]string{
		{"nosuchcommand"},
		{"create"},
		{"create", "a", "b"},
		{"list", "--nosuchflag"},
		{"list", "-o", "yaml"},
		{"create", "x", "--rate-per-minute", "many"},
		{"create", "x", "--expires-in", "soon"},
		{"create", "x", "--expires-in", "1d", "--expires-at", "2030-01-01T00:00:00Z"},
		{"audit", "--since", "yesterday"},
		{"audit", "--action", "deleted"},
		{"rotate", "ci", "--no-expiry", "--expires-in", "1d"},
		{"workspace", "create", "Acme", "--plan", "gold"},
		{"member", "set", "w", "a", "king"},
		{"list", "--server", "ftp://x"},
	} {
		s, _, errOut := testStreams(pipe, "")
		if code := btkRun(s, append([]string{"--token", "tok", "--server", "http://127.0.0.1:1"}, args...)...); code != exitUsage {
			t.Errorf("btk %s: exit %d, want %d; stderr %q", strings.Join(args, " "), code, exitUsage, errOut)
		}
		if !strings.Contains(errOut.String(), "--help' for usage") {
			t.Errorf("btk %s: no help pointer: %q", strings.Join(args, " "), errOut)
		}
	}
}

// Every code the domain declares that a CLI command can meet has its exit
// code in the one table, or exits 1 on purpose.
func TestExitCodesCoverTheDomain(t *testing.T) {
	exitOne := map[btk.Code]bool{btk.CodeBadUserInput: true, btk.CodeInternal: true, btk.CodeBadGateway: true, btk.CodeGatewayTimeout: true}
	for _, c := range btk.Codes {
		if _, ok := exitCodes[c]; !ok && !exitOne[c] {
			t.Errorf("code %s has no exit code", c)
		}
	}
}

// docs/design.md#exit-codes: login finds the server down before asking for anything.
func TestLoginUnreachableBeforePassword(t *testing.T) {
	isolate(t)
	addr := testproc.FreeAddr(t) // nothing listens there
	s, _, errOut := testStreams(fakeTerminal, "owner@example.com\nhunter2-password\n")
	if code := btkRun(s, "login", "--server", "http://"+addr); code != exitUnreachable {
		t.Errorf("exit %d, want %d: %s", code, exitUnreachable, errOut)
	}
	if strings.Contains(errOut.String(), "Password") || strings.Contains(errOut.String(), "Email") {
		t.Errorf("asked before finding the server down: %q", errOut)
	}
	if !strings.Contains(errOut.String(), "cannot reach the btk server at http://"+addr) {
		t.Errorf("stderr %q", errOut)
	}
}

// Output that cannot be written is a failure: a script that sent btk's
// answer to a full disk must not read exit 0 and move on without it.
func TestUnwrittenOutputFails(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("needs /dev/full: %v", err)
	}
	defer full.Close()
	var stderr strings.Builder
	if code := run(context.Background(), []string{"version"}, strings.NewReader(""), full, &stderr); code != exitError {
		t.Fatalf("btk version to a full disk: exit %d, want %d; stderr %q", code, exitError, stderr.String())
	}
	if !strings.Contains(stderr.String(), "writing standard output") {
		t.Errorf("stderr does not say why: %q", stderr.String())
	}

	closed, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	if code := run(context.Background(), []string{"version"}, strings.NewReader(""), closed, &strings.Builder{}); code != exitError {
		t.Fatalf("btk version to a closed descriptor: exit %d, want %d", code, exitError)
	}
	if code := run(context.Background(), []string{"version"}, strings.NewReader(""), &strings.Builder{}, &strings.Builder{}); code != exitOK {
		t.Fatalf("btk version: exit %d", code)
	}
}
