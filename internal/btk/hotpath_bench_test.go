package btk

// Benchmarks of the authentication step without a database: the key cache
// is filled directly with n keys over 100 workspaces and requests are spread
// at random over all of them. n = 1,000 and n = 10,000 are the active-key
// sets of the server benchmarks (internal/server/hotpath_bench_test.go) at
// 1,000 and at 1,000,000 stored keys.
//
//	go test ./internal/btk -run '^$' -bench 'KeyCache|AuthenticateCached' -benchmem

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

type benchKeys struct {
	svc    *Service
	plain  []string
	hashes [][32]byte
	order  []int // random indexes, power-of-two length
}

func newBenchKeys(b *testing.B, n int) *benchKeys {
	b.Helper()
	svc, err := NewService(context.Background(), nil, []byte(strings.Repeat("s", 32)), Config{
		DefaultPerMinute: MaxPerMinute, DefaultPerDay: MaxPerDay,
	})
	if err != nil {
		b.Fatal(err)
	}
	bk := &benchKeys{svc: svc}
	wss := make([]*Workspace, 100)
	for i := range wss {
		wss[i] = &Workspace{ID: fmt.Sprintf("%08x-8b7d-4e2f-9a6b-5c4d3e2f1a0b", i), Name: "bench", Plan: PlanSelfHosted}
	}
	for i := range n {
		w := wss[i%len(wss)]
		plain, hash, displayPrefix, hint := NewKey(w.ID)
		k := &APIKey{
			ID: fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i), WorkspaceID: w.ID, Name: fmt.Sprint("key-", i),
			Hash: hash, DisplayPrefix: displayPrefix, Hint: hint, Scopes: []string{}, CreatedAt: time.Now(),
		}
		gen := svc.cache.gen
		svc.cache.fill(gen, [32]byte(hash), k, w, Revision{})
		bk.plain = append(bk.plain, plain)
		bk.hashes = append(bk.hashes, [32]byte(hash))
	}
	r := rand.New(rand.NewPCG(uint64(n), 3))
	bk.order = make([]int, 1<<16)
	for i := range bk.order {
		bk.order[i] = r.IntN(n)
	}
	return bk
}

// run benchmarks op over the keys in bk's random order (op gets a key's
// index): serially as serial, then from every goroutine at once, each from
// an offset of its own, as parallel.
func (bk *benchKeys) run(b *testing.B, serial, parallel string, op func(i int) error) {
	mask := len(bk.order) - 1
	b.Run(serial, func(b *testing.B) {
		i := 0
		for b.Loop() {
			if err := op(bk.order[i&mask]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run(parallel, func(b *testing.B) {
		var seed atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(seed.Add(7919))
			for pb.Next() {
				if err := op(bk.order[i&mask]); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	})
}

var errMiss = errors.New("miss")

func BenchmarkKeyCache(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			bk := newBenchKeys(b, n)
			c := bk.svc.cache
			bk.run(b, "get", "get/parallel", func(i int) error {
				if k, _, _, _ := c.get(bk.hashes[i], ""); k == nil {
					return errMiss
				}
				return nil
			})
		})
	}
}

func BenchmarkAuthenticateCached(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			bk := newBenchKeys(b, n)
			for _, p := range bk.plain { // the limiter holds every key, as in steady state
				if _, _, err := bk.svc.AuthenticateKey(ctx, p); err != nil {
					b.Fatal(err)
				}
			}
			bk.run(b, "serial", "parallel", func(i int) error {
				_, _, err := bk.svc.AuthenticateKey(ctx, bk.plain[i])
				return err
			})
		})
	}
}
