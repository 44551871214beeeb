package btk

import (
	"context"
	"hash/maphash"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// UseOutcome is how a presented key's request ended, for its usage counts
// (docs/usage.md).
type UseOutcome uint8

const (
	// UseAccepted: the key was accepted.
	UseAccepted UseOutcome = iota
	// UseRateLimited: refused for the key's rate limit (429).
	UseRateLimited
	// UseRefused: the key is revoked, expired, restricted (network, scope)
	// or a canary.
	UseRefused
)

// Client is who presented a key, as the HTTP layer determines it.
type Client struct {
	// IP is the client's address (the gateway's, docs/access.md#client-address); the zero IP: the context's (WithClientIP), or none. It is
	// formatted only where a string is stored, so the key check of an
	// accepted, known key does not pay for it.
	IP netip.Addr
	// UserAgent is the request's User-Agent.
	UserAgent string
}

// addr is the client's address as stored: its IP, else the context's.
func (cl Client) addr(ctx context.Context) string {
	if cl.IP.IsValid() {
		return cl.IP.String()
	}
	return clientIPFrom(ctx)
}

const counterShards = 64 // power of two

// usageCounter counts the uses of keys per hour in memory until a flush
// takes them (FlushDueUsage). It holds at most one entry per key used since
// its last write, plus the finished hours not yet written: keys reach it
// only once they were found in the database, so a client cannot grow it with
// made-up keys.
type usageCounter struct {
	seed   maphash.Seed
	shards [counterShards]counterShard
}

type counterShard struct {
	mu   sync.Mutex
	keys map[string]*keyCount
	// closed holds the counts of hours that ended before a flush took them.
	closed []UsageCount
	_      [128 - 48]byte
}

type keyCount struct {
	workspaceID                    string
	hour                           int64 // unix seconds of the hour counted
	accepted, rateLimited, refused int64
	// The latest accepted request's client and time (unix ns); at is 0 when
	// none since the last take. The address is formatted when taken, not on
	// every request.
	ip netip.Addr
	ua string
	at int64
	// written is when a flush last took this entry (service clock, unix
	// ns); 0 when never.
	written int64
}

func newUsageCounter() *usageCounter {
	c := &usageCounter{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].keys = make(map[string]*keyCount)
	}
	return c
}

// add counts one use of the key k at now. It allocates only for a key's
// first use since its entry was dropped.
func (c *usageCounter) add(k *APIKey, o UseOutcome, now time.Time, cl Client) {
	sh := &c.shards[maphash.String(c.seed, k.ID)&(counterShards-1)]
	hour := now.Unix()
	hour -= hour % 3600
	var ua string
	if o == UseAccepted {
		ua = keptClientString(cl.UserAgent) // outside the lock
	}
	sh.mu.Lock()
	e := sh.keys[k.ID]
	if e == nil {
		e = &keyCount{workspaceID: k.WorkspaceID, hour: hour}
		sh.keys[k.ID] = e
	} else if e.hour != hour {
		if e.accepted|e.rateLimited|e.refused != 0 {
			sh.closed = append(sh.closed, e.count(k.ID))
		}
		e.hour, e.accepted, e.rateLimited, e.refused = hour, 0, 0, 0
	}
	switch o {
	case UseAccepted:
		e.accepted++
		e.ip, e.ua, e.at = cl.IP, ua, now.UnixNano()
	case UseRateLimited:
		e.rateLimited++
	default:
		e.refused++
	}
	sh.mu.Unlock()
}

// keptClientString is a client string an entry may keep until its flush:
// as given (no copy, no allocation) up to MaxClientString bytes, else cut
// and copied, so that the entry never pins a longer header value (2,000
// keys used with a 60 KB User-Agent each held 120 MB until their flush).
func keptClientString(s string) string {
	if len(s) <= MaxClientString {
		return s
	}
	return strings.Clone(ClientString(s))
}

func (e *keyCount) count(keyID string) UsageCount {
	return UsageCount{
		KeyID: keyID, WorkspaceID: e.workspaceID, Start: time.Unix(e.hour, 0).UTC(),
		Accepted: e.accepted, RateLimited: e.rateLimited, Refused: e.refused,
	}
}

// take removes and returns the counts of the finished hours, and those of
// the keys last taken at least interval ago (or never); with all, every
// count. It drops the entries of keys idle for interval, which bounds the
// memory to the keys in use.
func (c *usageCounter) take(now int64, interval time.Duration, all bool) ([]UsageCount, []KeyClient) {
	var counts []UsageCount
	var clients []KeyClient
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		counts = append(counts, sh.closed...)
		sh.closed = sh.closed[:0:0]
		for id, e := range sh.keys {
			due := all || now-e.written >= int64(interval)
			if !due {
				continue
			}
			if e.accepted|e.rateLimited|e.refused == 0 && e.at == 0 {
				delete(sh.keys, id) // idle for a whole interval
				continue
			}
			if e.accepted|e.rateLimited|e.refused != 0 {
				counts = append(counts, e.count(id))
				e.accepted, e.rateLimited, e.refused = 0, 0, 0
			}
			if e.at != 0 {
				var ip string
				if e.ip.IsValid() {
					ip = e.ip.String()
				}
				clients = append(clients, KeyClient{
					KeyID: id, At: time.Unix(0, e.at).UTC(), IP: ip,
					// Copied: the original may hold a whole header block.
					UserAgent: strings.Clone(ClientString(e.ua)),
				})
				e.ip, e.ua, e.at = netip.Addr{}, "", 0
			}
			e.written = now
		}
		sh.mu.Unlock()
	}
	return counts, clients
}

// mergeCounts adds the counts of the same key and hour together and sorts
// them by key and hour: the order every store writes them in.
func mergeCounts(counts []UsageCount) []UsageCount {
	slices.SortFunc(counts, func(a, b UsageCount) int {
		if c := strings.Compare(a.KeyID, b.KeyID); c != 0 {
			return c
		}
		return a.Start.Compare(b.Start)
	})
	out := counts[:0]
	for _, c := range counts {
		if n := len(out); n > 0 && out[n-1].KeyID == c.KeyID && out[n-1].Start.Equal(c.Start) {
			out[n-1].Accepted += c.Accepted
			out[n-1].RateLimited += c.RateLimited
			out[n-1].Refused += c.Refused
			continue
		}
		out = append(out, c)
	}
	return out
}

// FlushCounts is the counts of flushes merged into one row per key and
// hour, sorted by key and hour: the order every store writes them in. The
// flushes' slices are not changed.
func FlushCounts(flushes []UsageFlush) []UsageCount {
	var n int
	for _, f := range flushes {
		n += len(f.Counts)
	}
	all := make([]UsageCount, 0, n)
	for _, f := range flushes {
		all = append(all, f.Counts...)
	}
	return mergeCounts(all)
}

// mergeClients keeps the latest client of each key, sorted by key.
func mergeClients(clients []KeyClient) []KeyClient {
	slices.SortFunc(clients, func(a, b KeyClient) int {
		if c := strings.Compare(a.KeyID, b.KeyID); c != 0 {
			return c
		}
		return b.At.Compare(a.At) // latest first
	})
	return slices.CompactFunc(clients, func(a, b KeyClient) bool { return a.KeyID == b.KeyID })
}
