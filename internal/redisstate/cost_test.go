package redisstate

import (
	"context"
	"fmt"
	"os"
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
)

// TestCostPerCheck measures (BTK_COST=1; not a check, a measurement) the
// CPU one key check costs: in this process (the client side of btk), in
// the Redis server processes (/proc), and in Redis's own accounting of the
// script (INFO commandstats), with and without the automatic pipeline, on
// a server and on a three-master cluster of its own. 32 goroutines check
// 96 keys of 96 workspaces for BTK_COST_SECONDS (default 5) each.
func TestCostPerCheck(t *testing.T) {
	if os.Getenv("BTK_COST") == "" {
		t.Skip("a measurement: set BTK_COST=1 to run it")
	}
	secs := 5
	if v, err := strconv.Atoi(os.Getenv("BTK_COST_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	one := redistest.Standalone(t)
	three := redistest.Cluster(t)
	for _, d := range []struct {
		name  string
		url   string
		nodes []*redistest.Server
	}{{"standalone", one.URL(), []*redistest.Server{one}}, {"cluster3", three.URL(), three.Nodes[:]}} {
		for _, pipe := range []bool{false, true} {
			if only := os.Getenv("BTK_COST_ONLY"); only != "" && only != fmt.Sprintf("%s/%v", d.name, pipe) {
				continue // e.g. BTK_COST_ONLY=cluster3/true, for a profile of one
			}
			s := openAt(t, d.url)
			if !pipe {
				s.checks = s.rdb
			}
			r := measure(t, s, d.nodes, time.Duration(secs)*time.Second)
			t.Logf("%-10s pipeline=%-5v checks/s %8.0f  client-us/check %6.1f  redis-us/check %6.1f  script-us/check %5.2f  cmds/check %.2f",
				d.name, pipe, r.rate, r.client, r.redis, r.script, r.cmds)
		}
	}
}

type cost struct{ rate, client, redis, script, cmds float64 }

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
	ops := float64(n.Load())
	cpu := func(ru syscall.Rusage) float64 {
		return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
	}
	hz := 100.0 // CLK_TCK on Linux
	return cost{
		rate:   ops / el.Seconds(),
		client: (cpu(ru1) - cpu(ru0)) / ops,
		redis:  float64(ticksAfter-ticksBefore) / hz * 1e6 / ops,
		script: (statsAfter.scriptUsec - statsBefore.scriptUsec) / (statsAfter.scripts - statsBefore.scripts),
		cmds:   (statsAfter.cmds - statsBefore.cmds) / ops,
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
