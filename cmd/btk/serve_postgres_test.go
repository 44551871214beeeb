package main

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/store/postgres/pgtest"
	"github.com/btk-project/btk/internal/testproc"
)

// docs/clusters.md#postgresql: on PostgreSQL without --redis, one instance only. A second
// `btk serve` on the same database refuses to start and says to give --redis;
// once the first has stopped, it starts.
func TestServePostgresSecondInstanceRefuses(t *testing.T) {
	parallelUnlessShort(t, "starts btk serve processes")
	db := pgtest.URL(t)
	first := startServe(t, db)

	// The second runs in this process, bounded: if it wrongly started it
	// would serve until the context ends and exit 0.
	second := func() (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var out bytes.Buffer
		code := run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--db", db}, strings.NewReader(""), &out, &out)
		return code, out.String()
	}
	code, out := second()
	if code == 0 || !strings.Contains(out, "--redis") {
		t.Fatalf("second instance without --redis: exit %d, output:\n%s\nwant a refusal naming --redis", code, out)
	}
	if strings.Contains(out, "password") && strings.Contains(out, "created platform admin") {
		t.Fatalf("the refused instance bootstrapped:\n%s", out)
	}
	// The first one still answers.
	first.login()
	if err := first.stop(); err != nil {
		t.Fatalf("first instance: %v\n%s", err, first.Out.String())
	}
	again := startServe(t, db)
	again.login()
}

// docs/clusters.md#postgresql: a lone instance whose lock on the
// database ended with its session (as in a PostgreSQL restart) refuses key
// checks while it is lost, and forgets what it cached when it takes the lock
// back: a key that another instance, started meanwhile, revoked is never
// accepted again. (It was, for minutes, while only /readyz noticed.)
func TestServePostgresLostLockForgetsKeys(t *testing.T) {
	parallelUnlessShort(t, "starts btk serve processes")
	db := pgtest.URL(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	relay := testproc.NewRelay(t, u.Host)
	viaRelay := *u
	viaRelay.Host = relay.Addr
	x := startServe(t, viaRelay.String())
	token := x.login()
	gone, kept := x.createKey(token, "gone"), x.createKey(token, "kept")
	for _, k := range []procKey{gone, kept} {
		if st, msg := x.probe(k.Plaintext); st != http.StatusOK {
			t.Fatalf("a new key: HTTP %d %s", st, msg)
		}
	}

	// x's sessions end (its lock with them) and x cannot reach PostgreSQL
	// while y starts and takes the lock.
	relay.Cut()
	x.WaitFor(t, "a cached key refused once the lock is lost", procWait, func() bool {
		st, _ := x.probe(gone.Plaintext)
		return st == http.StatusServiceUnavailable
	})
	y := startServe(t, db)
	y.must(y.login(), `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": gone.ID}, &struct{}{})
	relay.Restore() // x reaches PostgreSQL again, but y holds the lock
	for range 5 {
		if st, _ := x.probe(gone.Plaintext); st == http.StatusOK {
			t.Fatal("the revoked key accepted by the instance that lost its lock")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st := readyzStatus(t, x.url); st != http.StatusServiceUnavailable {
		t.Fatalf("/readyz of the instance without its lock: %d", st)
	}

	if err := y.stop(); err != nil {
		t.Fatal(err)
	}
	x.WaitFor(t, "the lock taken back", procWait, func() bool {
		st, _ := x.probe(kept.Plaintext)
		return st == http.StatusOK
	})
	if st, msg := x.probe(gone.Plaintext); st != http.StatusUnauthorized {
		t.Fatalf("the key revoked while x had lost its lock: HTTP %d %s, want 401", st, msg)
	}
}

func TestDisplayDBHidesPassword(t *testing.T) {
	for in, want := range map[string]string{
		"./btk.db": "./btk.db",
		"postgres://btk:s3cret@db:5432/btk?sslmode=require":    "postgres://btk:xxxxx@db:5432/btk?sslmode=require",
		"postgresql://db/btk?password=s3cret&sslmode=disable":  "postgresql://db/btk?password=xxxxx&sslmode=disable",
		"postgres://btk@db/btk":                                "postgres://btk@db/btk",
		"postgres://db/btk?sslmode=disable&sslpassword=s3cret": "postgres://db/btk?sslmode=disable&sslpassword=xxxxx",
	} {
		if got := displayDB(in); got != want {
			t.Errorf("displayDB(%q) = %q, want %q", in, got, want)
		}
	}
}
