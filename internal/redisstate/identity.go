package redisstate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Failover and lost data (docs/clusters.md#failover):
//
// A revision token read from a primary is only as good as that primary's
// data. A replica promoted after it missed the last writes, or a server
// restarted from an older snapshot, can answer an older token — the one a
// record cached before a revoke was read under — and that record would
// pass. So every connection btk opens first reads the server's identity:
// its run_id (new at every start) and master_replid (new at every
// promotion). The first time an instance meets an identity it has not met
// before, it moves its epoch on, and every revision cached under the
// previous epoch is stale: each key is read again from the database before
// its next use. A key check compares the epoch before and after its round
// trip, so a check that ran on a connection opened meanwhile is never
// trusted. A connection to a server that is not a primary (an old primary
// back as a replica) is refused: key checks fail closed (503) and Ready
// fails, until the client finds the primary again.

// errNotPrimary is the refusal of a connection to a replica.
var errNotPrimary = errors.New("redisstate: the server is a replica (READONLY), not the primary")

// identities tracks the servers an instance has met.
type identities struct {
	mu    sync.Mutex
	known map[string]bool
	// epoch is the instance's current epoch, as the string cached
	// revisions carry (Revision.Epoch).
	epoch atomic.Pointer[string]
	n     uint64
}

func newIdentities() *identities {
	id := &identities{known: make(map[string]bool)}
	id.bump()
	return id
}

func (id *identities) bump() {
	id.n++
	e := "e" + strconv.FormatUint(id.n, 10) + ":" + random()[:8]
	id.epoch.Store(&e)
}

// lost moves the epoch on: the servers met may have changed unseen.
func (id *identities) lost() {
	id.mu.Lock()
	defer id.mu.Unlock()
	id.bump()
}

// current returns the epoch.
func (id *identities) current() string { return *id.epoch.Load() }

// met records a server's identity; a new one moves the epoch on.
func (id *identities) met(ident string) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.known[ident] {
		return
	}
	if len(id.known) >= 1024 { // identities are few; a bound all the same
		clear(id.known)
	}
	id.known[ident] = true
	id.bump()
}

// serverIdentity reads run_id, role and master_replid from INFO; a
// Sentinel (whose connections share the hook) answers sentinel.
func serverIdentity(info string) (ident string, primary, sentinel bool, err error) {
	var runID, role, replID string
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch k {
		case "run_id":
			runID = v
		case "role":
			role = v
		case "master_replid":
			replID = v
		case "redis_mode":
			sentinel = v == "sentinel"
		}
	}
	if sentinel {
		return "", false, true, nil
	}
	if runID == "" || role == "" {
		return "", false, false, fmt.Errorf("redisstate: INFO without run_id or role")
	}
	return runID + ":" + replID, role == "master", false, nil
}

// onConnect checks every new connection: it must reach a primary, whose
// identity is recorded.
func (s *State) onConnect(ctx context.Context, cn *redis.Conn) error {
	return s.checkIdentity(ctx, cn)
}

// checkIdentity reads a server's identity through c.
func (s *State) checkIdentity(ctx context.Context, c interface {
	Info(ctx context.Context, section ...string) *redis.StringCmd
}) error {
	info, err := c.Info(ctx, "server", "replication").Result()
	if err != nil {
		return err
	}
	if s.kind == Standalone {
		// A redis:// URL names one server: a Cluster node would answer
		// MOVED for most workspaces, a Sentinel no script at all.
		switch mode, _ := infoField(info, "redis_mode"); mode {
		case "cluster":
			return errors.New("redisstate: the server is a Redis Cluster node: give --redis redis+cluster://host:port[,host:port…]")
		case "sentinel":
			return errors.New("redisstate: the server is a Sentinel: give --redis redis+sentinel://host:port[,host:port…]/MASTER")
		}
	}
	ident, primary, sentinel, err := serverIdentity(info)
	if err != nil || sentinel {
		return err
	}
	if !primary {
		return errNotPrimary
	}
	s.ids.met(ident)
	return nil
}

// watchEvery is how often each instance reads every primary's identity
// anyway: a connection opened before a server changed identity (a node
// demoted and promoted again while btk kept its connection, a proxy that
// switched servers under it) would not show it otherwise.
const watchEvery = time.Second

// watch reads the identities of the primaries every watchEvery until
// Close. Errors are the key checks' to report.
func (s *State) watch() {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), watchEvery)
		err := s.eachPrimary(ctx, func(ctx context.Context, c *redis.Client) error { return s.checkIdentity(ctx, c) })
		cancel()
		// A primary that does not answer may be failed over without this
		// instance hearing of it, and answer again later, still a primary
		// with the token from before a revoke the new one answered (a hung
		// primary woken up before the sentinels demote it): at the first
		// failure, the records cached before it are read again
		// (docs/clusters.md#failover). Once per outage, not every second.
		if err != nil && !failing {
			s.ids.lost()
		}
		failing = err != nil
	}
}

// sentinelsEvery is how often the sentinels are asked whether they answer.
const sentinelsEvery = 5 * time.Second

// watchSentinels asks the sentinels every sentinelsEvery until Close, on a
// timer of its own: sentinels that hang take their whole timeout, which
// must not delay watch's reading of the primary's identity (the bound
// docs/clusters.md#failover gives down-after-milliseconds).
func (s *State) watchSentinels() {
	t := time.NewTicker(sentinelsEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.askSentinels()
	}
}

// askSentinels counts, under Sentinel, the sentinels of the URL that answer
// for the primary's name, for Sentinels. Without a majority of them, key
// checks still work on the primary btk has, but every change answers
// UNAVAILABLE (sentinelsAgree) and a failover would not be followed:
// /readyz stays 200, as key checks are what it answers for, so the operator
// is told by the metric and the log instead (docs/clusters.md#failover).
func (s *State) askSentinels() {
	if len(s.sentinels) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), watchEvery)
	defer cancel()
	var answering atomic.Int32
	var wg sync.WaitGroup
	for _, sc := range s.sentinels {
		wg.Go(func() {
			if _, err := sc.Master(ctx, s.failover.MasterName).Result(); err == nil {
				answering.Add(1)
			}
		})
	}
	wg.Wait()
	s.sentinelsAnswering.Store(answering.Load())
}

// Sentinels reports how many of the sentinels of a redis+sentinel:// URL
// answered when last asked (every few seconds), and how many it lists;
// 0, 0 for other kinds. Fewer than a majority: changes answer UNAVAILABLE.
func (s *State) Sentinels() (answering, listed int) {
	return int(s.sentinelsAnswering.Load()), len(s.sentinels)
}

// probe is a script that writes nothing but is refused wherever a write
// would be: on a replica (READONLY), out of memory (OOM), or without the
// replicas min-replicas-to-write asks for (NOREPLICAS). A script with a
// shebang and no flags is checked as a write before it runs.
var probe = redis.NewScript("#!lua\nreturn 1")

// Ready reports whether key checks can be answered: every primary btk uses
// answers, accepts writes, and is the primary it was (a new identity moves
// the epoch on, as on a new connection). /readyz fails otherwise.
func (s *State) Ready(ctx context.Context) error {
	err := s.eachPrimary(ctx, func(ctx context.Context, c *redis.Client) error {
		if err := probe.Run(ctx, c, nil).Err(); err != nil {
			return err
		}
		return s.checkIdentity(ctx, c)
	})
	// go-redis reports sentinels that answered but know no primary by
	// that name as "all sentinels ... are unreachable", each answer nil:
	// an operator would look for a network fault, not a misspelt name.
	if s.kind == Sentinel && errors.Is(err, redis.Nil) {
		return fmt.Errorf("redisstate: the sentinels answer, but monitor no primary named %q (the MASTER of redis+sentinel://…/MASTER/db)", s.failover.MasterName)
	}
	// A dial that timed out, the caller's context not done: go-redis says
	// only "context deadline exceeded".
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		tls, dial := dialSettings(s.rdb)
		hint := ""
		if tls {
			hint = "; a server that does not speak TLS never completes the handshake of a rediss:// URL"
		}
		return fmt.Errorf("redisstate: no connection to Redis within the dial timeout (%v)%s: %w", dial, hint, err)
	}
	return err
}

// eachPrimary calls fn with the client of every primary: the one, or each
// shard's.
func (s *State) eachPrimary(ctx context.Context, fn func(context.Context, *redis.Client) error) error {
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	return fmt.Errorf("redisstate: unexpected client %T", s.rdb)
}

// primaryFor returns the client of the primary that holds key.
func (s *State) primaryFor(ctx context.Context, key string) (*redis.Client, error) {
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	case *redis.Client:
		return c, nil
	}
	return nil, fmt.Errorf("redisstate: unexpected client %T", s.rdb)
}

// primaryAt returns the client of the Redis Cluster primary at addr, the
// target of a MOVED or ASK answer. The cluster's map is read again first
// (ForEachMaster does), so a primary the map did not hold yet is found.
func (s *State) primaryAt(ctx context.Context, addr string) (*redis.Client, error) {
	c, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return nil, fmt.Errorf("redisstate: redirected to %s by a server that is not in a Redis Cluster", addr)
	}
	// A redirect names an IPv6 primary without brackets (::1:6379), the
	// cluster's map with them.
	if i := strings.LastIndexByte(addr, ':'); i > 0 && addr[0] != '[' && strings.Count(addr, ":") > 1 {
		addr = net.JoinHostPort(addr[:i], addr[i+1:])
	}
	var mu sync.Mutex
	var found *redis.Client
	err := c.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error {
		if n.Options().Addr == addr {
			mu.Lock()
			found = n
			mu.Unlock()
		}
		return nil
	})
	if err == nil && found == nil {
		err = fmt.Errorf("redisstate: redirected to %s, which the cluster does not list as a primary", addr)
	}
	return found, err
}
