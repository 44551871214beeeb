package postgres_test

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/postgres"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
)

func benchHash(i int) []byte {
	h := sha256.Sum256(binary.BigEndian.AppendUint64(nil, uint64(i)))
	return h[:]
}

// BenchmarkAPIKeyByHash is the SQLite store's benchmark of the same name on
// PostgreSQL: a cold authentication lookup (a Read transaction around
// APIKeyByHash, and the lone statement) over 1,000 keys.
func BenchmarkAPIKeyByHash(b *testing.B) {
	url := pgtest.URL(b)
	db, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const n = 1_000
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	const wsID = "0badc0de-0000-4000-8000-000000000000"
	now := time.Now().UnixNano()
	if _, err := conn.Exec(ctx, `INSERT INTO workspaces (id, name, prefix, plan, public_client_key, created_at)
		VALUES ($1, 'bench', $2, 'SELF_HOSTED', 'bpk_bench', $3)`, wsID, wsID[:8], now); err != nil {
		b.Fatal(err)
	}
	rows := make([][]any, n)
	for i := range rows {
		id := fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)
		rows[i] = []any{id, wsID, id, benchHash(i), "btk_0badc0de", "abcd", now, "bench"}
	}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"api_keys"},
		[]string{"id", "workspace_id", "name", "hash", "display_prefix", "hint", "created_at", "created_by"},
		pgx.CopyFromRows(rows)); err != nil {
		b.Fatal(err)
	}
	conn.Exec(ctx, `ANALYZE api_keys`)
	hs := make([][]byte, 1<<14)
	for i := range hs {
		hs[i] = benchHash(rand.IntN(n))
	}
	b.Run("keys=1000/uniform", func(b *testing.B) {
		i := 0
		for b.Loop() {
			err := db.Read(ctx, func(tx btk.Tx) error {
				_, err := tx.APIKeyByHash(ctx, hs[i&(len(hs)-1)])
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("keys=1000/uniform/no-tx", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, err := db.APIKeyByHash(ctx, hs[i&(len(hs)-1)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
