package server_test

import (
	"context"
	"crypto/sha256"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/btk-project/btk/internal/btk"
)

// storeChain stores a rotation chain of n keys in the workspace ws straight
// into the database (n rotations through the API take minutes): each key
// rotated from the one before, with the audit entries a rotation writes
// (CREATED for the first, ROTATED for each next), all named name, all but
// the newest revoked. It returns the keys' ids, oldest first.
func storeChain(t testing.TB, e *env, ws, name string, n int) []string {
	t.Helper()
	ctx := context.Background()
	var w *btk.Workspace
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uuid.NewString()
	}
	at := e.clock.Now().Add(-time.Duration(n) * time.Minute)
	err := e.db.Write(ctx, func(tx btk.Tx) (err error) {
		if w, err = tx.Workspace(ctx, ws); err != nil {
			return err
		}
		for i, id := range ids {
			h := sha256.Sum256([]byte(id))
			k := &btk.APIKey{ID: id, WorkspaceID: ws, Name: name, Hash: h[:], DisplayPrefix: "btk_" + w.Prefix(),
				Hint: "abcd", CreatedAt: at.Add(time.Duration(i) * time.Minute), CreatedBy: "bench"}
			entry := &btk.AuditEntry{ID: uuid.NewString(), WorkspaceID: ws, Action: btk.AuditCreated, APIKeyID: id, APIKeyName: k.Name,
				ActorEmail: "chain@example.com", CreatedAt: k.CreatedAt}
			if i > 0 {
				k.RotatedFromID = ids[i-1]
				entry.Action, entry.APIKeyID, entry.NewAPIKeyID = btk.AuditRotated, ids[i-1], id
			}
			if i < n-1 {
				k.ReplacedByID, k.RevokedAt = ids[i+1], ptrTo(at.Add(time.Duration(i+1)*time.Minute))
			}
			if err := tx.CreateAPIKey(ctx, k); err != nil {
				return err
			}
			ev := &btk.AuditEvent{WorkspaceID: ws, Action: entry.Action.EventAction(), ActorEmail: entry.ActorEmail,
				TargetType: "api_key", TargetID: entry.APIKeyID, CreatedAt: entry.CreatedAt}
			if err := tx.AddAudit(ctx, entry, ev); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// chainReads counts the reads a key's audit log makes of the keys of its
// rotation chain: keys read one by one, and chain walks.
type chainReads struct {
	btk.Store
	keys, walks *atomic.Int64
}

func (s chainReads) Read(ctx context.Context, fn func(btk.Tx) error) error {
	return s.Store.Read(ctx, func(tx btk.Tx) error { return fn(chainReadsTx{tx, s}) })
}

type chainReadsTx struct {
	btk.Tx
	s chainReads
}

func (t chainReadsTx) APIKey(ctx context.Context, id string) (*btk.APIKey, error) {
	t.s.keys.Add(1)
	return t.Tx.APIKey(ctx, id)
}

func (t chainReadsTx) RotationChain(ctx context.Context, workspaceID, keyID string, n int) ([]string, []string, error) {
	t.s.walks.Add(1)
	return t.Tx.RotationChain(ctx, workspaceID, keyID, n)
}

type chainLog struct {
	ApiKeyAuditLog struct {
		Nodes []struct {
			Action, ApiKeyId string
			NewApiKeyId      *string
		}
		RotationChain *struct {
			Keys                     int
			OldestKeyId, NewestKeyId string
			OlderCut, NewerCut       bool
		}
	}
}

const chainLogQuery = `query($id:ID!,$first:Int){apiKeyAuditLog(apiKeyId:$id,first:$first){nodes{action apiKeyId newApiKeyId}
	rotationChain{keys oldestKeyId newestKeyId olderCut newerCut}}}`

// A key's audit log follows its rotation chain in one statement, whatever
// its length, and covers at most btk.MaxChainKeys keys on each side of the
// key asked for; a side cut short is said (rotationChain), with the key
// whose log reads on. Before, the chain was read one key at a time, up to
// 10,000 each way: 13,671 rotations made every look at the key's history
// take 0.33 s, and history beyond 10,000 keys stopped without a word.
func TestRotationChainBounded(t *testing.T) {
	t.Parallel()
	cr := chainReads{keys: new(atomic.Int64), walks: new(atomic.Int64)}
	e := newWrappedEnv(t, func(s btk.Store) btk.Store { cr.Store = s; return cr })
	owner := e.admin()
	const n = 2*btk.MaxChainKeys + 5
	ids := storeChain(t, e, e.adminWS, "long", n)
	ask := func(id string, first int) chainLog {
		t.Helper()
		cr.keys.Store(0)
		cr.walks.Store(0)
		var out chainLog
		e.must(owner, chainLogQuery, map[string]any{"id": id, "first": first}, &out)
		if k, w := cr.keys.Load(), cr.walks.Load(); k != 0 || w != 1 {
			t.Errorf("log of %s: %d keys read one by one and %d chain walks; want 0 and 1", id, k, w)
		}
		return out
	}

	// From the newest key: the 1,000 keys before it, the older ones cut.
	out := ask(ids[n-1], 500)
	c := out.ApiKeyAuditLog.RotationChain
	oldest := ids[n-1-btk.MaxChainKeys]
	if c == nil || c.Keys != btk.MaxChainKeys+1 || !c.OlderCut || c.NewerCut || c.OldestKeyId != oldest || c.NewestKeyId != ids[n-1] {
		t.Fatalf("newest key's chain: %+v; want %d keys, older cut at %s", c, btk.MaxChainKeys+1, oldest)
	}
	// Its entries: the rotations that made the keys covered, newest first.
	nodes := out.ApiKeyAuditLog.Nodes
	if len(nodes) != 500 || nodes[0].NewApiKeyId == nil || *nodes[0].NewApiKeyId != ids[n-1] {
		t.Fatalf("newest key's log: %d entries, first %+v", len(nodes), nodes[0])
	}

	// From the middle: 1,000 each way, both sides cut; the oldest covered
	// key's own log reads on back, to the chain's first key.
	out = ask(ids[n/2], 1)
	if c := out.ApiKeyAuditLog.RotationChain; c == nil || c.Keys != 2*btk.MaxChainKeys+1 || !c.OlderCut || !c.NewerCut ||
		c.OldestKeyId != ids[n/2-btk.MaxChainKeys] || c.NewestKeyId != ids[n/2+btk.MaxChainKeys] {
		t.Fatalf("middle key's chain: %+v", c)
	}
	out = ask(ids[2], 500)
	if c := out.ApiKeyAuditLog.RotationChain; c == nil || c.Keys != btk.MaxChainKeys+3 || c.OlderCut || !c.NewerCut || c.OldestKeyId != ids[0] {
		t.Fatalf("third key's chain: %+v", c)
	}
	var created chainLog
	e.must(owner, `query($id:ID!){apiKeyAuditLog(apiKeyId:$id,action:CREATED){nodes{action apiKeyId}}}`, map[string]any{"id": ids[2]}, &created)
	if n := created.ApiKeyAuditLog.Nodes; len(n) != 1 || n[0].ApiKeyId != ids[0] {
		t.Fatalf("third key's log: creations %+v; want the chain's first key's", n)
	}

	// A short chain is whole; a log without apiKeyId has no chain.
	short := storeChain(t, e, e.adminWS, "short", 3)
	if c := ask(short[1], 10).ApiKeyAuditLog.RotationChain; c == nil || c.Keys != 3 || c.OlderCut || c.NewerCut ||
		c.OldestKeyId != short[0] || c.NewestKeyId != short[2] {
		t.Fatalf("short chain: %+v", c)
	}
	var all chainLog
	e.must(owner, `{apiKeyAuditLog(first:1){rotationChain{keys}}}`, nil, &all)
	if all.ApiKeyAuditLog.RotationChain != nil {
		t.Errorf("a log without apiKeyId: rotationChain %+v; want null", all.ApiKeyAuditLog.RotationChain)
	}
}

func ptrTo[T any](v T) *T { return &v }
