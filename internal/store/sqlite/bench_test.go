package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

func benchHash(i int) []byte {
	h := sha256.Sum256(binary.BigEndian.AppendUint64(nil, uint64(i)))
	return h[:]
}

// seedKeys stores n keys in one workspace through one transaction and one
// prepared insert (a million take seconds this way, not minutes).
func seedKeys(b *testing.B, db *DB, n int) {
	ctx := context.Background()
	const wsID = "0badc0de-0000-4000-8000-000000000000"
	now := time.Now().UnixNano()
	err := inTx(ctx, db.w, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO workspaces (id, name, prefix, plan, public_client_key, created_at)
			VALUES (?, 'bench', ?, 'SELF_HOSTED', 'bpk_bench', ?)`, wsID, wsID[:8], now); err != nil {
			return err
		}
		st, err := tx.PrepareContext(ctx, `INSERT INTO api_keys (id, workspace_id, name, hash, display_prefix, hint, created_at, created_by)
			VALUES (?, ?, ?, ?, 'btk_0badc0de', 'abcd', ?, 'bench')`)
		if err != nil {
			return err
		}
		defer st.Close()
		for i := range n {
			id := fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)
			if _, err := st.ExecContext(ctx, id, wsID, id, benchHash(i), now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAPIKeyByHash measures a cold authentication lookup as the server
// does it: a Read transaction around APIKeyByHash. "spread10k" cycles over
// 10,000 keys (the design's traffic model), "uniform" draws from every key.
// The 1,000,000-key database is built only with BTK_BENCH_LARGE=1.
func BenchmarkAPIKeyByHash(b *testing.B) {
	sizes := []int{1_000}
	if os.Getenv("BTK_BENCH_LARGE") == "1" {
		sizes = append(sizes, 1_000_000)
	}
	ctx := context.Background()
	for _, n := range sizes {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			db := tempDB(b)
			seedKeys(b, db, n)

			lookup := func(h []byte) {
				err := db.Read(ctx, func(tx btk.Tx) error {
					_, err := tx.APIKeyByHash(ctx, h)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			sample := func(pool int) [][]byte {
				hs := make([][]byte, 1<<14)
				for i := range hs {
					hs[i] = benchHash(rand.IntN(pool))
				}
				return hs
			}
			for _, c := range []struct {
				name string
				pool int
			}{{"uniform", n}, {"spread10k", 10_000}} {
				if c.pool > n {
					continue
				}
				hs := sample(c.pool)
				b.Run(c.name, func(b *testing.B) {
					i := 0
					for b.Loop() {
						lookup(hs[i&(len(hs)-1)])
						i++
					}
				})
				b.Run(c.name+"/no-tx", func(b *testing.B) {
					i := 0
					for b.Loop() {
						if _, err := db.APIKeyByHash(ctx, hs[i&(len(hs)-1)]); err != nil {
							b.Fatal(err)
						}
						i++
					}
				})
				b.Run(c.name+"/parallel", func(b *testing.B) {
					b.RunParallel(func(pb *testing.PB) {
						i := rand.IntN(len(hs))
						for pb.Next() {
							lookup(hs[i&(len(hs)-1)])
							i++
						}
					})
				})
			}
		})
	}
}

// BenchmarkRecordUsage writes the usage of 10,000 keys in one transaction:
// "batched" as RecordUsage does (UPDATE … FROM (VALUES …), 500 keys a
// statement), "per-key" one prepared UPDATE per key (RecordUsage before
// it batched). Each op is the whole flush of 10,000 keys.
func BenchmarkRecordUsage(b *testing.B) {
	const n = 10_000
	db := tempDB(b)
	seedKeys(b, db, n)
	usage := make([]btk.KeyUsage, n)
	for i := range usage {
		usage[i] = btk.KeyUsage{KeyID: fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i), DayState: int64(i + 1)}
	}
	ctx := context.Background()
	at := time.Now()
	next := func() {
		at = at.Add(time.Second)
		for i := range usage {
			usage[i].LastUsedAt = at
		}
	}
	b.Run("batched", func(b *testing.B) {
		for b.Loop() {
			next()
			if err := db.RecordUsage(ctx, usage, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("per-key", func(b *testing.B) {
		for b.Loop() {
			next()
			err := inTx(ctx, db.w, func(t *sql.Tx) error {
				st := t.StmtContext(ctx, db.usage)
				for _, u := range usage {
					if _, err := st.ExecContext(ctx, u.LastUsedAt.UnixNano(), u.DayState, u.KeyID); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
