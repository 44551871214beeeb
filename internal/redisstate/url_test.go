package redisstate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/redisstate/redistest"
)

// Every --redis form is understood; a bad one is refused with a message
// that names the fault and the forms, never Go's parse error or the
// password.
func TestParseURL(t *testing.T) {
	good := map[string]Kind{
		"redis://127.0.0.1:6379/0":                                        Standalone,
		"rediss://:secret@cache.internal:6380/2?read_timeout=1s":          Standalone,
		"redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster":         Sentinel,
		"redis+sentinel://:secret@10.0.0.1:26379/mymaster/3":              Sentinel,
		"redis+sentinel://s1:26379/m?sentinel_password=x&dial_timeout=2s": Sentinel,
		"redis+sentinel://s1:26379/m?sentinel_password=p%40ss@x":          Sentinel, // an "@" in a query value
		"redis+cluster://10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000":       Cluster,
		"rediss+cluster://:secret@10.0.0.1:7000/":                         Cluster,
	}
	for u, kind := range good {
		s, err := Open(u, "btk:")
		if err != nil {
			t.Errorf("%s: %v", u, err)
			continue
		}
		if s.Kind() != kind {
			t.Errorf("%s: %v, want %v", u, s.Kind(), kind)
		}
		s.Close()
	}
	bad := map[string]string{
		"127.0.0.1:6379":                                  "no scheme",
		"http://127.0.0.1:6379":                           `unknown scheme "http"`,
		"redis+sentinel://10.0.0.1:26379":                 "primary's name",
		"redis+sentinel://10.0.0.1:26379/":                "primary's name",
		"redis+sentinel://:secret@10.0.0.1:26379/m/x":     `database "x"`,
		"redis+sentinel://10.0.0.1:26379/m/0/extra":       "/MASTER or /MASTER/db",
		"redis+sentinel://10.0.0.1,10.0.0.2:26379/m":      `"10.0.0.1" is not host:port`,
		"redis+cluster://:secret@10.0.0.1:99999":          "not a port number",
		"redis+cluster://10.0.0.1:7000/3":                 "only database 0",
		"redis+cluster://":                                "no host:port",
		"redis+cluster://10.0.0.1:7000?read_timeout=fast": "not a duration",
		"redis+cluster://10.0.0.1:7000?db=2":              `unknown parameter "db"`,
		"redis://:secret@[::1:6379/0":                     "does not parse",
		// A password with an unescaped "/", "?" or "#": the parsers read
		// its rest as a host, a path or a query and quoted it.
		"redis://:sec?ret@127.0.0.1:6379/0":                      "not percent-encoded",
		"redis://:sec/ret@127.0.0.1:6379/0":                      "not percent-encoded",
		"redis+cluster://:sec?ret@10.0.0.1:7000":                 "not percent-encoded",
		"redis+sentinel://:sec#ret@10.0.0.1:26379,b:1/m":         "not percent-encoded",
		"redis+cluster://10.0.0.1:7000?sentinel_password=secret": "redis+sentinel:// only",
		// go-redis took these and panicked (pool sizes), or waited for
		// ever on a stalled Redis (a timeout of 0 or below).
		"redis://:secret@127.0.0.1:6379/0?pool_size=-5":           "pool_size",
		"redis://:secret@127.0.0.1:6379/0?pool_size=100000000000": "pool_size",
		"redis://127.0.0.1:6379/0?pool_size=0":                    "pool_size",
		"redis://127.0.0.1:6379/0?max_active_conns=-1":            "max_active_conns",
		"redis://:secret@127.0.0.1:6379/0?read_timeout=-5s":       "read_timeout",
		"redis://127.0.0.1:6379/0?dial_timeout=-1s":               "dial_timeout",
		"redis://127.0.0.1:6379/0?write_timeout=0":                "write_timeout",
		"redis://127.0.0.1:6379/0?pool_timeout=soon":              "pool_timeout",
	}
	for u, want := range bad {
		_, err := Open(u, "btk:")
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "redis+sentinel://[:password@]") {
			t.Errorf("%s: %v, want an error with %q and the forms", u, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error shows the password: %v", u, err)
		}
	}
	if _, err := Open("redis://127.0.0.1:6379/0", "btk{x}:"); err == nil {
		t.Error("a prefix with a hash tag of its own was accepted")
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:hunter2@127.0.0.1:1/0":                   "redis://:xxxxx@127.0.0.1:1/0",
		"redis://user:hunter2@h:1/0":                       "redis://user:xxxxx@h:1/0",
		"redis+sentinel://:hunter2@a:1,b:2/m/0":            "redis+sentinel://:xxxxx@a:1,b:2/m/0",
		"redis+cluster://a:1,b:2":                          "redis+cluster://a:1,b:2",
		"redis+sentinel://a:1/m?sentinel_password=hunter2": "redis+sentinel://a:1/m?(parameters hidden)",
		"redis+sentinel://a:1?sentinel_password=hunter2":   "redis+sentinel://a:1?(parameters hidden)",
		"redis+sentinel://a:1/m?read_timeout=1s":           "redis+sentinel://a:1/m?read_timeout=1s",
		"redis://h:1/0?read_timeout=1s&auth_token=hunter2": "redis://h:1/0?(parameters hidden)",
		"redis://h:1/0?sentinel_pass%77ord=hunter2":        "redis://h:1/0?(parameters hidden)",
		"redis://127.0.0.1:6379/0":                         "redis://127.0.0.1:6379/0",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// A rediss:// URL of a server without TLS: the handshake is never
// answered, and the message says what that most often means, not only
// "context deadline exceeded"; never the password.
// readyAt opens a State on u and returns what its first Ready says.
func readyAt(t *testing.T, u string) error {
	t.Helper()
	s, err := Open(u, "btktest:")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return s.Ready(ctx)
}

// A redis:// URL names one server: pointed at a Redis Cluster node it was
// accepted and /readyz said 200 while most workspaces answered 503 (MOVED),
// and at a Sentinel it failed with "unknown command 'evalsha'". Both are
// named, with the URL to give instead.
func TestStandaloneURLAtClusterOrSentinelNamed(t *testing.T) {
	node := redistest.Standalone(t, "cluster-enabled yes")
	g := redistest.Sentinels(t)
	for u, want := range map[string]string{
		node.URL(): "a Redis Cluster node: give --redis redis+cluster://",
		"redis://" + g.Sentinels[0].Addr() + "/0": "a Sentinel: give --redis redis+sentinel://",
	} {
		if err := readyAt(t, u); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", u, err, want)
		}
	}
}

func TestTLSToPlainServerNamed(t *testing.T) {
	srv := redistest.Standalone(t)
	for _, u := range []string{"rediss://:hunter2@" + srv.Addr() + "/0", "rediss+cluster://:hunter2@" + srv.Addr()} {
		if err := readyAt(t, u); err == nil || !strings.Contains(err.Error(), "does not speak TLS") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: %v", Redact(u), err)
		}
	}
}
