package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/client"
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
			"points":` + usagePointsJSON + `,"topKeys":[{"apiKey":{"id":"` + keyID + `","name":"ci","displayPrefix":"btk_1a2b3c4d","hint":"wxyz","status":"ACTIVE"},"accepted":50,"rateLimited":5,"refused":2}]}}}`,
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
	// 24 whole hours, the current one the last (TestUsageRangeWholePeriods).
	since, _ := time.Parse(time.RFC3339, v["since"].(string))
	until, _ := time.Parse(time.RFC3339, v["until"].(string))
	if until.Sub(since) != 24*time.Hour || !since.Equal(since.Truncate(time.Hour)) || !until.After(time.Now().Add(-time.Hour)) {
		t.Fatalf("--since 24h --by hour: since %s, until %s", v["since"], v["until"])
	}

	s, out, errOut = testStreams(pipe, "")
	if code := btkRun(s, "usage", "ci", "-o", "json"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var pts []map[string]any
	if err := json.Unmarshal(out.Bytes(), &pts); err != nil || len(pts) != 3 || pts[1]["rateLimited"] != 5.0 {
		t.Fatalf("json %s: %v", out, err)
	}

	// The workspace's JSON is its array of points, as a key's
	// (docs/design.md#cli).
	s, out, errOut = testStreams(pipe, "")
	if code := btkRun(s, "usage", "-o", "json"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	pts = nil
	if err := json.Unmarshal(out.Bytes(), &pts); err != nil || len(pts) != 3 {
		t.Fatalf("workspace json %s: %v", out, err)
	}

	t.Setenv("NO_COLOR", "1")
	s, out, errOut = testStreams(fakeTerminal, "")
	if code := btkRun(s, "usage"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(out.String(), "\n")
	if !strings.HasPrefix(lines[0], "2026-11-20  "+strings.Repeat("█", 40)) || !strings.Contains(lines[1], "▒") || !strings.Contains(lines[1], "░") ||
		!strings.Contains(lines[1], "10 (5 rate-limited, 2 refused)") || strings.ContainsAny(lines[2], "█▒░") || !strings.Contains(out.String(), "TOP KEYS") ||
		!strings.Contains(out.String(), "btk_1a2b3c4d_…wxyz") {
		t.Fatalf("terminal output:\n%s", out)
	}
	if srv.last("WorkspaceUsage").Variables["granularity"] != "DAY" {
		t.Fatal("the default is by day")
	}

	s, _, _ = testStreams(pipe, "")
	if code := btkRun(s, "usage", "--by", "week"); code != 2 {
		t.Fatalf("--by week: exit %d", code)
	}
	s, _, errOut = testStreams(pipe, "")
	if code := btkRun(s, "usage", "--rotation-chain"); code != 2 || !strings.Contains(errOut.String(), "needs a KEY") {
		t.Fatalf("--rotation-chain without KEY: exit %d: %s", code, errOut)
	}
}

// A duration in --since counts whole periods back from the end of the one
// that holds now, so that the documented maximum is exactly the server's
// (docs/usage.md#reading-it): the server would widen a since inside a
// period down to its start, one point more.
func TestUsageRangeWholePeriods(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 30, 15, 0, time.UTC)
	for _, tc := range []struct {
		since, until string
		g            client.UsageGranularity
		points       int
		wantSince    string
	}{
		{"90d", "", client.UsageGranularityHour, btk.MaxUsageHours, "2026-08-23T11:00:00Z"},
		{"366d", "", client.UsageGranularityDay, btk.MaxUsageDays, "2025-11-21T00:00:00Z"},
		{"24h", "", client.UsageGranularityHour, 24, "2026-11-20T11:00:00Z"},
		{"7d", "", client.UsageGranularityDay, 7, "2026-11-15T00:00:00Z"},
		{"36h", "", client.UsageGranularityDay, 2, "2026-11-20T00:00:00Z"},
		{"48h", "24h", client.UsageGranularityHour, 24, "2026-11-19T11:00:00Z"},
		{"2026-11-20T09:30:00Z", "", client.UsageGranularityHour, 0, "2026-11-20T09:30:00Z"},
	} {
		since, until, err := usageRange(tc.since, tc.until, tc.g, now)
		if err != nil {
			t.Fatalf("%s: %v", tc.since, err)
		}
		if got := since.Format(time.RFC3339); got != tc.wantSince {
			t.Errorf("--since %s: since %s, want %s", tc.since, got, tc.wantSince)
		}
		period := map[client.UsageGranularity]time.Duration{client.UsageGranularityHour: time.Hour, client.UsageGranularityDay: 24 * time.Hour}[tc.g]
		// The points the server makes of it: the period holding until included.
		end := until.Truncate(period)
		if !end.Equal(until) {
			end = end.Add(period)
		}
		if n := int(end.Sub(since.Truncate(period)) / period); tc.points > 0 && n != tc.points {
			t.Errorf("--since %s --until %q by %s: %d points, want %d", tc.since, tc.until, tc.g, n, tc.points)
		}
	}
	if _, _, err := usageRange("soon", "", client.UsageGranularityDay, now); err == nil {
		t.Error("--since soon: no error")
	}
}

// Support forensics by name after rotations (docs/usage.md#reading-it):
// `btk usage NAME` counts the current key only and says so; with
// --rotation-chain it shows every key of the chain, each with its own
// refused uses, and sums them; a revoked key's name finds it too. Against a
// real server: the counts are flushed by a graceful stop.
func TestUsageRotationChain(t *testing.T) {
	skipIfShort(t, "starts btk serve processes")
	isolate(t)
	db := filepath.Join(t.TempDir(), "btk.db")
	p := startServe(t, db)
	token := p.login()
	run := func(stdin string, args ...string) (string, string) {
		t.Helper()
		s, out, errOut := testStreams(pipe, stdin)
		if code := btkRun(s, append([]string{"--server", p.url, "--token", token}, args...)...); code != 0 {
			t.Fatalf("btk %v: exit %d: %s", args, code, errOut)
		}
		return out.String(), errOut.String()
	}
	use := func(key string, n, status int) {
		t.Helper()
		for range n {
			if got, msg := p.probe(key); got != status {
				t.Fatalf("probe: HTTP %d %q, want %d", got, msg, status)
			}
		}
	}
	rotate := func() procKey {
		t.Helper()
		out, _ := run(procAdminPassword, "rotate", "payments", "--password-stdin", "-o", "json")
		var r struct {
			ApiKey       struct{ Id string }
			PlaintextKey string
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		return procKey{ID: r.ApiKey.Id, Plaintext: r.PlaintextKey}
	}
	first := p.createKey(token, "payments")
	use(first.Plaintext, 3, http.StatusOK)
	second := rotate()
	use(first.Plaintext, 2, http.StatusUnauthorized) // still tried after the rotation
	use(second.Plaintext, 4, http.StatusOK)
	third := rotate()
	use(second.Plaintext, 1, http.StatusUnauthorized)
	other := p.createKey(token, "other")
	use(other.Plaintext, 5, http.StatusOK)
	run("", "revoke", "other", "--yes")
	if err := p.stop(); err != nil { // the shutdown flush writes every count
		t.Fatal(err)
	}
	p = startServe(t, db)
	token = p.login()

	// By name: the current key only, and a note that says where the rest is.
	out, _ := run("", "usage", "payments", "-o", "json")
	if total(t, out, "accepted") != 0 || total(t, out, "refused") != 0 {
		t.Errorf("the current key's own uses: %s", out)
	}
	if _, errOut := run("", "usage", "payments"); !strings.Contains(errOut, "--rotation-chain") {
		t.Errorf("no note of the rotation chain: %q", errOut)
	}

	// --rotation-chain: every key, newest first, each with its own counts.
	out, _ = run("", "usage", "payments", "--rotation-chain", "-o", "json")
	var chain struct {
		Points []struct{ Accepted, Refused int }
		Keys   []struct {
			ApiKey                         struct{ Id, Name, Status, Hint string }
			Accepted, RateLimited, Refused int
		}
	}
	if err := json.Unmarshal([]byte(out), &chain); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := []struct {
		id, status        string
		accepted, refused int
	}{{third.ID, "ACTIVE", 0, 0}, {second.ID, "REVOKED", 4, 1}, {first.ID, "REVOKED", 3, 2}}
	if len(chain.Keys) != len(want) {
		t.Fatalf("%d keys in the chain, want %d: %s", len(chain.Keys), len(want), out)
	}
	for i, w := range want {
		k := chain.Keys[i]
		if k.ApiKey.Id != w.id || k.ApiKey.Status != w.status || k.ApiKey.Name != "payments" || k.Accepted != w.accepted || k.Refused != w.refused {
			t.Errorf("key %d: %+v, want %+v", i, k, w)
		}
	}
	sum := struct{ accepted, refused int }{}
	for _, pt := range chain.Points {
		sum.accepted += pt.Accepted
		sum.refused += pt.Refused
	}
	if len(chain.Points) != 7 || sum.accepted != 7 || sum.refused != 3 {
		t.Errorf("summed points: %d points, %+v", len(chain.Points), sum)
	}
	// From any key of the chain, by id, the same chain.
	out, _ = run("", "usage", first.ID, "--rotation-chain", "-o", "json")
	if strings.Count(out, `"status": "REVOKED"`) != 2 || !strings.Contains(out, third.ID) {
		t.Errorf("the chain from its first key: %s", out)
	}
	// The old key alone, by id: its refused uses.
	if out, _ = run("", "usage", first.ID, "-o", "json"); total(t, out, "refused") != 2 {
		t.Errorf("the first key by id: %s", out)
	}
	// A revoked key's name, when no live key has it: the newest of that name.
	if out, _ = run("", "usage", "other", "-o", "json"); total(t, out, "accepted") != 5 {
		t.Errorf("a revoked key by name: %s", out)
	}
	// The workspace's JSON is its points: every key's uses summed.
	out, _ = run("", "usage", "-o", "json")
	if total(t, out, "accepted") < 5 {
		t.Errorf("workspace usage: %s", out)
	}
}

// total sums one field of a JSON array of usage points.
func total(t *testing.T, out, field string) int {
	t.Helper()
	var pts []map[string]any
	if err := json.Unmarshal([]byte(out), &pts); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	n := 0
	for _, pt := range pts {
		v, _ := pt[field].(float64)
		n += int(v)
	}
	return n
}
