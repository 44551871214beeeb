package web_test

import (
	"context"
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/btk-project/btk/internal/btk"
)

// A key's page says when its history is cut: its rotation chain goes on
// beyond btk.MaxChainKeys keys on a side, and the page links to the
// farthest key covered, whose own history reads on. A whole chain says
// nothing of the kind.
func TestKeyPageSaysHistoryCut(t *testing.T) {
	var db btk.Store
	e := newWrappedEnv(t, func(s btk.Store) btk.Store { db = s; return s })
	ctx := context.Background()
	chain := func(name string, n int) []string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = uuid.NewString()
		}
		now := e.clock.Now()
		err := db.Write(ctx, func(tx btk.Tx) error {
			for i, id := range ids {
				h := sha256.Sum256([]byte(id))
				k := &btk.APIKey{ID: id, WorkspaceID: e.ws.ID, Name: name, Hash: h[:], DisplayPrefix: "btk_" + e.ws.Prefix(),
					Hint: "abcd", CreatedAt: now.Add(time.Duration(i-n) * time.Minute), CreatedBy: "test"}
				if i > 0 {
					k.RotatedFromID = ids[i-1]
				}
				if i < n-1 {
					revoked := k.CreatedAt.Add(time.Minute)
					k.ReplacedByID, k.RevokedAt = ids[i+1], &revoked
				}
				if err := tx.CreateAPIKey(ctx, k); err != nil {
					return err
				}
			}
			newest := &btk.AuditEntry{ID: uuid.NewString(), WorkspaceID: e.ws.ID, Action: btk.AuditRotated, APIKeyID: ids[n-2],
				NewAPIKeyID: ids[n-1], APIKeyName: name, ActorEmail: ownerEmail, CreatedAt: now}
			return tx.AddAudit(ctx, newest, &btk.AuditEvent{WorkspaceID: e.ws.ID, Action: newest.Action.EventAction(),
				ActorEmail: ownerEmail, TargetType: "api_key", TargetID: ids[n-2], CreatedAt: now})
		})
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	long := chain("long", btk.MaxChainKeys+3)
	short := chain("short", 3)
	b := e.loggedIn(ownerEmail, ownerPassword)

	page := b.get("/keys/" + long[len(long)-1])
	oldest := long[len(long)-1-btk.MaxChainKeys]
	if page.Status != 200 || !strings.Contains(page.Body, "Older changes are not shown: this key's rotation chain has more than 1,000 keys before it") ||
		!strings.Contains(page.Body, `href="/keys/`+oldest+`"`) || strings.Contains(page.Body, "Newer changes are not shown") {
		t.Fatalf("the newest key of a chain of %d: HTTP %d, no note of the cut history linking to %s:\n%s", len(long), page.Status, oldest, page.Body)
	}
	page = b.get("/keys/" + short[2])
	if page.Status != 200 || strings.Contains(page.Body, "changes are not shown") || !strings.Contains(page.Body, "Rotated") {
		t.Fatalf("a whole chain: HTTP %d:\n%s", page.Status, page.Body)
	}
}
