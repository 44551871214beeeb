package postgres_test

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/postgres"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
	"github.com/btk-project/btk/internal/store/storetest"
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

// seedUsage writes the hourly rows of the days before storetest.UsageBenchUntil with one
// INSERT … SELECT, hour by hour as the flush writes them, so the table is in
// time order and the workspaces' rows lie side by side. The table's indexes
// are dropped first and built again after (much faster than keeping them
// up to date row by row; they come out denser than a live database's).
func seedUsage(b *testing.B, conn *pgx.Conn, days int) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback(ctx)
	rows, err := tx.Query(ctx, `SELECT indexname, indexdef FROM pg_indexes
		WHERE schemaname = current_schema() AND tablename = 'api_key_usage' AND indexname <> 'api_key_usage_pkey'`)
	if err != nil {
		b.Fatal(err)
	}
	var names, defs []string
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			b.Fatal(err)
		}
		names, defs = append(names, name), append(defs, def)
	}
	if rows.Err() != nil {
		b.Fatal(rows.Err())
	}
	for _, q := range append([]string{`ALTER TABLE api_key_usage DROP CONSTRAINT api_key_usage_pkey`}, prefixAll(`DROP INDEX `, names)...) {
		if _, err := tx.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO api_key_usage (api_key_id, workspace_id, hour, accepted, rate_limited, refused)
		SELECT format('%s-%s-4000-8000-%s', lpad(to_hex((i * 2654435761) % 4294967296), 8, '0'), lpad(to_hex(w), 4, '0'), lpad(to_hex(i), 12, '0')),
			lpad(to_hex(x'0badc0de'::int + w), 8, '0') || '-0000-4000-8000-000000000000',
			$1 + j * 3600000000000, (i * 31 + j) % 97 + i % 7 * 20, ((i + j) % 13 = 0)::int, (i % 5 = 0 AND j % 7 = 0)::int * 3
		FROM generate_series(0, $2 - 1) j, generate_series(0, $3) w, generate_series(0::bigint, $4 - 1) i
		WHERE w = 0 OR i < $5 ORDER BY j, w, i`,
		storetest.UsageBenchUntil.Add(-time.Duration(days)*24*time.Hour).UnixNano(), days*24, storetest.UsageBenchOthers, storetest.UsageBenchKeys, storetest.UsageBenchOtherKeys); err != nil {
		b.Fatal(err)
	}
	for _, q := range append([]string{`ALTER TABLE api_key_usage ADD PRIMARY KEY (api_key_id, hour)`}, defs...) {
		if _, err := tx.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		b.Fatal(err)
	}
}

func prefixAll(prefix string, l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = prefix + s
	}
	return out
}

// BenchmarkUsageReads is the SQLite store's benchmark of the same name on
// PostgreSQL: topKeys(first: 10), the workspace's hourly series and one
// key's series over the last 90 and 7 days of 1,000 keys x 90 days of hours
// (2.16M rows, 4.32M of other workspaces beside), and a flush of 1,000 keys'
// counts. The server's connections run each statement many times, and after
// five runs PostgreSQL keeps a generic plan (one for any parameters): the
// store is opened with plan_cache_mode=force_generic_plan so that every run
// uses that plan. "fresh" runs after an ANALYZE only (no page is
// all-visible yet: an index-only scan still reads the table), "vacuumed"
// after a VACUUM, as autovacuum leaves the hours that no longer change.
// BTK_BENCH_LARGE=1 adds a year of hours (8.8M rows of the workspace).
// Figures: docs/usage.md#what-the-reads-cost.
func BenchmarkUsageReads(b *testing.B) {
	days := []int{90}
	if os.Getenv("BTK_BENCH_LARGE") == "1" {
		days = append(days, 365)
	}
	for _, d := range days {
		b.Run(fmt.Sprintf("days=%d", d), func(b *testing.B) {
			url := pgtest.URL(b)
			db, err := postgres.Open(ctx, url+"&plan_cache_mode=force_generic_plan", postgres.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close(ctx)
			start := time.Now()
			seedUsage(b, conn, d)
			if _, err := conn.Exec(ctx, `ANALYZE api_key_usage`); err != nil {
				b.Fatal(err)
			}
			b.Logf("seeded %d days in %v", d, time.Since(start).Round(time.Millisecond))
			b.Run("fresh", func(b *testing.B) { storetest.BenchUsageReads(b, db, d) })
			if _, err := conn.Exec(ctx, `VACUUM (ANALYZE) api_key_usage`); err != nil {
				b.Fatal(err)
			}
			b.Run("vacuumed", func(b *testing.B) { storetest.BenchUsageReads(b, db, d) })
			storetest.BenchUsageFlush(b, db)
		})
	}
}

// BenchmarkClaimBacklog is the SQLite store's benchmark of the same name
// on PostgreSQL: a claim round with 100 and with 10,000 pending deliveries
// in one workspace, after an ANALYZE, with the generic plan the server
// keeps for a statement run many times (plan_cache_mode=force_generic_plan).
func BenchmarkClaimBacklog(b *testing.B) {
	for _, rows := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			url := pgtest.URL(b)
			db, err := postgres.Open(ctx, url+"&plan_cache_mode=force_generic_plan", postgres.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			now := storetest.SeedClaimBacklog(b, db, rows/btk.MaxWebhooksPerWorkspace)
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, `ANALYZE`); err != nil {
				b.Fatal(err)
			}
			storetest.BenchClaim(b, db, now)
		})
	}
}
