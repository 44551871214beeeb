package main

import (
	"encoding/json"
	"strings"
	"testing"
)

const usagePointsJSON = `[{"start":"2026-11-20T00:00:00Z","accepted":40,"rateLimited":0,"refused":0},
	{"start":"2026-11-21T00:00:00Z","accepted":10,"rateLimited":5,"refused":2},
	{"start":"2026-11-22T00:00:00Z","accepted":0,"rateLimited":0,"refused":0}]`

func fakeUsageServer(t *testing.T) *fakeServer {
	t.Helper()
	srv := newFakeServer(t, map[string]string{
		"ApiKeys":   keysPage(apiKeyJSON),
		"GetApiKey": `{"data":{"apiKey":` + apiKeyJSON + `}}`,
		"KeyUsage": `{"data":{"apiKey":{"id":"` + keyID + `","name":"ci","lastUsedAt":"2026-11-21T22:00:00Z",
			"lastUsedIp":"192.0.2.7","lastUsedUserAgent":"curl/8","usage":` + usagePointsJSON + `}}}`,
		"WorkspaceUsage": `{"data":{"workspaceUsage":{"since":"2026-11-20T00:00:00Z","until":"2026-11-23T00:00:00Z","granularity":"DAY",
			"points":` + usagePointsJSON + `,"topKeys":[{"apiKey":{"id":"` + keyID + `","name":"ci"},"accepted":50,"rateLimited":5,"refused":2}]}}}`,
	})
	return loggedInTo(t, srv)
}

// btk usage: plain numbers in a pipe, bars on a terminal, the points array
// with -o json; --by and --since reach the server; bad --by is a usage error.
func TestUsageCommand(t *testing.T) {
	srv := fakeUsageServer(t)
	s, out, errOut := testStreams(pipe, "")
	if code := btkRun(s, "usage", "ci", "--by", "hour", "--since", "24h"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := "2026-11-20T00:00:00Z\t40\t0\t0\n2026-11-21T00:00:00Z\t10\t5\t2\n2026-11-22T00:00:00Z\t0\t0\t0\n"
	if out.String() != want {
		t.Fatalf("pipe output:\n%q\nwant\n%q", out.String(), want)
	}
	v := srv.last("KeyUsage").Variables
	if v["granularity"] != "HOUR" || v["id"] != keyID || v["since"] == nil {
		t.Fatalf("variables %v", v)
	}

	s, out, errOut = testStreams(pipe, "")
	if code := btkRun(s, "usage", "ci", "-o", "json"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var pts []map[string]any
	if err := json.Unmarshal(out.Bytes(), &pts); err != nil || len(pts) != 3 || pts[1]["rateLimited"] != 5.0 {
		t.Fatalf("json %s: %v", out, err)
	}

	t.Setenv("NO_COLOR", "1")
	s, out, errOut = testStreams(fakeTerminal, "")
	if code := btkRun(s, "usage"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(out.String(), "\n")
	if !strings.HasPrefix(lines[0], "2026-11-20  "+strings.Repeat("█", 40)) || !strings.Contains(lines[1], "▒") || !strings.Contains(lines[1], "░") ||
		!strings.Contains(lines[1], "10 (5 rate-limited, 2 refused)") || strings.ContainsAny(lines[2], "█▒░") || !strings.Contains(out.String(), "TOP KEYS") {
		t.Fatalf("terminal output:\n%s", out)
	}
	if srv.last("WorkspaceUsage").Variables["granularity"] != "DAY" {
		t.Fatal("the default is by day")
	}

	s, _, _ = testStreams(pipe, "")
	if code := btkRun(s, "usage", "--by", "week"); code != 2 {
		t.Fatalf("--by week: exit %d", code)
	}
}
