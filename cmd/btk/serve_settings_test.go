package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/btk-project/btk/internal/store/postgres/pgtest"
)

// A setting that can only fail when serve listens or connects is refused
// by Validate: exit 2 before anything starts, naming the setting and
// quoting no secret of it (docs/operating.md). --addr :99999 and a
// connect_timeout that is not a number exited 1; the --upstream error quoted
// its password.
func TestServeBadSettingsExit2(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "btk.db")
	pg := "postgres://btk:S3cret@127.0.0.1:1/btk?sslmode=disable&sslpassword=S3cret"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--db", db, "--addr", ":99999"}, `--addr ":99999": want a port from 0 to 65535`},
		{[]string{"--db", db, "--addr", "127.0.0.1"}, `--addr "127.0.0.1": want HOST:PORT`},
		{[]string{"--db", db, "--metrics-addr", "127.0.0.1:-1"}, `--metrics-addr "127.0.0.1:-1": want a port`},
		{[]string{"--db", db, "--proxy-addr", ":70000", "--upstream", "http://127.0.0.1:9"}, `--proxy-addr ":70000": want a port`},
		{[]string{"--db", db, "--proxy-addr", "127.0.0.1:0", "--upstream", "ftp://u:S3cret@h/?token=S3cret"}, `not "ftp://u:xxxxx@h/?token=xxxxx"`},
		{[]string{"--db", pg + "&connect_timeout=abc"}, "--db: the PostgreSQL URL is not valid: invalid connect_timeout"},
		{[]string{"--db", pg + "&sslmode=bogus"}, "--db: the PostgreSQL URL is not valid: failed to configure TLS (sslmode is invalid)"},
		{[]string{"--db", "postgres://btk:S3/cret@127.0.0.1/btk"}, "--db: the PostgreSQL URL is not a valid URL"},
		// --redis is checked before the database is opened (it exited 1 after).
		{[]string{"--db", db, "--redis", "redis://:S3cret@127.0.0.1:6379/0?pool_size=-5"}, "--redis: pool_size"},
		{[]string{"--db", db, "--redis", "redis+cluster://:S3cret@10.0.0.1:7000/3"}, "--redis: Redis Cluster has only database 0"},
		{[]string{"--db", db, "--redis", "redis://127.0.0.1:6379/0", "--redis-prefix", "btk{x}:"}, "--redis-prefix: must not contain"},
	} {
		var out bytes.Buffer
		code := run(context.Background(), append([]string{"serve"}, c.args...), strings.NewReader(""), &out, &out)
		if code != exitUsage || !strings.Contains(out.String(), c.want) {
			t.Errorf("%q: exit %d, %q; want %d, %q", c.args, code, out.String(), exitUsage, c.want)
		}
		if strings.Contains(out.String(), "S3") {
			t.Errorf("%q: the output quotes the secret: %q", c.args, out.String())
		}
	}
	if _, err := os.Stat(db); err == nil {
		t.Error("a refused setting still created the database")
	}
}

// The "listening" line shows the --db URL without any secret parameter: an
// sslpassword was logged in clear, only password= was hidden.
func TestServeLogsDBWithoutSecrets(t *testing.T) {
	parallelUnlessShort(t, "starts a btk serve process")
	db := pgtest.URL(t)
	sep := "?"
	if strings.Contains(db, "?") {
		sep = "&"
	}
	p := startServe(t, db+sep+"sslpassword=S3cret&application_name=btk-test")
	if err := p.stop(); err != nil {
		t.Fatalf("exit %v:\n%s", err, p.Output())
	}
	out := p.Output()
	if !strings.Contains(out, "sslpassword=xxxxx&application_name=btk-test") || strings.Contains(out, "S3cret") {
		t.Errorf("want the sslpassword hidden and the rest shown:\n%s", out)
	}
}
