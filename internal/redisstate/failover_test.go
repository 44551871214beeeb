package redisstate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/ratelimit"
	"github.com/btk-project/btk/internal/redisstate/redistest"
	"github.com/btk-project/btk/internal/testproc"
)

// openAt returns a State on url whose first connection is made (Ready).
func openAt(t *testing.T, url string) *State {
	t.Helper()
	s := open(t, url, "btktest:")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("Ready on %s: %v", url, err)
	}
	return s
}

// cachedOn has inst accept a key check of ws and returns it: the record a
// later change (or a lost server) must make stale on inst.
func cachedOn(t *testing.T, inst *State) btk.KeyCheck {
	t.Helper()
	c := btk.KeyCheck{KeyID: "k", WorkspacePrefix: ws[:8], Limits: ratelimit.Limits{PerMinute: 1000, PerDay: 1000}, Now: time.Now()}
	c.Seen = current(t, inst, c)
	if v, err := inst.Allow(context.Background(), c); err != nil || !v.Allowed {
		t.Fatalf("%+v %v", v, err)
	}
	return c
}

// A change is answered only once the replica has it: right after Changed
// returns, the replica answers the new token. A replica that does not
// acknowledge makes Changed fail (the caller answers UNAVAILABLE).
func TestChangedWaitsForTheReplica(t *testing.T) {
	primary, replica := redistest.Pair(t)
	s := openAt(t, redistest.Patient(primary.URL())) // WAIT's late answer on a loaded machine is no i/o timeout
	rc := replica.Client()
	ctx := context.Background()
	for i := range 20 {
		if err := s.Changed(ctx, ws); err != nil {
			t.Fatal(err)
		}
		want, err := s.rdb.Get(ctx, s.revKey(ws[:8])).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := rc.Get(ctx, s.revKey(ws[:8])).Result(); err != nil || got != want {
			t.Fatalf("change %d answered before the replica had it: replica %q %v, primary %q", i, got, err, want)
		}
	}
	replica.Stop()
	defer replica.Continue()
	if err := s.Changed(ctx, ws); err == nil || !strings.Contains(err.Error(), "0 of 1 replicas") {
		t.Fatalf("a change the replica did not acknowledge: %v", err)
	}
}

// Pointed at a replica (an old primary back read-only), key checks fail and
// Ready fails: nothing is answered from a server that cannot take the
// change of a revoke.
func TestReplicaIsRefused(t *testing.T) {
	_, replica := redistest.Pair(t)
	s, err := Open(replica.URL(), "btktest:")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Ready(ctx); err == nil {
		t.Fatal("Ready on a replica")
	}
	v, err := s.Allow(ctx, btk.KeyCheck{KeyID: "k", WorkspacePrefix: ws[:8], Limits: ratelimit.Limits{PerMinute: 5, PerDay: 5}})
	if err == nil {
		t.Fatalf("a key check on a replica answered %+v", v)
	}
}

// A new primary that missed the last change (a lagging replica promoted, a
// server restored from an older snapshot) answers the token from before a
// revoke. The instance notices the new server identity on its new
// connection and reads its cached records again instead of trusting them.
func TestNewPrimaryMakesCacheStale(t *testing.T) {
	a, b := redistest.Standalone(t), redistest.Standalone(t)
	px := testproc.NewRelay(t, a.Addr())       // as haproxy or a virtual address in front of the primary
	inst := openAt(t, "redis://"+px.Addr+"/0") // the instance with a record cached
	other := openAt(t, a.URL())                // the instance that revokes
	ctx := context.Background()
	c := btk.KeyCheck{KeyID: "k", WorkspacePrefix: ws[:8], Limits: ratelimit.Limits{PerMinute: 100, PerDay: 100}, Now: time.Now()}
	c.Seen = current(t, inst, c)
	if v, err := inst.Allow(ctx, c); err != nil || !v.Allowed {
		t.Fatalf("%+v %v", v, err)
	}
	if err := other.Changed(ctx, ws); err != nil { // the revoke
		t.Fatal(err)
	}
	// b is the replica that never had the revoke: the token from before.
	if err := b.Client().Set(ctx, inst.revKey(ws[:8]), c.Seen.Token, 0).Err(); err != nil {
		t.Fatal(err)
	}
	px.Switch(b.Addr()) // the failover: the connections to the old primary close
	var v btk.KeyVerdict
	var err error
	for range 3 { // the first try may fail on a connection the switch closed
		if v, err = inst.Allow(ctx, c); err == nil {
			break
		}
	}
	if err != nil || !v.Stale {
		t.Fatalf("after a failover to a server with the old token, a record cached before the revoke: %+v %v", v, err)
	}
	if v.Current.Epoch == c.Seen.Epoch {
		t.Fatalf("the epoch did not move: %+v", v.Current)
	}
}

// A server that changes identity under a connection btk keeps (here a
// primary made a replica and promoted again: a new master_replid, its data
// and every client connection kept) is noticed by the poller of
// identity.go, not by a new connection: within a few watchEvery the epoch
// moves on and a record cached before is read again.
func TestPollerNoticesNewIdentity(t *testing.T) {
	srv := redistest.Standalone(t)
	inst := openAt(t, srv.URL())
	admin := srv.Client()
	ctx := context.Background()
	c := btk.KeyCheck{KeyID: "k", WorkspacePrefix: ws[:8], Limits: ratelimit.Limits{PerMinute: 100, PerDay: 100}, Now: time.Now()}
	c.Seen = current(t, inst, c)
	if v, err := inst.Allow(ctx, c); err != nil || !v.Allowed {
		t.Fatalf("%+v %v", v, err)
	}
	connections := func() string {
		info, err := admin.Info(ctx, "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_connections_received:"); ok {
				return v
			}
		}
		t.Fatal("INFO stats without total_connections_received")
		return ""
	}
	before := connections()
	// A replica of a server that does not answer keeps its data; promoted
	// again, it has a new replication id.
	for _, args := range [][]any{{"REPLICAOF", "127.0.0.1", "1"}, {"REPLICAOF", "NO", "ONE"}} {
		if err := admin.Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * watchEvery)
	for inst.ids.current() == c.Seen.Epoch {
		if time.Now().After(deadline) {
			t.Fatalf("the epoch did not move within %v of the new identity", 10*watchEvery)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if after := connections(); after != before {
		t.Fatalf("btk opened connections (%s, then %s): the new identity was not the poller's to notice", before, after)
	}
	v, err := inst.Allow(ctx, c)
	if err != nil || !v.Stale || v.Current.Epoch == c.Seen.Epoch {
		t.Fatalf("a record cached before the new identity: %+v %v", v, err)
	}
	c.Seen = v.Current
	if v, err := inst.Allow(ctx, c); err != nil || !v.Allowed {
		t.Fatalf("the record read again: %+v %v", v, err)
	}
}

// A revoke answered while the only replica was disconnected (the primary
// counts no replica, so it waits for none), then the primary dies and the
// sentinels promote that replica, which never had the revoke: it answers
// the token from before. The promotion gives it a new replication id, so
// the instance that had the key cached reads it again instead of trusting
// the old token.
func TestFailoverToReplicaThatMissedTheRevoke(t *testing.T) {
	g := redistest.Sentinels(t)
	inst, other := openAt(t, g.URL()), openAt(t, g.URL())
	c := cachedOn(t, inst)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The replica cannot link again (the primary has no password, so its
	// AUTH fails), and its link is cut.
	g.Replica.Do(t, "CONFIG", "SET", "masterauth", "not-the-password")
	g.Primary.Do(t, "CLIENT", "KILL", "TYPE", "replica")
	waitConnectedReplicas(t, g.Primary, 0)
	if err := other.Changed(ctx, ws); err != nil { // the revoke, answered at once
		t.Fatal(err)
	}
	if tok, err := g.Replica.Client().Get(ctx, inst.revKey(ws[:8])).Result(); err != nil || tok != c.Seen.Token {
		t.Fatalf("the replica was meant to miss the revoke: %q %v (token before %q)", tok, err, c.Seen.Token)
	}
	g.Primary.Kill()
	g.WaitPromoted(t)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		v, err := inst.Allow(ctx, c)
		if err == nil && !v.Stale {
			t.Fatalf("after a failover to the replica that missed the revoke, the record cached before it was trusted: %+v", v)
		}
		if err == nil {
			c.Seen = v.Current
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer 30 s after the promotion: %v", err)
		}
	}
	// Read again under the revision answered (as the service does, up to
	// three times): accepted.
	for i := 0; ; i++ {
		v, err := inst.Allow(ctx, c)
		if err == nil && v.Allowed {
			break
		}
		if err != nil || !v.Stale || i == 2 {
			t.Fatalf("the record read again, on the new primary: %+v %v", v, err)
		}
		c.Seen = v.Current
	}
}

// Under Sentinel a change is told only once a majority of the sentinels
// name the primary that took it. A partition put an instance on the old
// primary's side, cut off from its replica and the sentinels, which
// promoted the replica: its revoke was answered at once (no replica
// connected) and lost when the partition healed, while the instances that
// had moved to the new primary already accepted the key until the next
// change in the workspace. Here two of the three sentinels stop answering:
// the change is written on the primary but not told (the service answers
// UNAVAILABLE and tells it again later); with them back, it is told.
func TestChangeToldOnlyWhenTheSentinelsAgree(t *testing.T) {
	g := redistest.Sentinels(t)
	s := openAt(t, g.URL()+"?read_timeout=300ms")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Changed(ctx, ws); err != nil {
		t.Fatalf("a change with every sentinel answering: %v", err)
	}
	before, err := g.Primary.Client().Get(ctx, s.revKey(ws[:8])).Result()
	if err != nil {
		t.Fatal(err)
	}
	g.Sentinels[0].Stop()
	g.Sentinels[1].Stop()
	err = s.Changed(ctx, ws)
	g.Sentinels[0].Continue()
	g.Sentinels[1].Continue()
	if err == nil || !strings.Contains(err.Error(), "1 of 3 sentinels name the primary that took the change, 2 needed") {
		t.Fatalf("a change with two of three sentinels silent: %v", err)
	}
	if tok, err := g.Primary.Client().Get(ctx, s.revKey(ws[:8])).Result(); err != nil || tok == before {
		t.Fatalf("the primary does not hold the change: %q %v (before %q)", tok, err, before)
	}
	if err := s.Changed(ctx, ws); err != nil {
		t.Fatalf("a change with the sentinels back: %v", err)
	}
}

// For a few seconds after a failover every sentinel names the new primary
// with no run id yet. A change written on the old primary in that window
// (an instance not yet moved) was counted as agreed, answered REVOKED, and
// lost when the old primary was demoted, while two instances on the new
// primary accepted the key for minutes. A sentinel with no run id agrees
// only if it names the address the change was written to.
func TestSentinelWithoutRunIDAgreesOnlyByAddress(t *testing.T) {
	old := written{runID: "aaaa", addr: "127.0.0.1:28622"}
	for _, tc := range []struct {
		m    map[string]string
		w    written
		want string
	}{
		{map[string]string{"ip": "127.0.0.1", "port": "28622", "runid": "aaaa", "flags": "master"}, old, ""},
		{map[string]string{"ip": "127.0.0.1", "port": "28621", "runid": "bbbb", "flags": "master"}, old, "another primary, 127.0.0.1:28621"},
		// Just after +switch-master: the new primary, no run id yet.
		{map[string]string{"ip": "127.0.0.1", "port": "28621", "runid": "", "flags": "master"}, old, "another primary, 127.0.0.1:28621"},
		{map[string]string{"ip": "127.0.0.1", "port": "28621", "runid": "", "flags": "master"}, written{runID: "bbbb", addr: "127.0.0.1:28621"}, ""},
		// The address unknown (CLIENT INFO refused): no run id is no agreement.
		{map[string]string{"ip": "127.0.0.1", "port": "28621", "runid": "", "flags": "master"}, written{runID: "bbbb"}, "another primary, 127.0.0.1:28621"},
		{map[string]string{"ip": "127.0.0.1", "port": "28622", "runid": "aaaa", "flags": "master,s_down"}, old, "the primary down"},
	} {
		if got := sentinelAnswer(tc.m, tc.w); got != tc.want {
			t.Errorf("sentinelAnswer(%v, %+v) = %q, want %q", tc.m, tc.w, got, tc.want)
		}
	}
	if got := clientInfoField("id=7 addr=127.0.0.1:50412 laddr=127.0.0.1:28622 fd=9 name=", "laddr"); got != "127.0.0.1:28622" {
		t.Errorf("laddr of CLIENT INFO: %q", got)
	}
}

// waitConnectedReplicas waits until the primary counts n replicas connected.
func waitConnectedReplicas(t *testing.T, primary *redistest.Server, n int) {
	t.Helper()
	admin := primary.Client()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		got, err := connectedReplicas(ctx, admin)
		cancel()
		if err == nil && got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the primary counts %d replicas (%v), want %d", got, err, n)
		}
	}
}

// A redis+sentinel:// URL whose primary name the sentinels do not monitor
// (a typo) is named as such at start, not as sentinels that cannot be
// reached (go-redis's own words for it).
func TestSentinelUnknownPrimaryNamed(t *testing.T) {
	g := redistest.Sentinels(t)
	u := strings.Replace(g.URL(), "redis+sentinel://", "redis+sentinel://:hunter2@", 1)
	u = strings.Replace(u, "/"+g.Master+"/", "/"+g.Master+"x/", 1)
	s, err := Open(u, "btktest:")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = s.Ready(ctx)
	if err == nil || !strings.Contains(err.Error(), `monitor no primary named "`+g.Master+`x"`) || strings.Contains(err.Error(), "unreachable") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("sentinels that do not know the name: %v", err)
	}
}

// A Redis Cluster primary restarted with older data (the token from before
// a revoke, as a restore from an older snapshot would bring back): the
// connection btk's pipeline to that primary opens anew reads its new
// identity, and the record cached before the revoke is read again.
func TestClusterPrimaryRestartedWithOlderData(t *testing.T) {
	g := redistest.Cluster(t)
	inst, other := openAt(t, g.URL()), openAt(t, g.URL())
	c := cachedOn(t, inst)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := other.Changed(ctx, ws); err != nil { // the revoke
		t.Fatal(err)
	}
	owner := g.Owner(t, g.Slot(t, inst.revKey(ws[:8])))
	owner.Restart() // its cluster configuration kept (nodes.conf), its data gone
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if info, _ := owner.Do(t, "CLUSTER", "INFO").(string); strings.Contains(info, "cluster_state:ok") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the restarted primary does not rejoin the cluster")
		}
	}
	owner.Do(t, "SET", inst.revKey(ws[:8]), c.Seen.Token)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		v, err := inst.Allow(ctx, c)
		if err == nil && !v.Stale {
			t.Fatalf("a primary restarted with the token from before a revoke: the record cached before it was trusted: %+v", v)
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer 30 s after the restart: %v", err)
		}
	}
}

// The primary hangs (SIGSTOP) rather than dies: the sentinels promote the
// replica, a revoke is answered by the new primary, then the old one wakes
// up still believing itself primary, with the token from before, until the
// sentinels make it a replica. The instance that had the key cached (and
// had not heard of the failover: its connections to the old primary were
// idle) never accepts it: its poller met a primary that did not answer, so
// what it cached before is read again. (The sentinels take 3 s to declare
// the primary down, above the poller's 2 s at most: see
// docs/clusters.md#failover.)
func TestHungPrimaryWakesUpAfterFailover(t *testing.T) {
	g := redistest.Sentinels(t, "sentinel down-after-milliseconds btkprimary 3000")
	inst, other := openAt(t, g.URL()), openAt(t, g.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := btk.KeyCheck{KeyID: "k", WorkspacePrefix: ws[:8], Limits: ratelimit.Limits{PerMinute: 100000, PerDay: 100000}, Now: time.Now()}
	c.Seen = current(t, inst, c)
	if v, err := inst.Allow(ctx, c); err != nil || !v.Allowed {
		t.Fatalf("%+v %v", v, err)
	}
	g.Primary.Stop()
	g.WaitPromoted(t)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := other.Changed(ctx, ws) // the revoke, on the new primary
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no revoke answered 30 s after the promotion: %v", err)
		}
	}
	g.Primary.Continue()
	// Until the sentinels have made the old primary a replica, and a while
	// after: never decided under the revision from before the revoke.
	var answered, failed int
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		v, err := inst.Allow(ctx, c)
		switch {
		case err != nil:
			failed++
		case !v.Stale:
			t.Fatalf("a record cached before the revoke was decided after the old primary woke up: %+v", v)
		default:
			answered++
		}
	}
	g.Primary.WaitRole(t, "slave")
	t.Logf("%d stale answers, %d failures", answered, failed)
	if answered == 0 {
		t.Fatalf("no answer in 2 s after the old primary woke up (%d failures)", failed)
	}
}

// A primary that hangs (SIGSTOP) and answers again, keeping the
// connections btk holds to it: meanwhile a revoke may have been answered
// elsewhere (a new primary this instance has not heard of). The poller's
// first failure moves the epoch on, so the record cached before the hang is
// read again rather than trusted on the connection that survived it.
func TestHungPrimaryMakesCacheStale(t *testing.T) {
	srv := redistest.Standalone(t)
	inst := openAt(t, srv.URL())
	ctx := context.Background()
	c := cachedOn(t, inst)
	srv.Stop()
	for deadline := time.Now().Add(5 * watchEvery); inst.ids.current() == c.Seen.Epoch && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	srv.Continue()
	for i := 0; ; i++ {
		v, err := inst.Allow(ctx, c)
		if err == nil && !v.Stale {
			t.Fatalf("after the primary hung and answered again, the record cached before was trusted: %+v", v)
		}
		if err == nil {
			break
		}
		if i == 20 {
			t.Fatalf("no answer after the primary answered again: %v", err)
		}
	}
}

// The split-brain window of docs/clusters.md#failover, narrowed by
// min-replicas-to-write 1: a primary hangs (SIGSTOP), the sentinels promote
// its replica, and it wakes up still a primary, with no replica, until the
// sentinels demote it. An instance that has not heard of the failover (here
// one that follows the old primary's own address) reads its record again
// under the old primary's token, then a revoke is answered by the new
// primary. Without the setting, the old primary decides that instance's
// checks under the token from before the revoke; with it, once it has
// noticed its replica gone, it refuses their write (NOREPLICAS): no check
// is decided there. It notices in its first event-loop turns after it
// wakes (the replica's closed connection is read after the acknowledgements
// the replica sent meanwhile, and freed at the end of the turn): a write in
// those turns still passes, seen once in about 30 runs on a loaded machine,
// so the test waits for it to notice. (The setting is on the old primary
// only: the promoted replica has no replica of its own until the old
// primary joins it, and must take the revoke.)
func TestMinReplicasRefusesAWokenPrimary(t *testing.T) {
	g := redistest.Sentinels(t, "sentinel down-after-milliseconds btkprimary 3000")
	g.Primary.Do(t, "CONFIG", "SET", "min-replicas-to-write", "1", "min-replicas-max-lag", "2")
	g.Primary.WaitGoodReplicas(t, 1)
	inst, other := openAt(t, g.Primary.URL()), openAt(t, g.URL())
	c := cachedOn(t, inst)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g.Primary.Stop()
	g.WaitPromoted(t)
	g.Primary.Continue()
	g.Primary.WaitGoodReplicas(t, 0)
	var stale, refused, others int
	var last error
	revoked := false
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		v, err := inst.Allow(ctx, c)
		switch {
		case err != nil && strings.Contains(err.Error(), "NOREPLICAS"):
			refused++
		case err != nil: // READONLY, or a replica refused, once demoted
			others++
			last = err
		case !v.Stale:
			t.Fatalf("the old primary, woken up with no replica, decided a check (revoked on the new primary: %v): %+v", revoked, v)
		default:
			// Read again, as the service does: the old primary's token.
			stale++
			c.Seen = v.Current
			if !revoked { // the revoke, answered by the new primary after the old one woke up
				revokeOn(t, ctx, other)
				revoked = true
			}
		}
	}
	g.Primary.WaitRole(t, "slave")
	t.Logf("%d stale answers, %d NOREPLICAS, %d other failures (last: %v)", stale, refused, others, last)
	if refused == 0 || !revoked {
		t.Fatalf("no check reached the woken primary's refusal: %d stale answers, %d other failures (last: %v)", stale, others, last)
	}
}

// revokeOn gives ws a new token through inst (a revoke), trying again for
// a while: right after a failover, inst's connections to the old primary
// are closed under it.
func revokeOn(t *testing.T, ctx context.Context, inst *State) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := inst.Changed(ctx, ws)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no revoke answered within 30 s: %v", err)
		}
	}
}
