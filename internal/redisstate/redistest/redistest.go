// Package redistest starts real Redis servers for tests, on free ports of
// 127.0.0.1, and stops them when the test ends: a standalone server, a
// primary with a replica and three sentinels, and a three-master Redis
// Cluster (made by redis-cli --cluster create). A test whose programs are
// missing is skipped, naming them (Debian packages redis-server,
// redis-sentinel, redis-tools).
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/btk-project/btk/internal/testproc"
)

// Prefix returns a Redis key prefix of one test's own (btktest:<12 hex>:):
// tests share the machine's Redis (BTK_TEST_REDIS), and each keeps to its
// prefix and deletes it at its end.
func Prefix() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "btktest:" + hex.EncodeToString(b) + ":"
}

// Patient gives a Redis URL a read timeout long enough for a machine that
// runs the whole suite under -race beside other work: a key check gives up
// on Redis after the read timeout (500 ms by default) and answers 503, and
// tests of the guarantees check what is decided, not how soon a stalled
// Redis is given up on (internal/redisstate's stall tests do that). A URL
// that names its own read timeout is left as it is.
func Patient(u string) string {
	switch {
	case strings.Contains(u, "read_timeout="):
		return u
	case strings.Contains(u, "?"):
		return u + "&read_timeout=10s"
	}
	return u + "?read_timeout=10s"
}

// wait bounds every wait of this package.
const wait = 30 * time.Second

// Server is one redis-server (or redis-sentinel) process of the test.
type Server struct {
	t    testing.TB
	Port int
	Dir  string
	args []string
	bin  string

	mu    sync.Mutex
	proc  *testproc.Process // nil when killed
	admin *redis.Client     // Do's client, made at its first use
}

// Addr is host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL is the redis:// URL of the server, database 0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Client returns a client of the server alone (closed at the test's end).
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), DialTimeout: time.Second, ReadTimeout: 5 * time.Second, MaxRetries: -1, Protocol: 2})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// freePort returns a port free at the moment whose cluster bus port
// (+10000) is free too.
func freePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port
	}
	t.Fatal("no free port")
	return 0
}

// start runs bin with a config file made of conf lines (port and dir are
// added) and waits until it answers PING.
func start(t testing.TB, bin string, conf ...string) *Server {
	t.Helper()
	s := &Server{t: t, Port: freePort(t), Dir: t.TempDir(), bin: bin}
	lines := append([]string{
		"bind 127.0.0.1", "port " + strconv.Itoa(s.Port), "dir " + s.Dir,
		"save \"\"", "appendonly no", "protected-mode no", "repl-diskless-sync-delay 0",
	}, conf...)
	file := filepath.Join(s.Dir, "redis.conf")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.args = []string{file}
	s.run()
	return s
}

func (s *Server) run() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proc = testproc.Start(s.t, exec.Command(s.bin, s.args...), os.Kill) // #nosec G204 -- test support: starts the redis-server found on PATH with arguments the test chose
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	s.proc.WaitFor(s.t, s.Addr()+" to answer PING", wait, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Ping(ctx).Err() == nil
	})
}

// Pid is the process id (0 when stopped).
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Cmd.Process.Pid
}

// Kill stops the process at once (SIGKILL) and waits for it.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	_ = s.proc.Cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies too
	s.proc.End(os.Kill)
	s.proc = nil
}

// Stop pauses the process (SIGSTOP): it keeps its connections and answers
// nothing, as a hung server.
func (s *Server) Stop() { s.signal(syscall.SIGSTOP) }

// Continue resumes a stopped process.
func (s *Server) Continue() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		if err := s.proc.Cmd.Process.Signal(sig); err != nil {
			s.t.Errorf("redis-server: %v: %v", sig, err) // the test would run against a server not in the state it asked for
		}
	}
}

// Restart starts the process again with its config (after Kill): without
// persistence, it comes back empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.run()
}

// WaitRole waits until the server's replication role (INFO replication)
// is role: "master" or "slave".
func (s *Server) WaitRole(t testing.TB, role string) {
	t.Helper()
	s.waitReplication(t, "role:"+role, "is not "+role)
}

// waitReplication waits until the server's INFO replication holds want;
// past the wait the test fails with "ADDR " + failure.
func (s *Server) waitReplication(t testing.TB, want, failure string) {
	t.Helper()
	c := s.Client()
	for deadline := time.Now().Add(wait); ; time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := c.Info(ctx, "replication").Result()
		cancel()
		if err == nil && strings.Contains(info, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s: %s %v", s.Addr(), failure, info, err)
		}
	}
}

// Standalone starts one redis-server, with conf lines added to its
// configuration ("maxmemory 1mb", …).
func Standalone(t testing.TB, conf ...string) *Server {
	t.Helper()
	return start(t, testproc.Need(t, "redis-server", "redis-server"), conf...)
}

// SentinelGroup is a primary, its replica and three sentinels that watch
// it under the name Master.
type SentinelGroup struct {
	Primary, Replica *Server
	Sentinels        [3]*Server
	Master           string
}

// Sentinels starts a primary, a replica and three sentinels (quorum 2)
// that declare the primary down after half a second. conf lines are added
// to each sentinel's configuration (a later line wins: "sentinel
// down-after-milliseconds btkprimary 3000").
func Sentinels(t testing.TB, conf ...string) *SentinelGroup {
	t.Helper()
	server := testproc.Need(t, "redis-server", "redis-server")
	sentinel := testproc.Need(t, "redis-sentinel", "redis-sentinel")
	g := &SentinelGroup{Master: "btkprimary"}
	g.Primary = start(t, server)
	g.Replica = start(t, server, "replicaof 127.0.0.1 "+strconv.Itoa(g.Primary.Port), "repl-diskless-load on-empty-db")
	g.waitLinked(t, g.Primary, 1)
	for i := range g.Sentinels {
		g.Sentinels[i] = start(t, sentinel, append([]string{
			"sentinel monitor " + g.Master + " 127.0.0.1 " + strconv.Itoa(g.Primary.Port) + " 2",
			"sentinel down-after-milliseconds " + g.Master + " 500",
			"sentinel failover-timeout " + g.Master + " 5000",
			"sentinel parallel-syncs " + g.Master + " 1"}, conf...)...)
	}
	// Every sentinel knows the replica and the other sentinels.
	deadline := time.Now().Add(wait)
	for _, s := range g.Sentinels {
		c := s.Client()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			m, err := c.Do(ctx, "SENTINEL", "MASTER", g.Master).Slice()
			cancel()
			if err == nil && field(m, "num-slaves") == "1" && field(m, "num-other-sentinels") == "2" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sentinel %d does not see the group: %v %v", s.Port, m, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return g
}

// field returns a field of a SENTINEL MASTER answer (a flat list).
func field(m []any, name string) string {
	for i := 0; i+1 < len(m); i += 2 {
		if m[i] == name {
			return fmt.Sprint(m[i+1])
		}
	}
	return ""
}

// URL is the redis+sentinel:// URL of the group.
func (g *SentinelGroup) URL() string {
	var hosts []string
	for _, s := range g.Sentinels {
		hosts = append(hosts, s.Addr())
	}
	return "redis+sentinel://" + strings.Join(hosts, ",") + "/" + g.Master + "/0"
}

// waitLinked waits until the primary has n replicas online.
func (g *SentinelGroup) waitLinked(t testing.TB, primary *Server, n int) {
	t.Helper()
	c := primary.Client()
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := c.Info(ctx, "replication").Result()
		cancel()
		if err == nil && strings.Contains(info, "connected_slaves:"+strconv.Itoa(n)) && strings.Contains(info, "state=online") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica does not link to %d: %s %v", primary.Port, info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PrimaryAddr asks the first sentinel that answers which server is the
// primary.
func (g *SentinelGroup) PrimaryAddr() string {
	for _, s := range g.Sentinels {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		a, err := s.Client().Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", g.Master).StringSlice()
		cancel()
		if err == nil && len(a) == 2 {
			return a[0] + ":" + a[1]
		}
	}
	return ""
}

// WaitPromoted waits until the sentinels name the replica as primary and
// it answers as one.
func (g *SentinelGroup) WaitPromoted(t testing.TB) {
	t.Helper()
	for deadline := time.Now().Add(wait); g.PrimaryAddr() != g.Replica.Addr(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no failover to %s: the sentinels name %q", g.Replica.Addr(), g.PrimaryAddr())
		}
	}
	g.Replica.WaitRole(t, "master")
}

// ClusterGroup is a three-master Redis Cluster.
type ClusterGroup struct {
	Nodes [3]*Server
}

// Cluster starts three redis-server in cluster mode and joins them with
// redis-cli --cluster create (no replicas), then waits for cluster_state:ok.
// conf lines are added to each node's configuration (a later line wins:
// "cluster-node-timeout 60000").
func Cluster(t testing.TB, conf ...string) *ClusterGroup {
	t.Helper()
	server := testproc.Need(t, "redis-server", "redis-server")
	cli := testproc.Need(t, "redis-cli", "redis-tools")
	g := &ClusterGroup{}
	var addrs []string
	for i := range g.Nodes {
		g.Nodes[i] = start(t, server, append([]string{"cluster-enabled yes", "cluster-config-file nodes.conf",
			"cluster-node-timeout 2000", "cluster-require-full-coverage yes"}, conf...)...)
		addrs = append(addrs, g.Nodes[i].Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	// #nosec G204 -- test support: redis-cli from PATH with the test's own addresses
	out, err := exec.CommandContext(ctx, cli, append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(wait)
	for _, n := range g.Nodes {
		c := n.Client()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err := c.ClusterInfo(ctx).Result()
			cancel()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the cluster is not ok on %d: %s %v", n.Port, info, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return g
}

// URL is the redis+cluster:// URL of the cluster.
func (g *ClusterGroup) URL() string {
	var hosts []string
	for _, n := range g.Nodes {
		hosts = append(hosts, n.Addr())
	}
	return "redis+cluster://" + strings.Join(hosts, ",")
}

// Pair starts a primary and a replica of it (no sentinels). conf lines
// are added to the primary's configuration ("min-replicas-to-write 1", …).
func Pair(t testing.TB, conf ...string) (primary, replica *Server) {
	t.Helper()
	server := testproc.Need(t, "redis-server", "redis-server")
	primary = start(t, server, conf...)
	replica = start(t, server, "replicaof 127.0.0.1 "+strconv.Itoa(primary.Port))
	(&SentinelGroup{}).waitLinked(t, primary, 1)
	return primary, replica
}

// WaitGoodReplicas waits until a primary with min-replicas-to-write counts
// n good replicas (INFO replication's min_slaves_good_slaves): the count
// its writes are refused or accepted by. Redis refreshes it when a replica
// comes online or its link closes, and once a second for the lag.
func (s *Server) WaitGoodReplicas(t testing.TB, n int) {
	t.Helper()
	s.waitReplication(t, "min_slaves_good_slaves:"+strconv.Itoa(n)+"\r\n",
		"does not count "+strconv.Itoa(n)+" good replicas (is min-replicas-to-write set?)")
}

// Slot returns the hash slot of key.
func (g *ClusterGroup) Slot(t testing.TB, key string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	slot, err := g.Nodes[0].Client().ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return int(slot)
}

// Owner returns the node that serves slot.
func (g *ClusterGroup) Owner(t testing.TB, slot int) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	shards, err := g.Nodes[0].Client().ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if int(r.Start) > slot || slot > int(r.End) {
				continue
			}
			for _, node := range sh.Nodes {
				if node.Role != "master" {
					continue
				}
				for _, n := range g.Nodes { // by port: every node is on 127.0.0.1
					if strings.HasSuffix(n.Addr(), ":"+strconv.FormatInt(node.Port, 10)) {
						return n
					}
				}
			}
		}
	}
	t.Fatalf("no node serves slot %d: %+v", slot, shards)
	return nil
}

// ID returns a cluster node's id (CLUSTER MYID).
func (s *Server) ID(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	id, err := s.Client().Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Do runs one command on the server, failing the test on an error.
func (s *Server) Do(t testing.TB, args ...any) any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s.mu.Lock()
	if s.admin == nil {
		s.admin = s.Client()
	}
	c := s.admin
	s.mu.Unlock()
	v, err := c.Do(ctx, args...).Result()
	if err != nil {
		t.Fatalf("%v on %s: %v", args, s.Addr(), err)
	}
	return v
}
