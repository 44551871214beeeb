package main

import (
	"slices"
	"strings"
	"testing"
)

// accessServer is a fake server with one active key "ci" that answers the
// least-privilege operations.
func accessServer(t *testing.T) *fakeServer {
	t.Helper()
	srv := newFakeServer(t, map[string]string{
		"ApiKeys":               keysPage(apiKeyJSON),
		"GetApiKey":             `{"data":{"apiKey":` + apiKeyJSON + `}}`,
		"CreateApiKey":          `{"data":{"createApiKey":{"apiKey":` + apiKeyJSON + `,"plaintextKey":"` + plaintext + `"}}}`,
		"UpdateApiKey":          `{"data":{"updateApiKey":` + apiKeyJSON + `}}`,
		"TenantInfo":            `{"data":{"tenantInfo":` + tenantJSON + `}}`,
		"SetWorkspaceKeyPolicy": `{"data":{"setWorkspaceKeyPolicy":` + tenantJSON + `}}`,
	})
	return loggedInTo(t, srv)
}

// btk update sends only what its flags name, in one UpdateApiKey; the list
// flags replace, --no-scopes / --any-address send an empty list, and
// --default-limits an explicit null for each limit (docs/access.md).
func TestUpdateSendsOnlyWhatChanged(t *testing.T) {
	srv := accessServer(t)
	for _, tc := range []struct {
		args []string
		want map[string]any
	}{
		{[]string{"--name", "ci2"}, map[string]any{"name": "ci2"}},
		{[]string{"--rate-per-minute", "5"}, map[string]any{"rateLimitPerMinute": 5.0}},
		{[]string{"--scope", "a:read", "--scope", "b"}, map[string]any{"scopes": []any{"a:read", "b"}}},
		{[]string{"--no-scopes", "--any-address"}, map[string]any{"scopes": []any{}, "allowedCidrs": []any{}}},
		{[]string{"--allow-cidr", "10.0.0.0/8"}, map[string]any{"allowedCidrs": []any{"10.0.0.0/8"}}},
		{[]string{"--default-limits", "--scope", "a"}, map[string]any{"rateLimitPerMinute": nil, "rateLimitPerDay": nil, "scopes": []any{"a"}}},
	} {
		before := len(srv.ops())
		s, _, errOut := testStreams(pipe, "")
		if code := btkRun(s, append([]string{"update", "ci", "-o", "json"}, tc.args...)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errOut)
		}
		if ops := srv.ops()[before:]; ops[len(ops)-1] != "UpdateApiKey" || slices.Index(ops, "UpdateApiKey") != len(ops)-1 {
			t.Errorf("%v: operations %v, want one UpdateApiKey, last", tc.args, ops)
		}
		input := srv.last("UpdateApiKey").Variables["input"].(map[string]any)
		if len(input) != len(tc.want) {
			t.Errorf("%v: input %v, want %v", tc.args, input, tc.want)
		}
		for k, v := range tc.want {
			got := input[k]
			if l, ok := v.([]any); ok {
				if gl, _ := got.([]any); gl == nil || !slices.Equal(gl, l) {
					t.Errorf("%v: %s = %v, want %v", tc.args, k, got, v)
				}
			} else if got != v {
				t.Errorf("%v: %s = %v, want %v", tc.args, k, got, v)
			}
		}
	}
	for _, bad := range [][]string{{}, {"--scope", "a", "--no-scopes"}, {"--allow-cidr", "10.0.0.0/8", "--any-address"}} {
		s, _, errOut := testStreams(pipe, "")
		if code := btkRun(s, append([]string{"update", "ci"}, bad...)...); code != exitUsage {
			t.Errorf("update %v: exit %d (%s), want %d", bad, code, errOut, exitUsage)
		}
	}
}

func TestCreateAllowCIDR(t *testing.T) {
	srv := accessServer(t)
	s, _, errOut := testStreams(pipe, "")
	if code := btkRun(s, "create", "ci", "--allow-cidr", "192.0.2.0/24", "--allow-cidr", "::1", "-o", "plain"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	input := srv.last("CreateApiKey").Variables["input"].(map[string]any)
	if got, _ := input["allowedCidrs"].([]any); !slices.Equal(got, []any{"192.0.2.0/24", "::1"}) {
		t.Errorf("allowedCidrs %v", input["allowedCidrs"])
	}
}

func TestWorkspacePolicyDays(t *testing.T) {
	srv := accessServer(t)
	s, _, errOut := testStreams(pipe, "")
	if code := btkRun(s, "workspace", "policy", "--max-lifetime", "90d", "--revoke-unused-after", "30d", "-o", "json"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	v := srv.last("SetWorkspaceKeyPolicy").Variables
	if v["maxLifetimeDays"] != 90.0 || v["revokeUnusedAfterDays"] != 30.0 {
		t.Errorf("variables %v", v)
	}
	s, _, errOut = testStreams(pipe, "")
	if code := btkRun(s, "workspace", "policy", "--off"); code != 0 {
		t.Fatalf("--off: exit %d: %s", code, errOut)
	}
	if v := srv.last("SetWorkspaceKeyPolicy").Variables; v["maxLifetimeDays"] != nil || v["revokeUnusedAfterDays"] != nil {
		t.Errorf("--off sent %v", v)
	}
	for _, bad := range [][]string{{"--max-lifetime", "36h"}, {"--max-lifetime", "90d", "--off"}, {"--revoke-unused-after", "soon"},
		{"--max-lifetime", ""}, {"--max-lifetime", "-1d"}} {
		s, _, errOut := testStreams(pipe, "")
		if code := btkRun(s, append([]string{"workspace", "policy"}, bad...)...); code != exitUsage || !strings.Contains(errOut.String(), "--") {
			t.Errorf("policy %v: exit %d (%s)", bad, code, errOut)
		}
	}
}
