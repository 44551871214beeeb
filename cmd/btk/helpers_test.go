package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// testHTTP is the client of the tests' own requests: every wait is bounded.
var testHTTP = &http.Client{Timeout: 10 * time.Second}

// fakeTerminal and pipe say how test streams pose.
const (
	pipe         = false
	fakeTerminal = true
)

// testStreams returns streams over stdin whose terminal-ness is tty; on a
// fake terminal, secrets are read as lines of stdin. Colour follows the real
// rule, so NO_COLOR set with t.Setenv applies.
func testStreams(tty bool, stdin string) (*iostreams, *bytes.Buffer, *bytes.Buffer) {
	var out, errOut bytes.Buffer
	in := bufio.NewReader(strings.NewReader(stdin))
	s := &iostreams{In: in, Out: &out, ErrOut: &errOut, inTTY: tty, outTTY: tty, color: colorEnabled(tty, os.Getenv), lines: in}
	if tty {
		s.readSecret = func() (string, error) {
			line, err := in.ReadString('\n')
			return strings.TrimSuffix(line, "\n"), err
		}
	}
	return s, &out, &errOut
}

// isolate gives the test an empty config directory and no BTK_* settings
// from the environment; it returns the config file path.
func isolate(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	for _, k := range []string{"BTK_SERVER", "BTK_TOKEN", "BTK_OUTPUT", "BTK_CONFIG", "BTK_ELEVATION", "NO_COLOR"} {
		t.Setenv(k, "")
	}
	return filepath.Join(dir, "config", "btk", "config.yaml")
}

// loggedInTo isolates the test (isolate) with a config logged in to srv
// with a session token, and returns srv.
func loggedInTo(t *testing.T, srv *fakeServer) *fakeServer {
	t.Helper()
	writeFile(t, isolate(t), "server: "+srv.URL+"\ntoken: session-jwt\n")
	return srv
}

// btkRun runs the command line with the given streams.
func btkRun(s *iostreams, args ...string) int {
	return runWith(context.Background(), args, s)
}

// gqlRequest is a request the fake server received.
type gqlRequest struct {
	Op        string
	Variables map[string]any
	Header    http.Header
}

// fakeServer answers GraphQL operations by name with canned bodies: the
// body of responses[op] with HTTP 200, or with the status given as
// "STATUS body". It records every request.
type fakeServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []gqlRequest
}

func newFakeServer(t *testing.T, responses map[string]string) *fakeServer {
	t.Helper()
	fs := &fakeServer{}
	fs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			OperationName string         `json:"operationName"`
			Variables     map[string]any `json:"variables"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fs.mu.Lock()
		fs.requests = append(fs.requests, gqlRequest{body.OperationName, body.Variables, r.Header.Clone()})
		fs.mu.Unlock()
		resp, ok := responses[body.OperationName]
		if !ok {
			t.Errorf("unexpected operation %s", body.OperationName)
			http.Error(w, "unexpected", http.StatusInternalServerError)
			return
		}
		status := http.StatusOK
		if len(resp) > 4 && resp[3] == ' ' && resp[0] >= '1' && resp[0] <= '5' {
			status, _ = strconv.Atoi(resp[:3])
			resp = resp[4:]
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, resp)
	}))
	t.Cleanup(fs.Close)
	return fs
}

func (fs *fakeServer) ops() []string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var ops []string
	for _, r := range fs.requests {
		ops = append(ops, r.Op)
	}
	return ops
}

func (fs *fakeServer) last(op string) gqlRequest {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for i := len(fs.requests) - 1; i >= 0; i-- {
		if fs.requests[i].Op == op {
			return fs.requests[i]
		}
	}
	return gqlRequest{}
}

// Canned objects.
const (
	keyID      = "6f1c8f5e-2b0e-4d8a-9a51-0c9a7c3e4b21"
	newKeyID   = "7a2d9f6e-3c1f-4e9b-8b62-1d0b8d4f5c32"
	apiKeyJSON = `{"id":"` + keyID + `","name":"ci","displayPrefix":"btk_fc25ecba","hint":"HCe4","status":"ACTIVE",
		"rateLimitPerMinute":60,"rateLimitPerDay":null,"expiresAt":null,"scopes":[],"createdAt":"2026-11-21T22:00:00Z",
		"lastUsedAt":null,"revokedAt":null,"rotatedFromId":null,"replacedById":null}`
	newKeyJSON = `{"id":"` + newKeyID + `","name":"ci","displayPrefix":"btk_fc25ecba","hint":"Zz99","status":"ACTIVE",
		"rateLimitPerMinute":60,"rateLimitPerDay":null,"expiresAt":null,"scopes":[],"createdAt":"2026-11-21T22:05:00Z",
		"lastUsedAt":null,"revokedAt":null,"rotatedFromId":"` + keyID + `","replacedById":null}`
	plaintext  = "btk_fc25ecba_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA"
	tenantJSON = `{"id":"fc25ecba-4e5b-4912-b631-399a1b48a3ff","name":"Default","prefix":"fc25ecba","plan":"SELF_HOSTED",
		"publicClientKey":"bpk_fc25ecba_x","defaultRateLimitPerMinute":600,"defaultRateLimitPerDay":100000,"createdAt":"2026-11-21T22:00:00Z"}`
)

func keysPage(nodes ...string) string {
	return `{"data":{"apiKeys":{"nodes":[` + strings.Join(nodes, ",") + `],"pageInfo":{"hasNextPage":false,"endCursor":null}}}}`
}

// skipIfShort marks a test that starts processes or builds btk: -short
// skips it (reason says what it would start).
func skipIfShort(t *testing.T, reason string) {
	t.Helper()
	if testing.Short() {
		t.Skip(reason)
	}
}

// parallelUnlessShort is skipIfShort for a test that runs alongside the
// other such tests, which spend most of their time waiting on processes.
func parallelUnlessShort(t *testing.T, reason string) {
	t.Helper()
	skipIfShort(t, reason)
	t.Parallel()
}
