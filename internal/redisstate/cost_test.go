package redisstate

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/ratelimit"
	"github.com/btk-project/btk/internal/redisstate/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// TestCostPerCheck measures (BTK_COST=1; not a check, a measurement) the
// CPU one key check costs: in this process (the client side of btk), in
// the Redis server processes (/proc), and in Redis's own accounting of the
// script (INFO commandstats, per check: a call may check many keys),
// through each client below, on a server and
// on a three-master cluster of its own. 32 goroutines check 96 keys of 96
// workspaces for BTK_COST_SECONDS (default 5) each, BTK_COST_ROUNDS
// (default 1) times, the clients alternated in each round.
func TestCostPerCheck(t *testing.T) {
	if os.Getenv("BTK_COST") == "" {
		t.Skip("a measurement: set BTK_COST=1 to run it")
	}
	secs, rounds := 5, 1
	if v, err := strconv.Atoi(os.Getenv("BTK_COST_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	if v, err := strconv.Atoi(os.Getenv("BTK_COST_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	one := redistest.Standalone(t)
	three := redistest.Cluster(t)
	for round := range rounds {
		for _, d := range []struct {
			name  string
			url   string
			nodes []*redistest.Server
		}{{"standalone", one.URL(), []*redistest.Server{one}}, {"cluster3", three.URL(), three.Nodes[:]}} {
			for _, client := range costClients {
				if only := os.Getenv("BTK_COST_ONLY"); only != "" && !strings.Contains(","+only+",", ","+d.name+"/"+client.name+",") {
					continue // e.g. BTK_COST_ONLY=cluster3/autopipeline,cluster3/rueidis
				}
				s := openAt(t, d.url)
				client.use(t, s, d.nodes)
				r := measure(t, s, d.nodes, time.Duration(secs)*time.Second)
				t.Logf("%d %-10s %-12s checks/s %6.0f  client-us/check %5.1f  redis-us/check %5.1f  script-us/check %5.2f  checks/call %4.1f  cmds/check %.2f  client-syscalls/check %.2f  redis-syscalls/check %.2f  allocs/check %4.1f",
					round+1, d.name, client.name, r.rate, r.client, r.redis, r.script, r.perCall, r.cmds, r.syscalls, r.redisSyscalls, r.allocs)
			}
		}
	}
}

// costClients are the ways of sending key checks TestCostPerCheck compares.
var costClients = []struct {
	name string
	use  func(t *testing.T, s *State, nodes []*redistest.Server)
}{
	// One command, one round trip per check.
	{"direct", func(t *testing.T, s *State, _ []*redistest.Server) { s.checks = s.rdb }},
	// go-redis's automatic pipeline, half duplex (btk's).
	{"autopipeline", func(*testing.T, *State, []*redistest.Server) {}},
	// No Redis: each key check answered at once, accepted (the others go
	// to Redis). The floor: btk's own work per check, without the wait.
	{"none", func(t *testing.T, s *State, _ []*redistest.Server) { s.checks = noRedis{s.checks} }},
	// go-redis's automatic pipeline on one held connection with a writer
	// and a reader goroutine (no pool Get, no health check per batch).
	{"fullduplex", func(t *testing.T, s *State, _ []*redistest.Server) {
		ap, err := s.rdb.AutoPipelineWithOptions(&redis.AutoPipelineOptions{FullDuplex: true})
		if err != nil {
			t.Fatal(err)
		}
		s.checks = ap
	}},
	// rueidis, whose pipelining of concurrent commands is built in.
	{"rueidis", func(t *testing.T, s *State, nodes []*redistest.Server) { useRueidis(t, s, nodes, 0) }},
	// rueidis with the flush delay its documentation suggests (20 µs).
	{"rueidis20us", func(t *testing.T, s *State, nodes []*redistest.Server) {
		useRueidis(t, s, nodes, 20*time.Microsecond)
	}},
}

func useRueidis(t *testing.T, s *State, nodes []*redistest.Server, delay time.Duration) {
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true, MaxFlushDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s.checks = rueidisChecks{c}
}

// rueidisChecks runs go-redis commands through rueidis: the script's
// arguments as strings, its answer handed back in the go-redis command
// (a cost a move to rueidis would not keep: the comparison is fair to
// go-redis).
type rueidisChecks struct{ c rueidis.Client }

func (r rueidisChecks) Process(ctx context.Context, cmd redis.Cmder) error {
	args := cmd.Args()
	ss := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			ss[i] = v
		case int:
			ss[i] = strconv.Itoa(v)
		case int64:
			ss[i] = strconv.FormatInt(v, 10)
		default:
			ss[i] = fmt.Sprint(v)
		}
	}
	nkeys, _ := strconv.Atoi(ss[2])
	res := r.c.Do(ctx, r.c.B().Arbitrary("EVALSHA", ss[1], ss[2]).Keys(ss[3:3+nkeys]...).Args(ss[3+nkeys:]...).Build())
	if err, ok := rueidis.IsRedisErr(res.Error()); ok && err.IsNoScript() {
		res = r.c.Do(ctx, r.c.B().Arbitrary("EVAL", gcraSource, ss[2]).Keys(ss[3:3+nkeys]...).Args(ss[3+nkeys:]...).Build())
	}
	c := cmd.(*redis.Cmd)
	v, err := res.ToString()
	if err != nil {
		c.SetErr(err)
		return err
	}
	c.SetVal(v)
	return nil
}

// noRedis answers every key check (State.run's command with a token seen)
// with an acceptance, at once.
type noRedis struct{ next processor }

var acceptance = func() string {
	b := make([]byte, 49)
	b[0] = 'A'
	for i := range 6 {
		binary.LittleEndian.PutUint64(b[1+8*i:], math.Float64bits(1))
	}
	return string(b)
}()

func (n noRedis) Process(ctx context.Context, cmd redis.Cmder) error {
	args := cmd.Args()
	if c, ok := cmd.(*redis.Cmd); ok && len(args) == 8 && args[2] == 2 {
		if seen, ok := args[5].(*string); ok && *seen != "" {
			c.SetVal(acceptance)
			return nil
		}
	}
	return n.next.Process(ctx, cmd)
}

type cost struct{ rate, client, redis, script, perCall, cmds, syscalls, redisSyscalls, allocs float64 }

func measure(t *testing.T, s *State, nodes []*redistest.Server, d time.Duration) cost {
	ctx := context.Background()
	checks := make([]btk.KeyCheck, 96)
	for i := range checks {
		ws := fmt.Sprintf("%08x", i*2654435761%(1<<32))
		c := btk.KeyCheck{KeyID: "key" + ws, WorkspacePrefix: ws, Limits: ratelimit.Limits{PerMinute: 1 << 40, PerDay: 1 << 40}, Now: time.Now()}
		c.Seen = current(t, s, c)
		checks[i] = c
	}
	statsBefore := commandstats(t, nodes)
	ticksBefore := ticks(nodes)
	ioBefore, redisIOBefore := syscalls(os.Getpid()), 0.0
	for _, n := range nodes {
		redisIOBefore += syscalls(n.Pid())
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	var n atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := g; time.Since(start) < d; i++ {
				v, err := s.Allow(ctx, checks[i%len(checks)])
				if err != nil || !v.Allowed {
					t.Errorf("%+v %v", v, err)
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	ticksAfter := ticks(nodes)
	statsAfter := commandstats(t, nodes)
	runtime.ReadMemStats(&ms1)
	ioAfter, redisIOAfter := syscalls(os.Getpid()), 0.0
	for _, n := range nodes {
		redisIOAfter += syscalls(n.Pid())
	}
	ops := float64(n.Load())
	cpu := func(ru syscall.Rusage) float64 {
		return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
	}
	hz := 100.0 // CLK_TCK on Linux
	return cost{
		rate:   ops / el.Seconds(),
		client: (cpu(ru1) - cpu(ru0)) / ops,
		redis:  float64(ticksAfter-ticksBefore) / hz * 1e6 / ops,
		// Per check, not per call: a call may check many keys.
		script:  (statsAfter.scriptUsec - statsBefore.scriptUsec) / ops,
		perCall: ops / max(statsAfter.scripts-statsBefore.scripts, 1),
		cmds:    (statsAfter.cmds - statsBefore.cmds) / ops,
		// The INFO calls and the poller are a few syscalls per run.
		syscalls:      (ioAfter - ioBefore) / ops,
		redisSyscalls: (redisIOAfter - redisIOBefore) / ops,
		allocs:        float64(ms1.Mallocs-ms0.Mallocs) / ops,
	}
}

type stats struct{ scripts, scriptUsec, cmds float64 }

// commandstats sums the script calls, their microseconds and every command
// over the nodes.
func commandstats(t *testing.T, nodes []*redistest.Server) stats {
	var st stats
	for _, n := range nodes {
		info, err := n.Client().Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(name, "cmdstat_") {
				continue
			}
			var calls, usec float64
			for _, f := range strings.Split(rest, ",") {
				k, v, _ := strings.Cut(f, "=")
				switch k {
				case "calls":
					calls, _ = strconv.ParseFloat(v, 64)
				case "usec":
					usec, _ = strconv.ParseFloat(v, 64)
				}
			}
			st.cmds += calls
			if name == "cmdstat_evalsha" || name == "cmdstat_eval" {
				st.scripts += calls
				st.scriptUsec += usec
			}
		}
	}
	return st
}

// syscalls returns the read and write system calls of process pid so far
// (syscr + syscw of /proc/PID/io): how well checks share a round trip, a
// count the machine's load does not blur.
func syscalls(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	var n float64
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		if k == "syscr" || k == "syscw" {
			f, _ := strconv.ParseFloat(v, 64)
			n += f
		}
	}
	return n
}

// ticks sums utime+stime of the nodes' processes.
func ticks(nodes []*redistest.Server) int64 {
	var sum int64
	for _, n := range nodes {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n.Pid()))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		sum += u + s
	}
	return sum
}

var _ = redis.Nil
