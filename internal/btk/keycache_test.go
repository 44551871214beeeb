package btk

import (
	"crypto/sha256"
	"fmt"
	"testing"
)

// The key cache holds at most its size (Config.KeyCacheSize) of keys and of
// workspace revisions, however many distinct keys are used through it
// (docs/security.md#what-a-client-can-make-the-server-hold); a key over the
// bound is still cached, in place of others.
func TestKeyCacheBounded(t *testing.T) {
	const size = 100
	c := newKeyCache(size)
	for i := range 10 * size {
		hash := sha256.Sum256(fmt.Appendf(nil, "key %d", i))
		prefix := fmt.Sprintf("%08x", i)
		_, _, _, gen := c.get(hash, prefix)
		c.seen(prefix, Revision{Token: "t"})
		c.fill(gen, hash, &APIKey{ID: fmt.Sprint(i), WorkspaceID: "w"}, &Workspace{ID: "w"}, Revision{Token: "t"})
		if k, _, _, _ := c.get(hash, prefix); k == nil {
			t.Fatalf("key %d not cached right after its fill", i)
		}
		if len(c.keys) > size || len(c.revs) > size {
			t.Fatalf("after %d keys: %d keys and %d revisions cached, bound %d", i+1, len(c.keys), len(c.revs), size)
		}
	}
}
