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
	"github.com/btk-project/btk/internal/store/storetest"
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

// seedUsage stores the workspaces, their keys and their hourly rows of the
// days before storetest.UsageBenchUntil in one transaction, each table with one INSERT …
// SELECT of a recursive CTE, so no row crosses the driver. The rows go in
// primary-key order with the usage table's other indexes dropped and built
// again after, which is much faster than hour by hour (as the flush writes
// them); the table and indexes come out denser than a live database's. No
// ANALYZE: btk runs none, so the planner has no statistics.
func seedUsage(b testing.TB, db *DB, days int) {
	ctx := context.Background()
	err := inTx(ctx, db.w, func(tx *sql.Tx) error {
		const series = `WITH RECURSIVE
			w(w) AS (SELECT 0 UNION ALL SELECT w + 1 FROM w WHERE w < ?),
			k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < ?),
			wk(w, i, ws, id) AS (SELECT w, i, printf('%08x-0000-4000-8000-000000000000', 0x0badc0de + w),
				printf('%08x-%04x-4000-8000-%012x', (i * 2654435761) % 4294967296, w, i) FROM w, k WHERE w = 0 OR i < ?)`
		args := []any{storetest.UsageBenchOthers, storetest.UsageBenchKeys - 1, storetest.UsageBenchOtherKeys}
		if _, err := tx.ExecContext(ctx, `WITH RECURSIVE w(w) AS (SELECT 0 UNION ALL SELECT w + 1 FROM w WHERE w < ?)
			INSERT INTO workspaces (id, name, prefix, plan, public_client_key, created_at)
			SELECT printf('%08x-0000-4000-8000-000000000000', 0x0badc0de + w), 'bench', printf('%08x', 0x0badc0de + w),
				'SELF_HOSTED', 'bpk_bench' || w, 1 FROM w`, storetest.UsageBenchOthers); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, series+`
			INSERT INTO api_keys (id, workspace_id, name, hash, display_prefix, hint, created_at, created_by)
			SELECT id, ws, id, randomblob(32), 'btk_bench', 'abcd', 1, 'bench' FROM wk ORDER BY w, i`, args...); err != nil {
			return err
		}
		var indexes []string
		rows, err := tx.QueryContext(ctx, `SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'api_key_usage' AND sql IS NOT NULL`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var name, create string
			if err := rows.Scan(&name, &create); err != nil {
				return err
			}
			indexes = append(indexes, name, create)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		for i := 0; i < len(indexes); i += 2 {
			if _, err := tx.ExecContext(ctx, `DROP INDEX `+indexes[i]); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, series+`, h(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM h WHERE j < ?)
			INSERT INTO api_key_usage (api_key_id, workspace_id, hour, accepted, rate_limited, refused)
			SELECT id, ws, ? + j * 3600000000000, (i * 31 + j) % 97 + i % 7 * 20, (i + j) % 13 = 0, (i % 5 = 0 AND j % 7 = 0) * 3
			FROM wk, h ORDER BY id, j`,
			append(args, days*24-1, storetest.UsageBenchUntil.Add(-time.Duration(days)*24*time.Hour).UnixNano())...); err != nil {
			return err
		}
		for i := 1; i < len(indexes); i += 2 {
			if _, err := tx.ExecContext(ctx, indexes[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkUsageReads times a workspace's usage reads as workspaceUsage
// makes them (a Read transaction around each): topKeys(first: 10) and the
// hourly series over the last 90 and 7 days, and one key's own series, on
// 1,000 keys x 90 days of hours (2.16M rows, 4.32M of other workspaces
// beside); then a flush of 1,000 keys' counts. BTK_BENCH_LARGE=1 adds a year
// of hours (8.8M rows of the workspace). Figures: docs/usage.md#what-the-reads-cost.
func BenchmarkUsageReads(b *testing.B) {
	days := []int{90}
	if os.Getenv("BTK_BENCH_LARGE") == "1" {
		days = append(days, 365)
	}
	ctx := context.Background()
	for _, d := range days {
		b.Run(fmt.Sprintf("days=%d", d), func(b *testing.B) {
			db := tempDB(b)
			if _, err := db.w.ExecContext(ctx, `PRAGMA cache_size = -262144`); err != nil { // the fill's writer only
				b.Fatal(err)
			}
			start := time.Now()
			seedUsage(b, db, d)
			b.Logf("seeded %d days in %v", d, time.Since(start).Round(time.Millisecond))
			storetest.BenchUsageReads(b, db, d)
			storetest.BenchUsageFlush(b, db)
		})
	}
}

// BenchmarkClaimBacklog times a claim round with 100 and with 10,000
// pending deliveries in one workspace (its 10 webhooks' backlogs full at
// the bound), one in flight: a claim's cost must not grow with the backlog
// (docs/webhooks.md#the-backlog-bound; figures in bench/README.md).
func BenchmarkClaimBacklog(b *testing.B) {
	for _, rows := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			db := tempDB(b)
			now := storetest.SeedClaimBacklog(b, db, rows/btk.MaxWebhooksPerWorkspace)
			storetest.BenchClaim(b, db, now)
		})
	}
}
