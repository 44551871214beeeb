package btk

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func sumCounts(cs []UsageCount, keyID string) (acc, lim, ref int64) {
	for _, c := range cs {
		if c.KeyID == keyID {
			acc, lim, ref = acc+c.Accepted, lim+c.RateLimited, ref+c.Refused
		}
	}
	return
}

// Every use is counted once, in its hour and column; the counts reach the
// store with the flush (a key's first use at once, then every
// UsageWriteInterval, the rest at shutdown); an hour that ends is written
// as its own row; a failed write keeps the counts for the next flush;
// idle keys leave the memory.
func TestUsageCounts(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 59, 50, 0, time.UTC)
	now := t0
	s, st := usageService(t, &now)
	ctx := context.Background()
	a := &APIKey{ID: "a", WorkspaceID: "w"}
	b := &APIKey{ID: "b", WorkspaceID: "w"}
	cl := Client{IP: netip.MustParseAddr("192.0.2.7"), UserAgent: strings.Repeat("é", 200)} // 400 bytes
	s.counter.add(a, UseAccepted, now, cl)
	if err := s.FlushDueUsage(ctx); err != nil { // first use: written at once
		t.Fatal(err)
	}
	if acc, _, _ := sumCounts(st.counts, "a"); acc != 1 || len(st.clients) != 1 {
		t.Fatalf("first flush: %+v %+v", st.counts, st.clients)
	}
	if c := st.clients[0]; c.IP != "192.0.2.7" || len(c.UserAgent) > MaxClientString || !utf8.ValidString(c.UserAgent) || len(c.UserAgent) < MaxClientString-1 {
		t.Fatalf("client %q (%d bytes)", c.UserAgent, len(c.UserAgent))
	}
	for range 5 {
		s.counter.add(a, UseAccepted, now, cl)
		s.counter.add(a, UseRateLimited, now, cl)
		s.counter.add(b, UseRefused, now, Client{})
	}
	now = t0.Add(15 * time.Second) // 13:00:05: a new hour
	s.counter.add(a, UseAccepted, now, cl)
	if err := s.FlushDueUsage(ctx); err != nil {
		t.Fatal(err)
	}
	// a was written 15 s ago: only its finished hour is due; b is new.
	if acc, lim, _ := sumCounts(st.counts, "a"); acc != 6 || lim != 5 {
		t.Fatalf("after the hour: a %d/%d", acc, lim)
	}
	if _, _, ref := sumCounts(st.counts, "b"); ref != 5 {
		t.Fatalf("b refused %d", ref)
	}
	st.fail = true
	now = now.Add(UsageWriteInterval)
	if err := s.FlushDueUsage(ctx); err == nil {
		t.Fatal("the store's error was hidden")
	}
	st.fail = false
	s.counter.add(a, UseAccepted, now, cl)
	if err := s.FlushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	acc, lim, ref := sumCounts(st.counts, "a")
	if acc != 8 || lim != 5 || ref != 0 {
		t.Fatalf("a: %d %d %d; want 8 5 0", acc, lim, ref)
	}
	hours := map[time.Time]int64{}
	for _, c := range st.counts {
		if c.KeyID == "a" {
			hours[c.Start] += c.Accepted
		}
		if c.WorkspaceID != "w" {
			t.Fatalf("row without its workspace: %+v", c)
		}
	}
	if hours[t0.Truncate(time.Hour)] != 6 || hours[t0.Truncate(time.Hour).Add(time.Hour)] != 2 {
		t.Fatalf("per hour %v", hours)
	}
	// Nothing left; after an idle interval the entries go.
	now = now.Add(UsageWriteInterval)
	if err := s.FlushDueUsage(ctx); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := range s.counter.shards {
		n += len(s.counter.shards[i].keys)
	}
	if n != 0 {
		t.Fatalf("%d idle entries kept", n)
	}
	if len(st.pruned) == 0 || !st.pruned[0].Equal(t0.Add(-DefaultUsageRetention)) {
		t.Fatalf("retention ran with %v", st.pruned)
	}
	if len(st.prunedD) != len(st.pruned) || !st.prunedD[0].Equal(t0.Add(-DefaultUsageRetention)) {
		t.Fatalf("delivery retention ran with %v (usage %v)", st.prunedD, st.pruned)
	}
}

// The ranges of a series: whole periods, bounded, zeros filled in.
func TestUsageRange(t *testing.T) {
	now := time.Date(2026, 3, 10, 15, 30, 0, 0, time.UTC)
	since, until, g, err := UsageRange{}.resolve(now)
	if err != nil || g != GranularityDay || !since.Equal(time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC)) || !until.Equal(time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("default: %v %v %v %v", since, until, g, err)
	}
	since, until, _, err = UsageRange{Granularity: GranularityHour}.resolve(now)
	if err != nil || until.Sub(since) != 25*time.Hour {
		t.Fatalf("hours: %v %v %v", since, until, err)
	}
	long := now.Add(-91 * 24 * time.Hour)
	if _, _, _, err := (UsageRange{Since: &long, Granularity: GranularityHour}).resolve(now); ErrorCode(err) != CodeBadUserInput {
		t.Fatalf("91 days of hours: %v", err)
	}
	if _, _, _, err := (UsageRange{Since: &long}).resolve(now); err != nil {
		t.Fatalf("91 days: %v", err)
	}
	later := now.Add(time.Hour * 48)
	if _, _, _, err := (UsageRange{Since: &later}).resolve(now); ErrorCode(err) != CodeBadUserInput {
		t.Fatalf("since after until: %v", err)
	}
	day := time.Date(2026, 3, 9, 0, 0, 0, 0, time.UTC)
	pts := bucket([]UsageCount{
		{Start: day.Add(time.Hour), Accepted: 2},
		{Start: day.Add(23 * time.Hour), Refused: 1},
		{Start: day.Add(24 * time.Hour), RateLimited: 4},
	}, day, day.Add(72*time.Hour), GranularityDay)
	if len(pts) != 3 || pts[0].Accepted != 2 || pts[0].Refused != 1 || pts[1].RateLimited != 4 || pts[2].Total() != 0 || !pts[2].Start.Equal(day.Add(48*time.Hour)) {
		t.Fatalf("buckets %+v", pts)
	}
}

// BenchmarkUsageCount is counting's own cost on the request path: one use
// counted, with its client, for one key and spread over 10,000 keys.
func BenchmarkUsageCount(b *testing.B) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cl := Client{IP: netip.MustParseAddr("192.0.2.7"), UserAgent: "bench/1"}
	for _, n := range []int{1, 10_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			c := newUsageCounter()
			keys := make([]*APIKey, n)
			for i := range keys {
				keys[i] = &APIKey{ID: fmt.Sprintf("key-%05d", i), WorkspaceID: "w"}
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					c.add(keys[i%n], UseAccepted, now, cl)
					i += 7919
				}
			})
		})
	}
}

// The client strings a usage entry keeps until its flush are cut to
// MaxClientString when counted, not when taken: 2,000 keys used with a
// 60 KB User-Agent each pinned 120 MB for up to UsageWriteInterval.
func TestUsageCounterHoldsOnlyCutClientStrings(t *testing.T) {
	c := newUsageCounter()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const keys, uaLen = 2000, 60 << 10
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range keys {
		ua := strings.Repeat(string(rune('a'+i%26)), uaLen) // a header value of its own
		c.add(&APIKey{ID: fmt.Sprint("k", i), WorkspaceID: "w"}, UseAccepted, now,
			Client{IP: netip.MustParseAddr("192.0.2.7"), UserAgent: ua})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapInuse) - int64(before.HeapInuse)
	if limit := int64(keys * (MaxClientString + 1024)); held > limit {
		t.Fatalf("the counter holds %d bytes for %d keys, want at most %d: it keeps the whole user agents", held, keys, limit)
	}
	_, clients := c.take(now.UnixNano(), UsageWriteInterval, true)
	if len(clients) != keys || len(clients[0].UserAgent) != MaxClientString {
		t.Fatalf("%d clients, user agent of %d bytes", len(clients), len(clients[0].UserAgent))
	}
}

// A flush whose commit was not answered is sent again under its id with
// every later flush until one is answered: its uses count once whether that
// commit happened or not, a failure before the commit merges into the next
// flush, at most maxUnsureFlushes are kept apart, and UnflushedUsage counts
// them all (docs/usage.md).
func TestUsageFlushCommitUnknown(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s, st := usageService(t, &now)
	ctx := context.Background()
	a := &APIKey{ID: "a", WorkspaceID: "w"}
	use := func(n int) {
		for range n {
			s.counter.add(a, UseAccepted, now, Client{})
		}
	}
	accepted := func() int64 {
		acc, _, _ := sumCounts(st.counts, "a")
		return acc
	}

	use(3)
	st.lose = true // committed, answer lost
	if err := s.FlushUsage(ctx); !errors.Is(err, ErrCommitUnknown) {
		t.Fatalf("flush: %v, want the commit unknown", err)
	}
	if uses, _ := s.UnflushedUsage(); uses != 3 {
		t.Fatalf("unflushed %d uses after a lost answer, want 3", uses)
	}
	st.lose = false
	use(2)
	if err := s.FlushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	if n := accepted(); n != 5 {
		t.Fatalf("accepted %d, want 5 (the flush whose answer was lost counted once)", n)
	}

	use(1)
	st.loseUnwritten = true // not committed, answer lost
	if err := s.FlushUsage(ctx); !errors.Is(err, ErrCommitUnknown) {
		t.Fatal(err)
	}
	st.loseUnwritten = false
	if err := s.FlushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	if n := accepted(); n != 6 {
		t.Fatalf("accepted %d, want 6", n)
	}

	// A failure before the commit keeps nothing apart.
	use(1)
	st.fail = true
	if err := s.FlushUsage(ctx); err == nil {
		t.Fatal("the store's error was hidden")
	}
	if len(s.usage.unsure) != 0 {
		t.Fatalf("%d flushes kept apart after a failure before the commit", len(s.usage.unsure))
	}
	st.fail = false

	// Lost answers in a row: at most maxUnsureFlushes kept apart, nothing lost.
	st.loseUnwritten = true
	for range maxUnsureFlushes + 10 {
		use(1)
		if err := s.FlushUsage(ctx); err == nil {
			t.Fatal("the store's error was hidden")
		}
	}
	if n := len(s.usage.unsure); n != maxUnsureFlushes {
		t.Fatalf("%d flushes kept apart, want %d", n, maxUnsureFlushes)
	}
	if uses, _ := s.UnflushedUsage(); uses != 1+maxUnsureFlushes+10 {
		t.Fatalf("unflushed %d uses, want %d", uses, 1+maxUnsureFlushes+10)
	}
	st.loseUnwritten = false
	if err := s.FlushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	if n := accepted(); n != 6+1+maxUnsureFlushes+10 {
		t.Fatalf("accepted %d, want %d", n, 6+1+maxUnsureFlushes+10)
	}
	if uses, keys := s.UnflushedUsage(); uses != 0 || keys != 0 {
		t.Fatalf("unflushed %d uses of %d keys after a flush", uses, keys)
	}
}
