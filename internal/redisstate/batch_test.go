package redisstate

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/ratelimit"
	"github.com/redis/go-redis/v9"
)

// A measured alternative to the automatic pipeline (TestCostPerCheck,
// "batched"; docs/clusters.md#what-a-key-check-costs): btk's own batches,
// one script call (testdata/gcra_batch.lua) for the key checks that arrive
// while the previous call to their Redis master is in flight, one sender
// per master, no timer. It plugs in as State.checks: it takes the key
// checks' commands apart and answers each from its batch's answer; any
// other command, and every check of a batch that failed, goes on its own
// through the pipeline.

//go:embed testdata/gcra_batch.lua
var gcraBatchSource string

var (
	gcraBatch    = redis.NewScript(gcraBatchSource)
	gcraBatchSHA = any(gcraBatch.Hash())
	gcraBatchSrc = any(gcraBatchSource)
	zeroArg      = any(0)
)

const (
	// maxBatch bounds the checks of one call.
	maxBatch = 64
	// maxQueue bounds the checks waiting for a master; past it a check
	// goes on its own.
	maxQueue = 4096
)

// batcher sends key checks in batches, one sender per master.
type batcher struct {
	seed   any
	next   processor     // the pipeline: everything not batched
	single *group        // a server or a Sentinel primary
	groups sync.Map      // Redis Cluster: *redis.Client of a master → *group
	mu     sync.Mutex    // held to make a group
	ngroup int           // groups made (a bound)
	stop   chan struct{} // ends the senders
	master func(key string) (*redis.Client, error)
	// calls and batched count the calls sent and the checks they carried.
	calls, batched atomic.Int64
}

// pending is one key check waiting for its batch.
type pending struct {
	key1, key2, seen, nums *string
	// state: 0 queued, 1 taken by the sender, 2 given up by its caller.
	state atomic.Int32
	done  chan struct{}
	res   string
	err   error
	// alone: the batch failed; the check is to be made on its own.
	alone bool
}

// group is one master's queue and its sender.
type group struct {
	b     *batcher
	c     processor
	mu    sync.Mutex
	queue []*pending
	wake  chan struct{}
}

// newBatcher batches the key checks of s; it stops with s.
func newBatcher(s *State) *batcher {
	b := &batcher{seed: s.seedArg, next: s.checks, stop: make(chan struct{})}
	go func() {
		<-s.stop
		close(b.stop)
	}()
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		b.master = func(key string) (*redis.Client, error) { return cc.MasterForKey(context.Background(), key) }
	} else {
		b.single = b.newGroup(s.rdb)
	}
	return b
}

func (b *batcher) newGroup(c processor) *group {
	g := &group{b: b, c: c, wake: make(chan struct{}, 1)}
	go g.run()
	return g
}

// groupFor returns the group of the master of key, nil when it is not
// known or too many were made.
func (b *batcher) groupFor(key string) *group {
	if b.single != nil {
		return b.single
	}
	c, err := b.master(key)
	if err != nil {
		return nil
	}
	if g, ok := b.groups.Load(c); ok {
		return g.(*group)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if g, ok := b.groups.Load(c); ok {
		return g.(*group)
	}
	if b.ngroup >= 64 { // masters are few; a bound all the same
		return nil
	}
	b.ngroup++
	g := b.newGroup(c)
	b.groups.Store(c, g)
	return g
}

// Process answers a key check's command (State.run's: EVALSHA sha 2 rev
// state seen nums seed) from its master's next batch.
func (b *batcher) Process(ctx context.Context, cmd redis.Cmder) error {
	args := cmd.Args()
	c, ok := cmd.(*redis.Cmd)
	if !ok || len(args) != 8 || args[2] != 2 {
		return b.next.Process(ctx, cmd)
	}
	p := &pending{done: make(chan struct{})}
	p.key1, _ = args[3].(*string)
	p.key2, _ = args[4].(*string)
	p.seen, _ = args[5].(*string)
	p.nums, _ = args[6].(*string)
	if p.key1 == nil || p.key2 == nil || p.seen == nil || p.nums == nil || *p.key1 == *p.key2 {
		return b.next.Process(ctx, cmd)
	}
	g := b.groupFor(*p.key1)
	if g == nil {
		return b.next.Process(ctx, cmd)
	}
	g.mu.Lock()
	if len(g.queue) >= maxQueue {
		g.mu.Unlock()
		return b.next.Process(ctx, cmd)
	}
	g.queue = append(g.queue, p)
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		// Not yet taken: it is never sent. Taken: the sender does not
		// wait for its caller, who leaves.
		p.state.CompareAndSwap(0, 2)
		c.SetErr(ctx.Err())
		return ctx.Err()
	}
	if p.alone {
		return b.next.Process(ctx, cmd)
	}
	if p.err != nil {
		c.SetErr(p.err)
		return p.err
	}
	c.SetVal(p.res)
	return nil
}

// run sends the group's batches, one at a time, until the State closes.
func (g *group) run() {
	batch := make([]*pending, 0, maxBatch)
	args := make([]any, 0, 4+4*maxBatch)
	for {
		select {
		case <-g.wake:
		case <-g.b.stop:
			g.fail(redis.ErrClosed)
			return
		}
		for {
			batch = batch[:0]
			g.mu.Lock()
			n := 0
			for _, p := range g.queue {
				if len(batch) == maxBatch {
					break
				}
				n++
				if p.state.CompareAndSwap(0, 1) {
					batch = append(batch, p)
				}
			}
			rest := copy(g.queue, g.queue[n:])
			clear(g.queue[rest:])
			g.queue = g.queue[:rest]
			g.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			args = g.send(batch, args)
		}
	}
}

var errBatchAnswer = errors.New("redisstate: the batch answered badly")

// send makes one call for batch and hands each check its answer.
func (g *group) send(batch []*pending, args []any) []any {
	args = append(args[:0], evalshaArg, gcraBatchSHA, zeroArg, g.b.seed)
	for _, p := range batch {
		args = append(args, p.key1, p.key2, p.seen, p.nums)
	}
	g.b.calls.Add(1)
	g.b.batched.Add(int64(len(batch)))
	ctx := context.Background()
	cmd := redis.NewCmd(ctx, args...)
	err := g.c.Process(ctx, cmd)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		args[0], args[1] = evalArg, gcraBatchSrc
		cmd = redis.NewCmd(ctx, args...)
		err = g.c.Process(ctx, cmd)
	}
	clear(args)
	var answers []any
	if err == nil {
		answers, err = cmd.Slice()
		if err == nil && len(answers) != len(batch) {
			err = errBatchAnswer
		}
	}
	for i, p := range batch {
		if err != nil {
			// The script failed before it wrote anything
			// (gcra_batch.lua), or the call may not have reached Redis:
			// each check goes on its own, through the client that
			// follows redirections.
			p.alone = true
		} else if s, ok := answers[i].(string); ok {
			p.res = s
		} else {
			p.alone = true
		}
		close(p.done)
	}
	return args
}

// fail answers every queued check with err.
func (g *group) fail(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.queue {
		if p.state.CompareAndSwap(0, 1) {
			p.err = err
			close(p.done)
		}
	}
	g.queue = nil
}

// The batch script decides as gcra.lua does, check for check, in the order
// of the batch: the same random batches (several checks of one key, of one
// workspace, missing and stale tokens, limits that refuse, a clock that
// moves) run through both on two prefixes, and the answers and the stored
// states are the same, byte for byte.
func TestBatchScriptMatchesScript(t *testing.T) {
	url := testURL(t)
	one, many := open(t, url, testPrefix(t, url)), open(t, url, testPrefix(t, url))
	now := t0
	for _, s := range []*State{one, many} {
		s.UseClock(func() time.Time { return now })
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	tokens := [2]map[string]string{{}, {}} // each prefix's tokens by workspace
	limits := []ratelimit.Limits{{PerMinute: 3, PerDay: 5}, {PerMinute: 2, PerDay: 1 << 30}, {PerMinute: 1 << 30, PerDay: 4}, {PerMinute: 7, PerDay: 9}}
	verdicts := map[byte]int{}
	for round := range 200 {
		now = now.Add(time.Duration(rng.IntN(40)) * time.Second)
		if rng.IntN(20) == 0 { // tokens lost: both make new ones
			for i, s := range []*State{one, many} {
				if err := s.Wipe(ctx); err != nil {
					t.Fatal(err)
				}
				clear(tokens[i])
			}
		}
		n := 1 + rng.IntN(12)
		var batch []any
		var singles [][]any
		for range n {
			ws := fmt.Sprintf("ws%06d", rng.IntN(3))
			key := fmt.Sprintf("k%d", rng.IntN(3))
			lim := limits[rng.IntN(len(limits))]
			stale := rng.IntN(8) == 0
			var dayState int64
			if rng.IntN(4) == 0 {
				dayState = now.Add(time.Duration(rng.IntN(20)) * time.Hour).UnixNano()
			}
			lm, ld := lim.Clamp()
			for i, s := range []*State{one, many} {
				rk, sk, nums := s.checkStrings(ws, key, lm, ld, dayState)
				seen := tokens[i][ws]
				if stale {
					seen = "old"
				}
				if i == 0 {
					singles = append(singles, []any{rk, sk, seen, nums})
				} else {
					batch = append(batch, rk, sk, seen, nums)
				}
			}
		}
		got, err := many.rdb.Eval(ctx, gcraBatchSource, nil, append([]any{many.seed}, batch...)...).Slice()
		if err != nil || len(got) != n {
			t.Fatalf("round %d: %v %v", round, got, err)
		}
		for i, a := range singles {
			want, err := one.rdb.Eval(ctx, gcraSource, []string{a[0].(string), a[1].(string)}, a[2], a[3], one.seed).Text()
			if err != nil {
				t.Fatal(err)
			}
			g := got[i].(string)
			verdicts[g[0]]++
			ws := a[0].(string)[len(one.prefix)+1 : len(one.prefix)+9]
			if want[0] == 'S' {
				tokens[0][ws] = want[1:]
				if g[0] != 'S' {
					t.Fatalf("round %d check %d: batch %q, alone %q", round, i, g, want)
				}
				tokens[1][ws] = g[1:]
				continue
			}
			if g != want {
				t.Fatalf("round %d check %d: batch %q, alone %q", round, i, g, want)
			}
		}
		for _, a := range singles {
			sk := a[1].(string)
			w, _ := one.rdb.Get(ctx, sk).Result()
			g, _ := many.rdb.Get(ctx, many.prefix+sk[len(one.prefix):]).Result()
			if g != w {
				t.Fatalf("round %d: state of %s differs", round, sk)
			}
		}
	}
	t.Logf("accepted %d, refused %d, stale %d", verdicts['A'], verdicts['R'], verdicts['S'])
}

// Concurrent checks of one key through batches, from three instances,
// accept exactly the limit.
func TestBatchedExactUnderConcurrency(t *testing.T) {
	url := testURL(t)
	prefix := testPrefix(t, url)
	now := time.Now()
	var inst [3]*State
	for i := range inst {
		inst[i] = open(t, url, prefix)
		inst[i].UseClock(func() time.Time { return now })
		inst[i].checks = newBatcher(inst[i])
	}
	const L, N = 50, 600
	c := btk.KeyCheck{KeyID: "key", WorkspacePrefix: "0123abcd", Limits: ratelimit.Limits{PerMinute: L, PerDay: 1000}, Now: now}
	var seen [3]btk.Revision
	for i := range inst {
		seen[i] = current(t, inst[i], c)
	}
	var accepted, refused atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, N)
	for i := range N {
		wg.Go(func() {
			c := c
			c.Seen = seen[i%3]
			v, err := inst[i%3].Allow(context.Background(), c)
			switch {
			case err != nil:
				errs <- err
			case v.Stale:
				errs <- fmt.Errorf("stale: %+v", v)
			case v.Allowed:
				accepted.Add(1)
			default:
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if accepted.Load() != L || refused.Load() != N-L {
		t.Fatalf("accepted %d refused %d, want %d and %d", accepted.Load(), refused.Load(), L, N-L)
	}
	for i, s := range inst {
		b := s.checks.(*batcher)
		t.Logf("instance %d: %d checks in %d calls", i, b.batched.Load(), b.calls.Load())
	}
}
