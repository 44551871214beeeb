package btk

import (
	"crypto/sha256"
	"sync"
)

// keyCache keeps key records and their workspaces in memory so that
// authenticating a request needs no database read. It stays exact under
// revocation: the service drops entries after every committed change, and a
// miss only fills the cache when no change happened while it read the
// database (the generation counter), so a stale record can never be cached.
// With several instances each entry also carries the Revision it was read
// under (obtained before the read), which the KeyGate checks on every
// request against the shared one.
type keyCache struct {
	mu         sync.RWMutex
	gen        uint64
	keys       map[[sha256.Size]byte]cachedKey
	workspaces map[string]*Workspace
	// revs is the latest revision seen per workspace prefix, for entries
	// filled on a miss.
	revs map[string]Revision
	max  int
}

type cachedKey struct {
	key *APIKey
	rev Revision
}

func newKeyCache(max int) *keyCache {
	return &keyCache{
		keys:       make(map[[sha256.Size]byte]cachedKey),
		workspaces: make(map[string]*Workspace),
		revs:       make(map[string]Revision),
		max:        max,
	}
}

// get returns the cached key, its workspace and the revision it was read
// under, or (on a miss) the latest revision seen for the workspace prefix;
// and the generation to pass to fill after reading the database.
func (c *keyCache) get(hash [sha256.Size]byte, prefix string) (*APIKey, *Workspace, Revision, uint64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.keys[hash]
	if !ok {
		return nil, nil, c.revs[prefix], c.gen
	}
	return e.key, c.workspaces[e.key.WorkspaceID], e.rev, c.gen
}

// generation returns the generation to pass to fill after a database read.
func (c *keyCache) generation() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.gen
}

// workspace returns a cached workspace, or the generation for fillWorkspace.
func (c *keyCache) workspace(id string) (*Workspace, uint64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.workspaces[id], c.gen
}

// fill caches what was read from the database at generation gen, under
// revision rev (obtained before the read), unless something changed since.
func (c *keyCache) fill(gen uint64, hash [sha256.Size]byte, k *APIKey, w *Workspace, rev Revision) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return
	}
	if len(c.keys) >= c.max {
		// Drop about a tenth, at random (map order): cheap and good enough
		// for a cache whose misses cost one indexed read.
		n := c.max / 10
		for h := range c.keys {
			delete(c.keys, h)
			if n--; n <= 0 {
				break
			}
		}
	}
	c.keys[hash] = cachedKey{k, rev}
	if w != nil {
		c.workspaces[w.ID] = w
	}
}

// seen records the current revision of a workspace prefix, as the shared
// state answered it, for the entries that later misses fill.
func (c *keyCache) seen(prefix string, rev Revision) {
	c.mu.RLock()
	same := c.revs[prefix] == rev
	c.mu.RUnlock()
	if same {
		return
	}
	c.mu.Lock()
	if len(c.revs) >= c.max {
		clear(c.revs) // only an optimisation: a miss without it reads twice
	}
	c.revs[prefix] = rev
	c.mu.Unlock()
}

func (c *keyCache) fillWorkspace(gen uint64, w *Workspace) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == gen {
		c.workspaces[w.ID] = w
	}
}

// dropKey forgets one key; call it after the change is committed.
func (c *keyCache) dropKey(hash []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.keys, [sha256.Size]byte(hash))
	c.gen++
}

// dropAll forgets everything cached.
func (c *keyCache) dropAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.keys)
	clear(c.workspaces)
	clear(c.revs)
	c.gen++
}

// dropWorkspace forgets a workspace and, with keys, every key of it.
func (c *keyCache) dropWorkspace(id string, keys bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.workspaces, id)
	if keys {
		for h, e := range c.keys {
			if e.key.WorkspaceID == id {
				delete(c.keys, h)
			}
		}
	}
	c.gen++
}
