package main

import (
	"errors"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/store/postgres/pgtest"
	"github.com/btk-project/btk/internal/testproc"
)

// startServeBehindRelay starts btk serve on a PostgreSQL schema reached
// through a relay the test can cut or hang, and uses a key n times.
func startServeBehindRelay(t *testing.T, n int) (*serveProcess, *testproc.Relay, string, procKey) {
	t.Helper()
	url := pgtest.URL(t)
	_, rest, _ := strings.Cut(url, "@")
	host, _, _ := strings.Cut(rest, "/")
	relay := testproc.NewRelay(t, host)
	p := startServe(t, strings.Replace(url, host, relay.Addr, 1))
	k := p.createKey(p.login(), "used-before-the-stop")
	for range n {
		if s, msg := p.probe(k.Plaintext); s != http.StatusOK {
			t.Fatalf("probe: HTTP %d %q", s, msg)
		}
	}
	return p, relay, url, k
}

// exitStatus waits (bounded) for p to exit and returns its status.
func exitStatus(t *testing.T, p *serveProcess) int {
	t.Helper()
	select {
	case <-p.Exited():
	case <-time.After(procWait):
		t.Fatalf("btk serve did not exit within %v of SIGTERM:\n%s", procWait, p.Out)
	}
	var ee *exec.ExitError
	if err := p.Err(); errors.As(err, &ee) {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

var lostUses = regexp.MustCompile(`level=ERROR msg="final usage flush failed: usage not stored" uses=([1-9][0-9]*) keys=1 `)

// docs/operating.md#stopping: with PostgreSQL hung (a black hole), SIGTERM
// still ends btk serve, bounded; the uses it could not write are logged at
// ERROR as counts, and it exits 1.
func TestServeStopWithPostgresHung(t *testing.T) {
	parallelUnlessShort(t, "starts btk serve processes")
	p, relay, _, k := startServeBehindRelay(t, 20)
	relay.Hang()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitStatus(t, p); code != 1 {
		t.Fatalf("exit status %d after SIGTERM with PostgreSQL hung, want 1:\n%s", code, p.Out)
	}
	out := p.Out.String()
	if !lostUses.MatchString(out) || strings.Contains(out, k.Plaintext) {
		t.Fatalf("no ERROR counting the uses not stored (or it shows the key):\n%s", out)
	}
}

// docs/operating.md#stopping: a second SIGTERM ends the stop at once
// (here while the final flush waits for a hung PostgreSQL) and says what is
// lost.
func TestServeSecondSignalStopsAtOnce(t *testing.T) {
	parallelUnlessShort(t, "starts btk serve processes")
	p, relay, _, _ := startServeBehindRelay(t, 20)
	relay.Hang()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.WaitFor(t, "the stop to begin", procWait, func() bool { return strings.Contains(p.Out.String(), "shutting down") })
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitStatus(t, p); code != 1 {
		t.Fatalf("exit status %d after a second SIGTERM, want 1:\n%s", code, p.Out)
	}
	if out := p.Out.String(); !strings.Contains(out, "second signal: stopping at once") || !lostUses.MatchString(out) {
		t.Fatalf("the second signal's stop does not say what is lost:\n%s", out)
	}
}

// docs/usage.md: a SIGTERM while PostgreSQL refuses connections retries the
// final flush; once PostgreSQL answers again (within the stop's bound) every
// use is stored and btk serve exits 0.
func TestServeStopRetriesTheFinalFlush(t *testing.T) {
	parallelUnlessShort(t, "starts btk serve processes")
	const n = 25
	p, relay, url, k := startServeBehindRelay(t, n)
	relay.Cut()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.WaitFor(t, "a failed final flush attempt", procWait, func() bool {
		return strings.Contains(p.Out.String(), "final usage flush failed; retrying")
	})
	relay.Restore()
	if code := exitStatus(t, p); code != 0 {
		t.Fatalf("exit status %d, want 0 (PostgreSQL came back within the stop):\n%s", code, p.Out)
	}

	again := startServe(t, url)
	var out struct {
		ApiKey struct{ Usage []struct{ Accepted int } }
	}
	again.must(again.login(), `query($id:ID!){apiKey(id:$id){usage(granularity:DAY){accepted}}}`, map[string]any{"id": k.ID}, &out)
	sum := 0
	for _, u := range out.ApiKey.Usage {
		sum += u.Accepted
	}
	if sum != n {
		t.Fatalf("%d accepted uses stored, want %d:\n%s", sum, n, p.Out)
	}
}
