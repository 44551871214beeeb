package btk

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/btk-project/btk/internal/ratelimit"
)

// UsageWriteInterval is how often at most a key's last_used_at and day count
// are written while it is in use (docs/design.md#storage): a key used all the time costs
// one row update per interval, not one per second, so the once-a-second
// flush does not grow with the number of active keys. last_used_at lags by
// at most this much (plus a second); a crash forgets at most this much of a
// key's day count. A key's first use after a start is written at once.
const UsageWriteInterval = 30 * time.Second

// usageBook holds usage collected from the limiter until it is due.
type usageBook struct {
	mu      sync.Mutex
	pending map[string]pendingUsage
	// written is when (service clock, unix ns) each key was last written,
	// for keys written within the last UsageWriteInterval.
	written   map[string]int64
	lastSweep int64
	// retry holds the counts of failed writes that did not commit, merged
	// (one row per key and hour), and the clients of failed writes, for
	// the next flush.
	retry        []UsageCount
	retryClients []KeyClient
	// unsure holds the flushes sent in transactions whose commit was not
	// answered, each under its ID: every later flush sends them again, and
	// the store adds each one's counts once (docs/usage.md).
	unsure []UsageFlush
	// lastPrune is when retention last deleted old rows (unix ns).
	lastPrune int64
}

// DefaultUsageRetention is how long hourly usage rows are kept.
const DefaultUsageRetention = 90 * 24 * time.Hour

// usagePruneInterval is how often retention runs (on each instance; the
// delete is idempotent, so running it on several at once is harmless).
const usagePruneInterval = time.Hour

// UsageFlushRetention is how long a store remembers a flush's ID. A flush
// whose commit was not answered and that cannot be written again for longer
// than this may have its counts added twice.
const UsageFlushRetention = 24 * time.Hour

// maxUnsureFlushes bounds how many flushes whose commit was not answered
// are kept apart under their IDs; beyond it the oldest are merged into the
// next flush, which may count them twice but loses nothing.
const maxUnsureFlushes = 64

type pendingUsage struct {
	st  ratelimit.State
	due int64 // unix ns; 0: at the next flush
}

// UnflushedUsage is what the flushes have not written: how many uses (the
// sum of the hourly counts) and how many keys (with counts or a
// last_used_at to write). After a FlushUsage that failed, it is what the
// process would lose by exiting.
func (s *Service) UnflushedUsage() (uses int64, keys int) {
	u := &s.usage
	u.mu.Lock()
	defer u.mu.Unlock()
	seen := map[string]bool{}
	count := func(counts []UsageCount) {
		for _, c := range counts {
			uses += c.Total()
			seen[c.KeyID] = true
		}
	}
	count(u.retry)
	for _, f := range u.unsure {
		count(f.Counts)
	}
	for _, c := range u.retryClients {
		seen[c.KeyID] = true
	}
	for key := range u.pending {
		seen[key] = true
	}
	return uses, len(seen)
}

// FlushDueUsage collects the usage of the last second from the limiter and
// writes, in one batch, that of the keys not written for UsageWriteInterval.
// The server calls it about once a second; what it keeps back is written by a
// later call or by FlushUsage at shutdown.
func (s *Service) FlushDueUsage(ctx context.Context) error {
	return s.flushUsage(ctx, false)
}

func (s *Service) flushUsage(ctx context.Context, all bool) error {
	nowT := s.now()
	now := nowT.UnixNano()
	states := s.gate.Dirty()
	s.gate.Sweep(nowT)
	s.passwords.sweep(nowT)
	s.unknown.sweep(nowT)

	u := &s.usage
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.pending == nil {
		u.pending, u.written = map[string]pendingUsage{}, map[string]int64{}
	}
	for _, st := range states {
		// A key appears more than once only when it was forgotten (revoked)
		// and used again: the later state wins, and the latest use.
		if p, ok := u.pending[st.Key]; ok {
			p.st.DayState = st.DayState
			p.st.LastAllowed = max(p.st.LastAllowed, st.LastAllowed)
			u.pending[st.Key] = p
			continue
		}
		// A day state changes without an accepted request only when the
		// limiter caps a window after the clock stepped back; persisting it
		// is not needed (the stored state is capped the same way when read).
		if st.LastAllowed == 0 {
			continue
		}
		var due int64
		if w, ok := u.written[st.Key]; ok {
			due = w + int64(UsageWriteInterval)
		}
		u.pending[st.Key] = pendingUsage{st: st, due: due}
	}
	var batch []KeyUsage
	for key, p := range u.pending {
		if all || p.due <= now {
			batch = append(batch, KeyUsage{KeyID: key, LastUsedAt: time.Unix(0, p.st.LastAllowed).UTC(), DayState: p.st.DayState})
		}
	}
	counts, clients := s.counter.take(now, UsageWriteInterval, all)
	counts = mergeCounts(append(counts, u.retry...))
	clients = mergeClients(append(clients, u.retryClients...))
	u.retry, u.retryClients = nil, nil
	flushes := slices.Clip(u.unsure)
	if len(counts) > 0 {
		flushes = append(flushes, UsageFlush{ID: rand.Text(), At: nowT, Counts: counts})
	}
	if len(batch) > 0 || len(flushes) > 0 || len(clients) > 0 {
		// One order for every instance's batch (the stores also lock rows
		// in this order): concurrent flushes wait rather than deadlock.
		slices.SortFunc(batch, func(a, b KeyUsage) int { return strings.Compare(a.KeyID, b.KeyID) })
		if err := s.store.RecordUsage(ctx, batch, flushes, clients); err != nil {
			// Still pending: the next flush tries again. A transaction
			// that failed before its commit added nothing, and its counts
			// are merged into the next flush; one whose commit was not
			// answered may have, and its flushes are sent again under
			// their IDs, which the store adds once.
			u.retryClients = clients
			if errors.Is(err, ErrCommitUnknown) {
				u.unsure = s.keepUnsure(flushes)
			} else {
				u.retry = counts
			}
			return err
		}
		u.unsure = nil
		for _, b := range batch {
			delete(u.pending, b.KeyID)
			u.written[b.KeyID] = now
		}
	}
	// The database answers: the canary uses it could not take before are
	// written now (docs/leaks.md#canary-keys).
	if err := s.recordKeptCanaries(ctx); err != nil {
		return err
	}
	if !all && now-u.lastPrune >= int64(usagePruneInterval) {
		u.lastPrune = now
		if _, err := s.store.PruneUsage(ctx, nowT.Add(-s.cfg.UsageRetention)); err != nil {
			return fmt.Errorf("usage retention: %w", err)
		}
		if _, err := s.store.PruneUsageFlushes(ctx, nowT.Add(-UsageFlushRetention)); err != nil {
			return fmt.Errorf("usage flush ids: %w", err)
		}
		// The webhook delivery log has the same retention (docs/webhooks.md).
		if _, err := s.store.PruneDeliveries(ctx, nowT.Add(-s.cfg.UsageRetention)); err != nil {
			return fmt.Errorf("webhook delivery retention: %w", err)
		}
		// Every login and impersonation adds a session row, and an expired
		// one is refused like a missing one (ResolveSession): without this
		// they stayed for ever (docs/security.md, what a client can make the
		// server hold). The session.login events stay: they are the record.
		if _, err := s.store.PruneSessions(ctx, nowT); err != nil {
			return fmt.Errorf("expired sessions: %w", err)
		}
	}
	// Keys written longer ago than the interval are due at once anyway.
	if now-u.lastSweep >= int64(UsageWriteInterval) {
		for key, w := range u.written {
			if now-w >= int64(UsageWriteInterval) {
				delete(u.written, key)
			}
		}
		u.lastSweep = now
	}
	return nil
}

// keepUnsure keeps flushes whose commit was not answered, at most
// maxUnsureFlushes of them: beyond that the oldest are merged into the
// counts of the next flush (new ID), and a warning says they may be counted
// twice.
func (s *Service) keepUnsure(flushes []UsageFlush) []UsageFlush {
	extra := len(flushes) - maxUnsureFlushes
	if extra <= 0 {
		return flushes
	}
	s.usage.retry = FlushCounts(flushes[:extra])
	s.cfg.Log.Warn("the database did not answer the commit of too many usage flushes; the oldest are written again and may be counted twice",
		"flushes", extra)
	return slices.Clone(flushes[extra:])
}
