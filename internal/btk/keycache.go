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
type keyCache struct {
	mu         sync.RWMutex
	gen        uint64
	keys       map[[sha256.Size]byte]*APIKey
	workspaces map[string]*Workspace
	max        int
}

func newKeyCache(max int) *keyCache {
	return &keyCache{
		keys:       make(map[[sha256.Size]byte]*APIKey),
		workspaces: make(map[string]*Workspace),
		max:        max,
	}
}

// get returns the cached key and its workspace, or the generation to pass to
// fill after reading the database.
func (c *keyCache) get(hash [sha256.Size]byte) (*APIKey, *Workspace, uint64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	k := c.keys[hash]
	if k == nil {
		return nil, nil, c.gen
	}
	return k, c.workspaces[k.WorkspaceID], c.gen
}

// workspace returns a cached workspace, or the generation for fillWorkspace.
func (c *keyCache) workspace(id string) (*Workspace, uint64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.workspaces[id], c.gen
}

// fill caches what was read from the database at generation gen, unless
// something changed since.
func (c *keyCache) fill(gen uint64, hash [sha256.Size]byte, k *APIKey, w *Workspace) {
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
	c.keys[hash] = k
	if w != nil {
		c.workspaces[w.ID] = w
	}
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

// dropWorkspace forgets a workspace and, with keys, every key of it.
func (c *keyCache) dropWorkspace(id string, keys bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.workspaces, id)
	if keys {
		for h, k := range c.keys {
			if k.WorkspaceID == id {
				delete(c.keys, h)
			}
		}
	}
	c.gen++
}
