package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A SIGHUP while btk serve starts (systemctl reload right after start) is
// queued and reloads once it serves: it killed the process ("Hangup", exit
// 129) until its handler was set, 20 to 40 ms in. From the init of btk's
// first package (internal/hangup, which GODEBUG=inittrace=1 reports) each
// start here is sent SIGHUP every millisecond until /readyz answers; it must
// serve, log the reload and stop with status 0. Before that init, during the
// Go runtime's own start (about a millisecond), a SIGHUP kills any Go program.
func TestServeSurvivesSIGHUPAtStart(t *testing.T) {
	skipIfShort(t, "starts btk serve processes")
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte("rules:\n  - path: /a\n    scopes: [x:read]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GODEBUG", "inittrace=1")
	for i := range 8 {
		p := launchServe(t, filepath.Join(t.TempDir(), "btk.db"), "--access-rules", rules)
		// Polled without a pause, to send the first SIGHUP when it counts.
		for deadline := time.Now().Add(procWait); !strings.Contains(p.Output(), "init github.com/btk-project/btk/internal/hangup @"); {
			if time.Now().After(deadline) {
				t.Fatalf("start %d: internal/hangup not initialized within %v:\n%s", i, procWait, p.Output())
			}
		}
		sent := 0
		for deadline := time.Now().Add(procWait); ; sent++ {
			if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
				break // exited: reported below
			}
			if res, err := p.client.Get(p.url + "/readyz"); err == nil {
				res.Body.Close()
				if res.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("start %d: not ready within %v:\n%s", i, procWait, p.Output())
			}
			time.Sleep(time.Millisecond)
		}
		select {
		case <-p.Exited():
			t.Fatalf("start %d: btk serve died after %d SIGHUPs: %v\n%s", i, sent, p.Err(), p.Output())
		default:
		}
		p.WaitFor(t, "the queued SIGHUP's reload", procWait, func() bool {
			return strings.Contains(p.Output(), "SIGHUP: access rules reloaded")
		})
		if err := p.stop(); err != nil {
			t.Fatalf("start %d: exit %v, want 0:\n%s", i, err, p.Output())
		}
	}
}
