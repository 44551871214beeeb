// Package pgtest gives a test its own PostgreSQL schema on the database that
// BTK_TEST_POSTGRES names, so test packages can run in parallel.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Env is the variable that names the test database.
const Env = "BTK_TEST_POSTGRES"

// URL creates a schema of its own for t and returns the database URL with
// that schema as its search_path; the schema is dropped when t ends. It
// skips t when BTK_TEST_POSTGRES is unset.
func URL(t testing.TB) string {
	t.Helper()
	base := os.Getenv(Env)
	if base == "" {
		t.Skip(Env + " is not set: skipping the PostgreSQL test (set it to a postgres:// URL of a database to use)")
	}
	b := make([]byte, 6)
	rand.Read(b)
	schema := "btk_test_" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("%s: %v", Env, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(context.Background())
		// A drop can lose a deadlock to a backend of the test's servers
		// that is still ending, or to another test's drop, under a loaded
		// machine: PostgreSQL then cancels it, and it is tried again.
		for attempt := 1; ; attempt++ {
			_, err := conn.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`)
			var pgErr *pgconn.PgError
			if err != nil && attempt < 5 && errors.As(err, &pgErr) && pgErr.Code == "40P01" { // deadlock_detected
				time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
				continue
			}
			if err != nil {
				t.Errorf("drop schema %s: %v", schema, err)
			}
			return
		}
	})
	return WithSchema(t, base, schema)
}

// WithSchema returns url with search_path set to schema (pgx passes unknown
// URL parameters to the server as run-time parameters).
func WithSchema(t testing.TB, rawURL, schema string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("%s: %v", Env, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	// Tests need no durability: commits need not wait for the WAL flush.
	q.Set("synchronous_commit", "off")
	u.RawQuery = q.Encode()
	return u.String()
}
