package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
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

// Usage-read benchmark layout: one busy workspace of usageKeys keys, each
// with a row for every hour of the days, and usageOthers other workspaces of
// usageOtherKeys keys each over the same hours. Workspace w is
// 0badc0de+w-0000-…, its keys xxxxxxxx-000w-… with ids spread like UUIDs,
// so the busy workspace's keys lie among the others' in the primary key.
const (
	usageKeys      = 1_000
	usageOthers    = 10
	usageOtherKeys = 200
)

var (
	usageWorkspace = fmt.Sprintf("%08x-0000-4000-8000-000000000000", 0x0badc0de)
	// usageUntil is the end of the benchmark's hours (exclusive), a whole hour.
	usageUntil = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	// usageKey is a key of the busy workspace.
	usageKey = fmt.Sprintf("%08x-0000-4000-8000-%012x", 7*2654435761%(1<<32), 7)
)

// seedUsage stores the workspaces, their keys and their hourly rows of the
// days before usageUntil in one transaction, each table with one INSERT …
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
		args := []any{usageOthers, usageKeys - 1, usageOtherKeys}
		if _, err := tx.ExecContext(ctx, `WITH RECURSIVE w(w) AS (SELECT 0 UNION ALL SELECT w + 1 FROM w WHERE w < ?)
			INSERT INTO workspaces (id, name, prefix, plan, public_client_key, created_at)
			SELECT printf('%08x-0000-4000-8000-000000000000', 0x0badc0de + w), 'bench', printf('%08x', 0x0badc0de + w),
				'SELF_HOSTED', 'bpk_bench' || w, 1 FROM w`, usageOthers); err != nil {
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
			append(args, days*24-1, usageUntil.Add(-time.Duration(days)*24*time.Hour).UnixNano())...); err != nil {
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
			benchUsageReads(b, db, d)
			benchUsageFlush(b, db)
		})
	}
}

func benchUsageReads(b *testing.B, db btk.Store, days int) {
	ctx := context.Background()
	for _, w := range []int{days, 7} {
		f := btk.UsageFilter{WorkspaceID: usageWorkspace, Since: usageUntil.Add(-time.Duration(w) * 24 * time.Hour), Until: usageUntil}
		for _, c := range []struct {
			name string
			want int
			read func(tx btk.Tx) (int, error)
		}{
			{"topKeys", 10, func(tx btk.Tx) (int, error) { r, err := tx.TopKeys(ctx, f, 10); return len(r), err }},
			{"series", w * 24, func(tx btk.Tx) (int, error) { r, err := tx.UsageSeries(ctx, f); return len(r), err }},
			{"keySeries", w * 24, func(tx btk.Tx) (int, error) {
				kf := f
				kf.KeyID = usageKey
				r, err := tx.UsageSeries(ctx, kf)
				return len(r), err
			}},
		} {
			b.Run(fmt.Sprintf("%s/%dd", c.name, w), func(b *testing.B) {
				for b.Loop() {
					err := db.Read(ctx, func(tx btk.Tx) error {
						n, err := c.read(tx)
						if err == nil && n != c.want {
							err = fmt.Errorf("%d rows, want %d", n, c.want)
						}
						return err
					})
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// benchUsageFlush times the usage part of a flush that adds one count to
// the latest hour of each of the busy workspace's keys, an existing row
// each (the rows go sorted by key, as the service sends them).
func benchUsageFlush(b *testing.B, db btk.Store) {
	ctx := context.Background()
	counts := make([]btk.UsageCount, usageKeys)
	for i := range counts {
		counts[i] = btk.UsageCount{KeyID: fmt.Sprintf("%08x-0000-4000-8000-%012x", i*2654435761%(1<<32), i),
			WorkspaceID: usageWorkspace, Start: usageUntil.Add(-time.Hour), Accepted: 1}
	}
	slices.SortFunc(counts, func(x, y btk.UsageCount) int { return strings.Compare(x.KeyID, y.KeyID) })
	b.Run("flush/1000keys", func(b *testing.B) {
		for b.Loop() {
			if err := db.RecordUsage(ctx, nil, counts, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
