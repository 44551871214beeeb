package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// fakeKeyServer is a fake server with one active key "ci" and answers for the
// key mutations.
func fakeKeyServer(t *testing.T) *fakeServer {
	t.Helper()
	rotated := `{"apiKey":` + newKeyJSON + `,"plaintextKey":"` + plaintext + `","revokedApiKey":` + strings.Replace(apiKeyJSON, `"ACTIVE"`, `"REVOKED"`, 1) + `}`
	srv := newFakeServer(t, map[string]string{
		"ApiKeys":              keysPage(apiKeyJSON),
		"GetApiKey":            `{"data":{"apiKey":` + apiKeyJSON + `}}`,
		"CreateApiKey":         `{"data":{"createApiKey":{"apiKey":` + apiKeyJSON + `,"plaintextKey":"` + plaintext + `"}}}`,
		"Elevate":              `{"data":{"elevate":{"token":"elev-token","expiresAt":"2026-11-21T22:15:00Z"}}}`,
		"RotateApiKey":         `{"data":{"rotateApiKey":` + rotated + `}}`,
		"RotateApiKeyNoExpiry": `{"data":{"rotateApiKey":` + rotated + `}}`,
		"RevokeApiKey":         `{"data":{"revokeApiKey":` + strings.Replace(apiKeyJSON, `"ACTIVE"`, `"REVOKED"`, 1) + `}}`,
		"RevokeAllApiKeys":     `{"data":{"revokeAllApiKeys":{"revokedCount":3}}}`,
		"TenantInfo":           `{"data":{"tenantInfo":` + tenantJSON + `}}`,
	})
	return loggedInTo(t, srv)
}

func TestCreate(t *testing.T) {
	srv := fakeKeyServer(t)
	s, out, errOut := testStreams(pipe, "")
	if code := btkRun(s, "create", "ci", "-o", "plain"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if out.String() != plaintext+"\n" {
		t.Errorf("-o plain printed %q", out)
	}
	input := srv.last("CreateApiKey").Variables["input"].(map[string]any)
	if len(input) != 1 || input["name"] != "ci" {
		t.Errorf("unset options must be left out of the input: %v", input)
	}

	s, out, errOut = testStreams(pipe, "")
	if code := btkRun(s, "create", "ci", "--rate-per-minute", "60", "--rate-per-day", "1000", "--expires-in", "90d", "--scope", "a:b", "--scope", "c", "-o", "json"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	input = srv.last("CreateApiKey").Variables["input"].(map[string]any)
	if input["rateLimitPerMinute"] != 60.0 || input["rateLimitPerDay"] != 1000.0 || input["expiresAt"] == nil ||
		!slices.Equal(input["scopes"].([]any), []any{"a:b", "c"}) {
		t.Errorf("input: %v", input)
	}
	var payload map[string]any
	if err := json.Unmarshal(out.Bytes(), &payload); err != nil || payload["plaintextKey"] != plaintext || payload["apiKey"] == nil {
		t.Errorf("-o json: %v\n%s", err, out)
	}
	if errOut.Len() != 0 {
		t.Errorf("-o json wrote to stderr: %q", errOut)
	}

	// The plaintext never reaches the config file.
	b, _ := os.ReadFile(os.Getenv("XDG_CONFIG_HOME") + "/btk/config.yaml")
	if strings.Contains(string(b), plaintext) {
		t.Error("plaintext key in the config file")
	}
}

func TestRotateFailsFastWithoutElevation(t *testing.T) {
	srv := fakeKeyServer(t)
	s, _, errOut := testStreams(pipe, "")
	if code := btkRun(s, "rotate", "ci"); code != exitUsage {
		t.Errorf("exit %d, want %d", code, exitUsage)
	}
	if !strings.Contains(errOut.String(), "--password-stdin") || !strings.Contains(errOut.String(), "BTK_ELEVATION") {
		t.Errorf("stderr does not say what to do: %s", errOut)
	}
	if ops := srv.ops(); len(ops) != 0 {
		t.Errorf("requests before failing: %v", ops)
	}
}

func TestRotatePasswordStdin(t *testing.T) {
	srv := fakeKeyServer(t)
	s, out, errOut := testStreams(pipe, "hunter2-password\n")
	if code := btkRun(s, "rotate", "ci", "--password-stdin", "-o", "plain"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if got, want := srv.ops(), []string{"ApiKeys", "Elevate", "RotateApiKey"}; !slices.Equal(got, want) {
		t.Errorf("operations %v, want %v", got, want)
	}
	if pw := srv.last("Elevate").Variables["password"]; pw != "hunter2-password" {
		t.Errorf("elevate password %q", pw)
	}
	rot := srv.last("RotateApiKey")
	if h := rot.Header.Get("X-Elevation"); h != "elev-token" {
		t.Errorf("X-Elevation = %q", h)
	}
	if h := srv.last("Elevate").Header.Get("X-Elevation"); h != "" {
		t.Errorf("X-Elevation sent to elevate: %q", h)
	}
	if rot.Variables["id"] != keyID || len(rot.Variables["input"].(map[string]any)) != 0 {
		t.Errorf("rotate variables: %v (overrides not given must be left out)", rot.Variables)
	}
	if out.String() != plaintext+"\n" {
		t.Errorf("-o plain printed %q", out)
	}
}

func TestRotateElevationToken(t *testing.T) {
	srv := fakeKeyServer(t)
	t.Setenv("BTK_ELEVATION", "env-elev")
	s, _, errOut := testStreams(pipe, "")
	if code := btkRun(s, "rotate", keyID, "--name", "ci-2027", "--no-expiry", "-o", "json"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if got, want := srv.ops(), []string{"GetApiKey", "RotateApiKeyNoExpiry"}; !slices.Equal(got, want) {
		t.Errorf("operations %v, want %v", got, want)
	}
	rot := srv.last("RotateApiKeyNoExpiry")
	if rot.Header.Get("X-Elevation") != "env-elev" || rot.Variables["name"] != "ci-2027" {
		t.Errorf("rotate: header %q variables %v", rot.Header.Get("X-Elevation"), rot.Variables)
	}

	s, _, errOut = testStreams(pipe, "")
	if code := btkRun(s, "rotate", "ci", "--elevation-token", "flag-elev", "--expires-at", "2030-01-02T03:04:05Z"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	rot = srv.last("RotateApiKey")
	if rot.Header.Get("X-Elevation") != "flag-elev" || rot.Variables["input"].(map[string]any)["expiresAt"] != "2030-01-02T03:04:05Z" {
		t.Errorf("rotate: header %q variables %v", rot.Header.Get("X-Elevation"), rot.Variables)
	}
}

func TestRotatePromptsOnTerminal(t *testing.T) {
	srv := fakeKeyServer(t)
	s, out, errOut := testStreams(fakeTerminal, "hunter2-password\n")
	if code := btkRun(s, "rotate", "ci"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut.String(), `Password (to rotate "ci"): `) {
		t.Errorf("no password prompt on stderr: %q", errOut)
	}
	if srv.last("Elevate").Variables["password"] != "hunter2-password" {
		t.Errorf("prompted password not used")
	}
	if !strings.Contains(out.String(), plaintext) || !strings.Contains(out.String(), "cannot be shown again") {
		t.Errorf("stdout:\n%s", out)
	}
}

func TestRevokeConfirmation(t *testing.T) {
	srv := fakeKeyServer(t)
	s, _, errOut := testStreams(pipe, "")
	if code := btkRun(s, "revoke", "ci"); code != exitUsage || !strings.Contains(errOut.String(), "--yes") {
		t.Errorf("revoke off a terminal without --yes: exit %d, stderr %q", code, errOut)
	}
	if ops := srv.ops(); len(ops) != 0 {
		t.Errorf("requests before failing: %v", ops)
	}

	s, _, errOut = testStreams(fakeTerminal, "n\n")
	if code := btkRun(s, "revoke", "ci"); code != exitError {
		t.Errorf("declined: exit %d", code)
	}
	if !strings.Contains(errOut.String(), `Revoke key "ci"`) || slices.Contains(srv.ops(), "RevokeApiKey") {
		t.Errorf("declined: stderr %q, operations %v", errOut, srv.ops())
	}

	s, out, errOut := testStreams(fakeTerminal, "y\n")
	if code := btkRun(s, "revoke", "ci"); code != 0 {
		t.Fatalf("confirmed: exit %d: %s", code, errOut)
	}
	if srv.last("RevokeApiKey").Variables["id"] != keyID || !strings.Contains(out.String(), "REVOKED") {
		t.Errorf("confirmed: %v\n%s", srv.ops(), out)
	}

	s, out, errOut = testStreams(pipe, "")
	if code := btkRun(s, "revoke", "ci", "--yes", "-o", "json"); code != 0 {
		t.Fatalf("--yes: exit %d: %s", code, errOut)
	}
	var k map[string]any
	if err := json.Unmarshal(out.Bytes(), &k); err != nil || k["status"] != "REVOKED" {
		t.Errorf("-o json: %v\n%s", err, out)
	}
}

func TestRevokeAllConfirmation(t *testing.T) {
	srv := fakeKeyServer(t)
	s, _, _ := testStreams(pipe, "")
	if code := btkRun(s, "revoke-all"); code != exitUsage || len(srv.ops()) != 0 {
		t.Errorf("off a terminal without --yes: exit %d, operations %v", code, srv.ops())
	}

	s, _, errOut := testStreams(fakeTerminal, "default\n")
	if code := btkRun(s, "revoke-all"); code != exitError || slices.Contains(srv.ops(), "RevokeAllApiKeys") {
		t.Errorf("wrong name: exit %d, operations %v", code, srv.ops())
	}
	if !strings.Contains(errOut.String(), `workspace "Default"`) {
		t.Errorf("prompt does not name the workspace: %q", errOut)
	}

	s, out, errOut := testStreams(fakeTerminal, "Default\n")
	if code := btkRun(s, "revoke-all"); code != 0 || !strings.Contains(out.String(), "Revoked 3 key(s)") {
		t.Errorf("right name: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	s, out, _ = testStreams(pipe, "")
	if code := btkRun(s, "revoke-all", "--yes", "-o", "json"); code != 0 || strings.TrimSpace(out.String()) != "{\n  \"revokedCount\": 3\n}" {
		t.Errorf("--yes -o json: exit %d, %q", code, out)
	}
}

func TestListJSON(t *testing.T) {
	srv := fakeKeyServer(t)
	s, out, errOut := testStreams(pipe, "")
	if code := btkRun(s, "list", "--all", "-o", "json"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var keys []map[string]any
	if err := json.Unmarshal(out.Bytes(), &keys); err != nil || len(keys) != 1 || keys[0]["name"] != "ci" {
		t.Errorf("%v\n%s", err, out)
	}
	if srv.last("ApiKeys").Variables["includeRevoked"] != true {
		t.Errorf("--all not passed: %v", srv.last("ApiKeys").Variables)
	}
}

func TestNotLoggedIn(t *testing.T) {
	isolate(t)
	s, _, errOut := testStreams(pipe, "")
	if code := btkRun(s, "list"); code != exitAuth || !strings.Contains(errOut.String(), "btk login") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}
