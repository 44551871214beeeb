package redisstate

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Redis that answers but refuses writes (an old primary come back as a
// replica) is not ready, although it answers PING (docs/security.md); once
// it accepts writes again it is.
func TestReadyNeedsWrites(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (Debian package redis-server): skipping")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	s, err := Open("redis://127.0.0.1:"+port+"/0", "btktest:ready:")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for s.Ping(ctx) != nil {
		if ctx.Err() != nil {
			t.Fatal("redis-server did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("a writable Redis: %v", err)
	}
	// A replica of a primary that is not there: it answers, never writes.
	// (Told through a client of its own: btk's refuses to connect to a
	// replica.)
	admin := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port})
	defer admin.Close()
	if err := admin.Do(ctx, "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("the replica does not answer PING: %v", err)
	}
	err = s.Ready(ctx)
	if err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("a read-only replica is ready: %v", err)
	}
	if err := admin.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("a primary again: %v", err)
	}
}
