package server_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/sqlite/sqlitetest"
)

// A canary's 401 never waits for the database: with the SQLite writer held
// by another connection (so the once-a-minute record cannot be written), the
// answer still arrives at once, and the use is recorded once the database
// is free again. A caller cannot tell a trap by a slower answer.
func TestCanaryAnswerDoesNotWaitForTheRecord(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	trap := e.createKeyWith(owner, "trap", "canary:true")

	unlock := sqlitetest.HoldWriter(t, e.dbPath)

	// The store waits up to its busy timeout (5 s) for the writer; the
	// answer must come well before that, while the lock is still held.
	client := &http.Client{Timeout: 3 * time.Second}
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/v1/authorize", nil)
	req.Header.Set("X-Api-Key", trap.Plaintext)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("the canary's answer waited for the database: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("canary: %d, want 401", resp.StatusCode)
	}
	unlock()

	deadline := time.Now().Add(15 * time.Second)
	for {
		var got struct {
			AuditEvents struct{ Nodes []struct{ TargetID string } }
		}
		e.must(owner, `query($a:String){auditEvents(action:$a){nodes{targetId}}}`, map[string]any{"a": btk.EventCanaryUsed}, &got)
		if n := got.AuditEvents.Nodes; len(n) == 1 && n[0].TargetID == trap.ID {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the canary use was not recorded once the database was free: %+v", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
