package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/store/postgres/pgtest"
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

func TestDisplayDBHidesPassword(t *testing.T) {
	for in, want := range map[string]string{
		"./btk.db": "./btk.db",
		"postgres://btk:s3cret@db:5432/btk?sslmode=require":   "postgres://btk:xxxxx@db:5432/btk?sslmode=require",
		"postgresql://db/btk?password=s3cret&sslmode=disable": "postgresql://db/btk?password=xxxxx&sslmode=disable",
		"postgres://btk@db/btk":                               "postgres://btk@db/btk",
	} {
		if got := displayDB(in); got != want {
			t.Errorf("displayDB(%q) = %q, want %q", in, got, want)
		}
	}
}
