// Package redisstate keeps the state that several btk instances must share
// in Redis: the two-window rate limits of keys, the revision that tells an
// instance its cached key records may be stale (revocation), and the
// password throttles. It implements btk.KeyGate and btk.Throttle.
//
// A key-authenticated request costs one round trip: one Lua script (gcra.lua)
// checks the epoch and the workspace's revision token and, when the cached
// record is current, decides and commits both rate-limit windows atomically.
package redisstate

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/ratelimit"
	"github.com/redis/go-redis/v9"
)

//go:embed gcra.lua
var gcraSource string

var gcra = redis.NewScript(gcraSource)

// The script's constant arguments, boxed once: a key check builds its
// command without converting them again (docs/clusters.md#what-a-key-check-costs).
var (
	evalshaArg any = "evalsha"
	evalArg    any = "eval"
	gcraSHA    any = gcra.Hash()
	gcraSrc    any = gcraSource
	emptyArg   any = ""
)

// scriptCall is one call of the script: its argument list and the strings
// it points to, in one allocation. go-redis writes a *string as the string,
// and a pointer goes into an interface without an allocation of its own
// (docs/clusters.md#what-a-key-check-costs).
type scriptCall struct {
	args                   [8]any
	key1, key2, seen, nums string
}

// processor runs a command: the client, or its automatic pipeline.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// State is the shared state on one Redis deployment (a server, a primary
// followed through Sentinel, or a Redis Cluster). It is safe for concurrent
// use.
type State struct {
	rdb redis.UniversalClient
	// checks runs the key-check script: rdb, or an automatic pipeline on
	// it (usePipeline).
	checks processor
	kind   Kind
	// failover is a Sentinel deployment's options: the primary's name and
	// the sentinels; sentinels a client of each sentinel of the URL, which
	// sentinelsAgree asks. nil otherwise.
	failover  *redis.FailoverOptions
	sentinels []*redis.SentinelClient
	// sentinelsAnswering is how many of them answered watch's last
	// question (Sentinels).
	sentinelsAnswering atomic.Int32
	prefix             string
	ids                *identities
	// seed is this instance's random value, from which the script makes a
	// missing revision token (with the server's time); seedArg is it boxed.
	seed    string
	seedArg any
	// now, when set, replaces the Redis server's clock (tests).
	now func() time.Time

	mu    sync.Mutex
	usage map[string]ratelimit.State // day states and last uses not yet flushed

	stop      chan struct{} // ends watch
	closeOnce sync.Once
}

// Open connects to the Redis that url names — redis:// or rediss:// (one
// server), redis+sentinel:// (a primary followed through Sentinel) or
// redis+cluster:// (Redis Cluster); see docs/clusters.md#shared-state-in-redis — and keeps its
// keys under prefix. It does not wait for Redis: use Ready.
func Open(url, prefix string) (*State, error) { return openQueued(url, prefix, maxQueued) }

var errBracedPrefix = errors.New("--redis-prefix: must not contain { or } (btk's keys use a hash tag of their own)")

// openQueued is Open with at most queued checks waiting for each Redis
// server (usePipeline): maxQueued, or a test's own bound.
func openQueued(url, prefix string, queued int) (*State, error) {
	if strings.ContainsAny(prefix, "{}") {
		return nil, errBracedPrefix
	}
	s := &State{prefix: prefix, ids: newIdentities(), seed: random(), usage: make(map[string]ratelimit.State), stop: make(chan struct{})}
	s.seedArg = s.seed
	rdb, kind, failover, err := parse(url, s.onConnect)
	if err != nil {
		return nil, err
	}
	s.rdb, s.checks, s.kind, s.failover = rdb, rdb, kind, failover
	if failover != nil {
		for _, addr := range failover.SentinelAddrs {
			s.sentinels = append(s.sentinels, redis.NewSentinelClient(&redis.Options{
				Addr: addr, Username: failover.SentinelUsername, Password: failover.SentinelPassword,
				DialTimeout: failover.DialTimeout, ReadTimeout: failover.ReadTimeout, WriteTimeout: failover.WriteTimeout,
				TLSConfig: failover.TLSConfig, MaxRetries: -1, DisableIdentity: true, Protocol: protocol,
				PoolSize: 2, // a change at a time, now and then
			}))
			s.sentinelsAnswering.Add(1) // until asked: they answered to find the primary
		}
	}
	// Key checks go through the automatic pipeline: measured, it cuts
	// btk's CPU per check by two thirds and Redis's by half under
	// concurrency (docs/clusters.md#what-a-key-check-costs).
	if err := s.usePipeline(queued); err != nil {
		_ = rdb.Close()
		return nil, err
	}
	go s.watch()
	if len(s.sentinels) > 0 {
		go s.watchSentinels()
	}
	return s, nil
}

// usePipeline sends key checks through go-redis's automatic pipeline:
// concurrent checks share a write and a read (measured in cost_test.go).
// A lone check is sent at once: no waiting for company. At most queued
// checks wait for each Redis server. Called once: go-redis keeps one
// automatic pipeline per client, whatever the options of a second call.
func (s *State) usePipeline(queued int) error {
	// The defaults of the blocking face: one ordered batch in flight, no
	// coalescing wait (a flush delay of 100 µs measured no better). The
	// deferred face, whose wait can end at a deadline (bounded).
	opts := redis.DefaultBlockingAutoPipelineOptions()
	opts.MaxQueuedCommands = queued
	bound := readTimeout(s.rdb)
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		// A half-duplex pipeline per primary: one shared pipeline's batches
		// span primaries and wait for the slowest, so one stalled primary
		// held up every workspace's checks; go-redis's full-duplex pipeline
		// per primary isolates them too, but costs a system call per check
		// on a fast link (docs/clusters.md#when-redis-stalls).
		s.checks = &perPrimary{cc: cc, opts: opts, bound: bound, following: make(chan struct{}, maxFollowing)}
		return nil
	}
	ap, err := s.rdb.AsyncAutoPipelineWithOptions(opts)
	if err != nil {
		return err
	}
	s.checks = &bounded{ap: ap, bound: bound}
	return nil
}

// perPrimary sends each command through the half-duplex pipeline of the
// primary that serves its key's slot (the key of a script call: its first
// key), as the cluster client's slot map says. An answer that says the map
// is out of date (MOVED, ASK, TRYAGAIN during a slot move; CLUSTERDOWN,
// LOADING, READONLY while a primary changes) sends the command again
// through the cluster client, which follows it; any other failure asks the
// cluster client to reload its map.
type perPrimary struct {
	cc    *redis.ClusterClient
	opts  *redis.AutoPipelineOptions
	bound time.Duration
	// deadlines bound a check's whole wait, the command it sends again
	// through cc included (follow).
	deadlines deadlines
	// following holds a slot for each command sent again through cc
	// (follow) whose answer is still to come, waited for or not.
	following chan struct{}
	// pipes holds each primary's pipeline (a go-redis node client caches
	// its own and closes it with the node), read without a lock and
	// replaced whole under mu; at most maxPrimaries entries, then it
	// starts again, so that nodes gone from the cluster are forgotten.
	pipes atomic.Pointer[map[*redis.Client]*bounded]
	mu    sync.Mutex
}

// maxPrimaries bounds perPrimary's pipelines: far above a cluster's
// primaries, low enough that the nodes of past topologies cost nothing.
const maxPrimaries = 256

// maxFollowing bounds the commands perPrimary sends again through the
// cluster client and has stopped waiting for (a goroutine each, until
// go-redis gives up on a stalled primary): beyond it a redirected check
// fails at once, as one beyond maxQueued does.
const maxFollowing = 1 << 12

func (p *perPrimary) Process(ctx context.Context, cmd redis.Cmder) error {
	var dl context.Context // nil: no read timeout, no bound
	if p.bound > 0 {
		dl = p.deadlines.next(p.bound)
	}
	pipe, err := p.pipeFor(ctx, cmd)
	if err != nil {
		return p.follow(ctx, cmd, dl)
	}
	err = pipe.processUntil(ctx, cmd, dl)
	if err == nil || redis.HasErrorPrefix(err, "NOSCRIPT") {
		return err
	}
	if _, moved := redis.IsMovedError(err); moved || redirected(err) {
		return p.follow(ctx, cmd, dl)
	}
	p.cc.ReloadState(ctx)
	return err
}

// follow sends cmd again through the cluster client, which follows MOVED
// and ASK and retries (up to four sends, each retried once after a
// timeout), and waits for its answer until dl, the deadline of the check's
// first send: a redirect to a stalled primary fails the check within one
// read timeout of its start, as a stall of its own primary does
// (docs/clusters.md#when-redis-stalls). The cluster client cannot be
// stopped mid-read, so it runs on; the command may still run later,
// counting a request nobody was answered for (bounded.Process).
func (p *perPrimary) follow(ctx context.Context, cmd redis.Cmder, dl context.Context) error {
	if dl == nil {
		return p.cc.Process(ctx, cmd)
	}
	select {
	case p.following <- struct{}{}:
	default:
		return fmt.Errorf("redisstate: %d redirected commands still waiting for Redis", cap(p.following))
	}
	done := make(chan error, 1)
	go func() {
		defer func() { <-p.following }()
		done <- p.cc.Process(ctx, cmd)
	}()
	select {
	case err := <-done:
		return err
	case <-dl.Done():
		return fmt.Errorf("redisstate: no answer from Redis within %v", p.bound)
	}
}

// redirected reports whether err is an answer after which the cluster
// client tries again (ASK, TRYAGAIN, CLUSTERDOWN, LOADING, READONLY).
func redirected(err error) bool {
	if _, ask := redis.IsAskError(err); ask {
		return true
	}
	for _, prefix := range [...]string{"TRYAGAIN", "CLUSTERDOWN", "LOADING", "READONLY"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// pipeFor returns the pipeline of the primary serving cmd's first key.
func (p *perPrimary) pipeFor(ctx context.Context, cmd redis.Cmder) (*bounded, error) {
	key, ok := firstKey(cmd)
	if !ok {
		return nil, errors.New("redisstate: a command without a key")
	}
	node, err := p.cc.MasterForKey(ctx, key)
	if err != nil {
		return nil, err
	}
	if m := p.pipes.Load(); m != nil {
		if b := (*m)[node]; b != nil {
			return b, nil
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.pipes.Load()
	if old != nil {
		if b := (*old)[node]; b != nil {
			return b, nil
		}
	}
	ap, err := node.AsyncAutoPipelineWithOptions(p.opts)
	if err != nil {
		return nil, err
	}
	m := make(map[*redis.Client]*bounded)
	if old != nil && len(*old) < maxPrimaries {
		maps.Copy(m, *old)
	}
	b := &bounded{ap: ap, bound: p.bound}
	m[node] = b
	p.pipes.Store(&m)
	return b, nil
}

// firstKey is the first key of an EVALSHA or EVAL (the key checks' and
// throttles' script: its keys share a slot).
func firstKey(cmd redis.Cmder) (string, bool) {
	args := cmd.Args()
	if len(args) < 4 {
		return "", false
	}
	switch k := args[3].(type) {
	case *string:
		return *k, true
	case string:
		return k, true
	}
	return "", false
}

// maxQueued bounds the key checks a stalled Redis leaves queued in an
// instance (a few hundred bytes each): beyond it a check fails at once
// (docs/clusters.md#when-redis-stalls). Far above what a healthy Redis
// leaves queued (a batch or two).
const maxQueued = 1 << 16

// bounded runs commands through the automatic pipeline and waits for each
// answer for bound (the connection's read timeout) at most. The pipeline
// sends one batch at a time and waits for none but its own: behind a
// stalled Redis a check would wait for the batches before its own to time
// out, then for its own — seconds, with a goroutine and the request held
// all the while (docs/clusters.md#when-redis-stalls). A check that stops
// waiting fails (503); its command may still run when Redis wakes up,
// counting a request nobody was answered.
type bounded struct {
	ap        *redis.AutoPipeliner
	bound     time.Duration
	deadlines deadlines
}

// deadlines hands out shared deadlines (deadline).
type deadlines struct{ cur atomic.Pointer[deadline] }

// deadline is a context that expires bound after from, shared by every
// check that starts in the first quarter of it: no timer per check.
type deadline struct {
	ctx    context.Context
	cancel context.CancelFunc // not called: the context expires by itself
	from   time.Time
}

func (b *bounded) Process(ctx context.Context, cmd redis.Cmder) error {
	var dl context.Context
	if b.bound > 0 { // always, as URLs go: a read timeout of 0 or below is refused (checkQuery)
		dl = b.deadlines.next(b.bound)
	}
	return b.processUntil(ctx, cmd, dl)
}

// processUntil is Process waiting until dl (nil: without a bound).
func (b *bounded) processUntil(ctx context.Context, cmd redis.Cmder, dl context.Context) error {
	f := b.ap.Submit(ctx, cmd)
	if dl == nil {
		return f.Wait()
	}
	if err := f.WaitContext(dl); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("redisstate: no answer from Redis within %v", b.bound)
		}
		return err
	}
	return nil
}

// next returns a context that expires in (3/4 bound, bound].
func (d *deadlines) next(bound time.Duration) context.Context {
	now := time.Now()
	if c := d.cur.Load(); c != nil && now.Sub(c.from) < bound/4 {
		return c.ctx
	}
	// #nosec G118 -- it expires by itself at its deadline; checks that started under it still wait on it, so nothing may cancel it sooner
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(bound))
	d.cur.Store(&deadline{ctx: ctx, cancel: cancel, from: now})
	return ctx
}

// Kind reports the shape of the deployment.
func (s *State) Kind() Kind { return s.kind }

// UseClock makes the rate limits follow now instead of the Redis server's
// clock: for tests that move time. Instances that share state must use
// one clock; in production that is the Redis server's.
func (s *State) UseClock(now func() time.Time) { s.now = now }

// Close closes the connections.
func (s *State) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	for _, sc := range s.sentinels {
		_ = sc.Close()
	}
	return s.rdb.Close()
}

// Client is the underlying client (for tests and benchmarks).
func (s *State) Client() redis.UniversalClient { return s.rdb }

// Ping reports whether Redis answers (a replica does too: readiness is
// Ready).
func (s *State) Ping(ctx context.Context) error { return s.rdb.Ping(ctx).Err() }

func random() string {
	b := make([]byte, 16)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Every key of a workspace carries the hash tag {<workspace prefix>}: they
// share one hash slot, so the script may use them together on Redis Cluster,
// and workspaces spread over the shards.
func (s *State) revKey(wsPrefix string) string { return s.prefix + "{" + wsPrefix + "}:rev" }

// appendNums appends the script's numbers (gcra.lua's ARGV[2]) to b: the
// limits, the stored day state and, unless the Redis server's clock is the
// one (one clock for every instance), now.
func (s *State) appendNums(b *strings.Builder, lm, ld, dayState int64) {
	var buf [48]byte
	nums := [6]int64{lm, ld, dayState / 1e9, dayState % 1e9}
	n := 4
	if s.now != nil {
		t := s.now().UnixNano()
		nums[4], nums[5], n = t/1e9, t%1e9, 6
	}
	for i, v := range nums[:n] {
		binary.LittleEndian.PutUint64(buf[8*i:], math.Float64bits(float64(v)))
	}
	b.Write(buf[:8*n])
}

// run evaluates the script with c's keys (one or two) and arguments, in one
// command built once: EVALSHA, and EVAL when the server does not know the
// script yet. It parses the script's one string answer (gcra.lua).
func (s *State) run(ctx context.Context, c *scriptCall, seed any) (verdict byte, vals [6]int64, token string, err error) {
	args := append(c.args[:0], evalshaArg, gcraSHA, 1, &c.key1)
	if c.key2 != "" {
		args[2] = 2
		args = append(args, &c.key2)
	}
	args = append(args, &c.seen, &c.nums, seed)
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	err = s.checks.Process(ctx, cmd)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		args[0], args[1] = evalArg, gcraSrc
		cmd = redis.NewCmd(ctx, args...)
		cmd.SetFirstKeyPos(3)
		err = s.checks.Process(ctx, cmd)
	}
	if err != nil {
		return 0, vals, "", err
	}
	res, err := cmd.Text()
	if err != nil {
		return 0, vals, "", err
	}
	if res == "" {
		return 0, vals, "", errors.New("redisstate: empty script answer")
	}
	switch verdict = res[0]; {
	case verdict == 'S':
		return verdict, vals, res[1:], nil
	case (verdict == 'A' || verdict == 'R') && len(res) == 1+8*len(vals):
		for i := range vals {
			vals[i] = int64(math.Float64frombits(binary.LittleEndian.Uint64([]byte(res[1+8*i : 9+8*i]))))
		}
		return verdict, vals, "", nil
	}
	return 0, vals, "", fmt.Errorf("redisstate: bad script answer %q", res)
}

// Allow checks the revision the cached record was read under and, when it
// is current, decides the request: one round trip.
func (s *State) Allow(ctx context.Context, c btk.KeyCheck) (btk.KeyVerdict, error) {
	lm, ld := c.Limits.Clamp()
	// A record read under an earlier epoch (before this instance met a new
	// server identity) is stale whatever its token: "" matches no token.
	epoch := s.ids.current()
	call := new(scriptCall)
	if c.Seen.Epoch == epoch {
		call.seen = c.Seen.Token
	}
	call.key1, call.key2, call.nums = s.checkStrings(c.WorkspacePrefix, c.KeyID, lm, ld, c.DayState)
	verdict, v, token, err := s.run(ctx, call, s.seedArg)
	if err != nil {
		return btk.KeyVerdict{}, err
	}
	if after := s.ids.current(); after != epoch {
		// The round trip may have run on a connection to a server met
		// meanwhile: its answer is not trusted (a counted request on a
		// failover is the price).
		return btk.KeyVerdict{Stale: true, Current: btk.Revision{Epoch: after}}, nil
	}
	if verdict == 'S' {
		return btk.KeyVerdict{Stale: true, Current: btk.Revision{Epoch: epoch, Token: token}}, nil
	}
	lim := ratelimit.Limits{PerMinute: int(lm), PerDay: int(ld)}
	d := ratelimit.Decide(lim, verdict == 'A', ratelimit.Relative{D: v[0], Frac: v[1]}, ratelimit.Relative{D: v[2], Frac: v[3]})
	if d.Allowed {
		s.record(c.KeyID, v[4]*1e9+v[5], c.Now.UnixNano())
	}
	return btk.KeyVerdict{Decision: d}, nil
}

// Current answers the workspace's current revision without counting
// anything: the key check's script, given a seen token of "" (which
// matches none), answers the current token — made when missing, as for a
// check — and stops before the limits; its second key is only read. One
// round trip, as a key check.
func (s *State) Current(ctx context.Context, wsPrefix string) (btk.Revision, error) {
	epoch := s.ids.current()
	key := s.revKey(wsPrefix)
	// The script answers a stale check before it reads the numbers.
	verdict, _, token, err := s.run(ctx, &scriptCall{key1: key, key2: key}, s.seedArg)
	if err != nil {
		return btk.Revision{}, err
	}
	if verdict != 'S' {
		return btk.Revision{}, fmt.Errorf("redisstate: the revision check answered %q", verdict)
	}
	if after := s.ids.current(); after != epoch { // as in Allow
		return btk.Revision{Epoch: after}, nil
	}
	return btk.Revision{Epoch: epoch, Token: token}, nil
}

// checkStrings returns the revision key, the state key and the numbers of
// a key check, built in one allocation.
func (s *State) checkStrings(wsPrefix, keyID string, lm, ld, dayState int64) (rev, rl, nums string) {
	var b strings.Builder
	b.Grow(2*(len(s.prefix)+len(wsPrefix)) + len(keyID) + 10 + 48)
	b.WriteString(s.prefix)
	b.WriteByte('{')
	b.WriteString(wsPrefix)
	b.WriteString("}:rev")
	n := b.Len()
	b.WriteString(s.prefix)
	b.WriteByte('{')
	b.WriteString(wsPrefix)
	b.WriteString("}:rl:")
	b.WriteString(keyID)
	m := b.Len()
	s.appendNums(&b, lm, ld, dayState)
	k := b.String()
	return k[:n], k[n:m], k[m:]
}

// record keeps an accepted request's day state and time for FlushUsage.
func (s *State) record(keyID string, dayState, at int64) {
	s.mu.Lock()
	u := s.usage[keyID]
	// Concurrent requests of a key record in any order: the latest day
	// state is the largest.
	u.Key, u.DayState, u.LastAllowed = keyID, max(u.DayState, dayState), max(u.LastAllowed, at)
	s.usage[keyID] = u
	s.mu.Unlock()
}

// A change waits for the replicas' acknowledgement in rounds of WAIT, each
// well under the connection's read timeout (Redis ends a WAIT on its
// 100 ms timer tick, late on a busy machine), for waitRounds×waitTimeout
// at most: a replica slowed by a busy machine is waited for rather than
// turned into UNAVAILABLE at the first round.
const (
	waitTimeout = 200 * time.Millisecond
	waitRounds  = 15
)

// Changed gives the workspace a new revision token: every instance's cached
// records of its keys (and its limits) are read again before their next use.
// The token has no expiry, so that no record read before it can pass after.
//
// It answers only once the token would survive the loss of the primary:
// when the primary has replicas connected, once every one of them has
// acknowledged it (WAIT); when it has none, at once — no replica can then
// be promoted with the old token but one that was disconnected, and its
// promotion gives it a new replication id, which every instance notices
// (identity.go). Under Sentinel, also only once a majority of the
// sentinels name this primary (sentinelsAgree): a primary cut off from them
// may have been replaced already. A change that did not get that far is an
// error: the caller answers UNAVAILABLE, the workspace stays on the list of
// those to tell again, and the revoke can be repeated. (The token is
// written all the same: instances on this primary see it at once.)
func (s *State) Changed(ctx context.Context, workspaceID string) error {
	if len(workspaceID) < btk.WorkspacePrefixLen {
		return fmt.Errorf("redisstate: bad workspace id %q", workspaceID)
	}
	key := s.revKey(workspaceID[:btk.WorkspacePrefixLen])
	c, err := s.primaryFor(ctx, key)
	if err != nil {
		return err
	}
	// On Redis Cluster the workspace's slot may be moving between
	// primaries: the write follows MOVED (the slot moved; the client's
	// map is older) and ASK (the token was migrated already, the slot
	// not yet) to the primary that holds the token, as key checks do
	// (docs/clusters.md#resharding-a-redis-cluster).
	asking := false
	for redirects := 0; ; redirects++ {
		err = s.change(ctx, c, key, asking)
		addr, moved := redis.IsMovedError(err)
		if !moved {
			addr, asking = redis.IsAskError(err)
		}
		if (!moved && !asking) || redirects == maxRedirects {
			return err
		}
		if c, err = s.primaryAt(ctx, addr); err != nil {
			return err
		}
	}
}

// maxRedirects bounds the MOVED and ASK answers a change follows, as the
// cluster client's MaxRedirects bounds a key check's (url.go).
const maxRedirects = 3

// change writes a new token under key on the primary c, after ASKING when
// c is importing the key's slot (an ASK redirect), and waits for c's
// replicas (Changed).
func (s *State) change(ctx context.Context, c *redis.Client, key string, asking bool) error {
	replicas, err := connectedReplicas(ctx, c)
	if err != nil {
		return err
	}
	// One connection for the write and every WAIT: WAIT counts the
	// acknowledgements of this connection's writes, and ASKING holds for
	// this connection's next command.
	conn := c.Conn()
	defer conn.Close()
	if asking {
		if err := conn.Do(ctx, "ASKING").Err(); err != nil {
			return err
		}
	}
	var primary written // for the sentinels (sentinelsAgree)
	if s.kind == Sentinel {
		info, err := conn.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		primary.runID, _ = infoField(info, "run_id")
		// The address this connection reached, as the primary sees it:
		// what the sentinels name it by, unless a NAT is in between.
		if me, err := conn.Do(ctx, "CLIENT", "INFO").Text(); err == nil {
			// laddr=::1:6379 for IPv6: the port is after the last colon.
			if la := clientInfoField(me, "laddr"); strings.LastIndexByte(la, ':') > 0 {
				i := strings.LastIndexByte(la, ':')
				primary.addr = net.JoinHostPort(la[:i], la[i+1:])
			}
		}
	}
	if err := conn.Set(ctx, key, random(), 0).Err(); err != nil {
		return err
	}
	if replicas > 0 {
		var acked int64
		for range waitRounds {
			if acked, err = conn.Do(ctx, "WAIT", replicas, waitTimeout.Milliseconds()).Int64(); err != nil {
				return err
			}
			if acked >= int64(replicas) {
				break
			}
		}
		if acked < int64(replicas) {
			return fmt.Errorf("redisstate: the change reached %d of %d replicas within %v", acked, replicas, waitRounds*waitTimeout)
		}
	}
	if s.kind == Sentinel {
		return s.sentinelsAgree(ctx, primary)
	}
	return nil
}

// written is the primary a change was written to: its run id and the
// address the connection reached ("" when unknown).
type written struct{ runID, addr string }

// clientInfoField returns a field of a CLIENT INFO answer (name=value
// pairs separated by spaces).
func clientInfoField(info, name string) string {
	for _, f := range strings.Fields(info) {
		if k, v, ok := strings.Cut(f, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// sentinelAnswer is "" when a sentinel's SENTINEL MASTER answer m names the
// primary w as the primary, not down; otherwise what it names instead. For
// a few seconds after a failover a sentinel names the new primary with no
// run id yet: it then agrees only if it names w's address, so that a change
// written on the old primary in that window is not counted as safe (it was
// answered REVOKED and lost when the old primary was demoted).
func sentinelAnswer(m map[string]string, w written) string {
	named := net.JoinHostPort(m["ip"], m["port"])
	switch {
	case m["runid"] != "" && m["runid"] != w.runID,
		m["runid"] == "" && (w.addr == "" || named != w.addr):
		return "another primary, " + named
	case strings.Contains(m["flags"], "s_down") || strings.Contains(m["flags"], "o_down"):
		return "the primary down"
	}
	return ""
}

// sentinelsAgree is nil when a majority of the URL's sentinels answer and
// name the primary w as the primary, not down (sentinelAnswer). A change is told
// only then: a partition that cut the primary (and an instance on its side)
// off from the sentinels and its replica let the sentinels promote the
// replica, while that instance's revokes were answered on the old primary
// at once (no replica connected); when the partition healed the old
// primary became a replica and the revokes were gone, while instances that
// had moved to the new primary before them accepted the revoked keys until
// the next change in the workspace. On the old primary's side a majority
// cannot be reached (a sentinel there still names the old primary, but
// alone), so the change is not told: the caller answers UNAVAILABLE and the
// workspace is told again once the sentinels answer (docs/clusters.md#failover).
func (s *State) sentinelsAgree(ctx context.Context, w written) error {
	addrs := s.sentinels
	answers := make(chan string, len(addrs))
	for _, sc := range addrs {
		go func() {
			m, err := sc.Master(ctx, s.failover.MasterName).Result()
			if err != nil {
				answers <- "no answer (" + err.Error() + ")"
				return
			}
			answers <- sentinelAnswer(m, w)
		}()
	}
	agree, need := 0, len(addrs)/2+1
	var others []string
	for range addrs {
		if a := <-answers; a == "" {
			agree++
		} else {
			others = append(others, a)
		}
		if agree >= need {
			return nil // the others' answers go to the channel's buffer
		}
		if len(others) > len(addrs)-need {
			break
		}
	}
	slices.Sort(others)
	return fmt.Errorf("redisstate: %d of %d sentinels name the primary that took the change, %d needed (the others: %s): it could be lost in a failover",
		agree, len(addrs), need, strings.Join(others, "; "))
}

// connectedReplicas reads connected_slaves from INFO replication.
func connectedReplicas(ctx context.Context, c *redis.Client) (int, error) {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return 0, err
	}
	if v, ok := infoField(info, "connected_slaves"); ok {
		return strconv.Atoi(v)
	}
	return 0, errors.New("redisstate: INFO replication without connected_slaves")
}

// infoField returns a field of an INFO answer.
func infoField(info, name string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// Warnings names what, in the Redis btk uses, breaks a guarantee without
// stopping btk:
//   - a primary with a maxmemory and an eviction policy. When memory runs
//     short it evicts keys, and an evicted rate-limit window restarts full
//     (a key gets more than its limit); an evicted token fails safe;
//   - a primary that can fail over (it has replicas, or Sentinel follows
//     it) without min-replicas-to-write. A replica still on its first sync
//     (one that just joined, often the old primary back after an earlier
//     failover) is promoted empty, and every key's windows start over:
//     measured, 73 requests accepted against a limit of 40 a minute.
//     Revocations hold either way (a new identity, docs/clusters.md#failover).
//
// btk serve logs them at start rather than refusing to start: both are
// common defaults, and limits hold until memory runs short or a failover
// meets an unsynced replica (docs/clusters.md#shared-state-in-redis).
func (s *State) Warnings(ctx context.Context) ([]string, error) {
	var mu sync.Mutex
	var out []string
	err := s.eachPrimary(ctx, func(ctx context.Context, c *redis.Client) error {
		where := "Redis"
		if s.kind == Cluster {
			where = "the Redis Cluster primary " + c.Options().Addr
		}
		var found []string
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		limit, ok := infoField(info, "maxmemory")
		policy, known := infoField(info, "maxmemory_policy")
		if ok && known && limit != "0" && policy != "noeviction" {
			found = append(found, fmt.Sprintf("%s has maxmemory %s bytes with maxmemory-policy %s: when it is full, it evicts keys, "+
				"and a key whose rate-limit window was evicted gets more than its limit; "+
				"set maxmemory-policy noeviction (docs/clusters.md#shared-state-in-redis)", where, limit, policy))
		}
		if info, err = c.Info(ctx, "replication").Result(); err != nil {
			return err
		}
		// min_slaves_good_slaves is in the answer only while
		// min-replicas-to-write is set.
		replicas, _ := infoField(info, "connected_slaves")
		_, minReplicas := infoField(info, "min_slaves_good_slaves")
		if !minReplicas && (s.kind == Sentinel || (replicas != "" && replicas != "0")) {
			found = append(found, where+" can fail over to a replica but has no min-replicas-to-write: a replica promoted "+
				"before its first sync ended holds no data, and every key's rate-limit windows start over (revocations hold); "+
				"set min-replicas-to-write 1 on the primary and its replicas (docs/clusters.md#failover)")
		}
		mu.Lock()
		out = append(out, found...)
		mu.Unlock()
		return nil
	})
	slices.Sort(out)
	return out, err
}

// Dirty returns the day states and last uses of the keys accepted since the
// previous call.
func (s *State) Dirty() []ratelimit.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.usage) == 0 {
		return nil
	}
	out := make([]ratelimit.State, 0, len(s.usage))
	for _, u := range s.usage {
		out = append(out, u)
	}
	clear(s.usage)
	return out
}

// Restore hands back states that could not be persisted.
func (s *State) Restore(states []ratelimit.State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range states {
		if u, ok := s.usage[st.Key]; ok {
			u.DayState, u.LastAllowed = max(u.DayState, st.DayState), max(u.LastAllowed, st.LastAllowed)
			s.usage[st.Key] = u
			continue
		}
		s.usage[st.Key] = st
	}
}

// Forget: a revoked key's windows expire in Redis by themselves.
func (s *State) Forget(string) {}

// Sweep: Redis expires idle windows (each state key lives until both of its
// windows are full again).
func (s *State) Sweep(time.Time) {}

// Throttle returns the password throttle on the same Redis.
func (s *State) Throttle() btk.Throttle { return throttle{s} }

type throttle struct{ s *State }

// Allow counts one attempt under key.
func (t throttle) Allow(ctx context.Context, key string, lim ratelimit.Limits, _ time.Time) (ratelimit.Decision, error) {
	lm, ld := lim.Clamp()
	var nums strings.Builder
	t.s.appendNums(&nums, lm, ld, 0)
	verdict, v, _, err := t.s.run(ctx, &scriptCall{key1: t.key(key), nums: nums.String()}, emptyArg)
	if err != nil {
		return ratelimit.Decision{}, err
	}
	return ratelimit.Decide(ratelimit.Limits{PerMinute: int(lm), PerDay: int(ld)}, verdict == 'A',
		ratelimit.Relative{D: v[0], Frac: v[1]}, ratelimit.Relative{D: v[2], Frac: v[3]}), nil
}

// Forget drops the count under key.
func (t throttle) Forget(ctx context.Context, key string) error {
	return t.s.rdb.Del(ctx, t.key(key)).Err()
}

// key is the Redis key of a throttle key: hashed, so that no email or
// address is written to Redis.
func (t throttle) key(key string) string {
	h := sha256.Sum256([]byte(key))
	return t.s.prefix + "th:" + hex.EncodeToString(h[:16])
}

func (throttle) Sweep(time.Time) {}

var (
	_ btk.KeyGate  = (*State)(nil)
	_ btk.Throttle = throttle{}
)

// Redact returns a --redis URL without its password, for logs.
func Redact(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return "redis://(unparsable URL)"
	}
	// Query parameters may hold a password too (sentinel_password), with
	// a path before them or not: any that btk.SecretParam names hides them.
	rest, query, hasQuery := strings.Cut(rest, "?")
	if hasQuery {
		query = "?" + query
		for _, p := range strings.Split(query[1:], "&") {
			if k, _, _ := strings.Cut(p, "="); btk.SecretParam(k) || strings.Contains(k, "%") {
				query = "?(parameters hidden)"
				break
			}
		}
	}
	authority, path, hasPath := strings.Cut(rest, "/")
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		if user, _, hasPass := strings.Cut(authority[:at], ":"); hasPass {
			authority = user + ":xxxxx" + authority[at:]
		}
	}
	if hasPath {
		path = "/" + path
	}
	return scheme + "://" + authority + path + query
}

// Wipe deletes every key under the prefix (tests; what a Redis restarted
// empty looks like to this prefix).
func (s *State) Wipe(ctx context.Context) error {
	return s.eachPrimary(ctx, func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, s.prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil || len(keys) == 0 {
			return err
		}
		for _, k := range keys { // one by one: keys of many slots
			if err := c.Del(ctx, k).Err(); err != nil {
				return err
			}
		}
		return nil
	})
}
