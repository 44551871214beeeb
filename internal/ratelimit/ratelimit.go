package ratelimit

import (
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

const (
	minutePeriod = int64(time.Minute)
	dayPeriod    = int64(24 * time.Hour)

	// MaxLimit is the largest limit honoured; larger limits are treated as
	// MaxLimit. Limits below 1 are treated as 1.
	MaxLimit = 1 << 40

	numShards = 64 // power of two
)

// Limits are the resolved limits of one key (key override, else workspace
// default, else server default). Both should be > 0; see the package doc for
// out-of-range values.
type Limits struct {
	PerMinute int
	PerDay    int
}

// Decision is the outcome of one Allow call.
type Decision struct {
	// Allowed reports whether the request is accepted (by both windows).
	Allowed bool
	// Limit is the limit of the tighter window: the one with fewer requests
	// remaining, the minute window on a tie.
	Limit int
	// Remaining is how many more requests that window would accept at now,
	// after this one.
	Remaining int
	// Reset is the time until that window is fully replenished.
	Reset time.Duration
	// RetryAfter, when !Allowed, is the time until a request would be
	// accepted by both windows (in (0, 24h]); 0 when Allowed.
	RetryAfter time.Duration
	// PerMinute and PerDay are the limits applied (after clamping), for
	// headers that name both windows; Day reports that Limit, Remaining and
	// Reset are the day window's.
	PerMinute, PerDay int
	Day               bool
}

// State is the persisted per-day state of one key, as returned by Dirty.
type State struct {
	Key      string
	DayState int64
	// LastAllowed is the time (unix nanoseconds) of the latest request
	// accepted since the state was last returned, 0 if none was. Callers use
	// it as the key's last use, so they need no bookkeeping of their own on
	// the request path.
	LastAllowed int64
}

// Limiter holds the per-key state. The zero value is not usable; use New.
// All methods are safe for concurrent use.
type Limiter struct {
	seed   maphash.Seed
	shards [numShards]shard
	// perShard bounds each shard's keys (0: unbounded); see NewBounded.
	perShard int
	// evicted is the time (unix ns) of the latest eviction, 0 if none.
	evicted atomic.Int64
}

type shard struct {
	mu      sync.Mutex
	keys    map[string]*entry
	dirty   []string // keys whose entry.dirty went false→true since the last Dirty
	orphans []State  // unreported changes of forgotten keys, and restored states
	_       [128 - 64]byte
}

type entry struct {
	min, day window
	dirty    bool  // day state changed since the last Dirty
	allowed  int64 // latest accepted request since the last Dirty (unix ns), 0 if none
}

// window is one GCRA state. The theoretical arrival time is
// tat + frac/lim nanoseconds (unix), 0 <= frac < lim, so that the emission
// interval period/lim = q + r/lim is applied exactly.
type window struct {
	tat  int64
	frac int64
	lim  int64 // limit frac, q and r refer to
	q, r int64 // period / lim, period % lim
}

// New returns an empty Limiter.
func New() *Limiter {
	l := &Limiter{seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].keys = make(map[string]*entry)
	}
	return l
}

// NewBounded returns an empty Limiter that holds at most about maxKeys keys
// (rounded up to a multiple of its 64 shards), for keys a client chooses
// (password throttles). A new key in a full shard evicts the entry, among a
// sample of evictSample, that is closest to fully replenished: the one with
// the least recent use, never one in active use over another less used.
// Evicting forgets counts, so callers that must not lose a count keep such
// keys in an unbounded Limiter, and may ask LastEviction whether counts were
// lost recently.
func NewBounded(maxKeys int) *Limiter {
	l := New()
	l.perShard = max(1, (maxKeys+numShards-1)/numShards)
	return l
}

// evictSample is how many entries a full shard compares to pick the one it
// evicts (as Redis's approximated LRU does).
const evictSample = 8

// LastEviction returns the time of the latest eviction of a bounded
// limiter, the zero time if there was none.
func (l *Limiter) LastEviction() time.Time {
	if n := l.evicted.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// evict drops one entry of the full shard s (locked): of a sample, the one
// whose day window will be replenished first. A change Dirty has not
// returned yet is kept for it, as Forget does.
func (l *Limiter) evict(s *shard, t int64) {
	var victim string
	var ve *entry
	n := 0
	for k, e := range s.keys { // map order: a random start
		if ve == nil || e.day.tat < ve.day.tat || (e.day.tat == ve.day.tat && e.min.tat < ve.min.tat) {
			victim, ve = k, e
		}
		if n++; n == evictSample {
			break
		}
	}
	if ve == nil {
		return
	}
	if ve.dirty {
		s.orphans = append(s.orphans, State{Key: victim, DayState: ve.day.persisted(), LastAllowed: ve.allowed})
	}
	delete(s.keys, victim)
	l.evicted.Store(t)
}

func (l *Limiter) shard(key string) *shard {
	return &l.shards[maphash.String(l.seed, key)&(numShards-1)]
}

func clampLimit(n int) int64 {
	switch {
	case n < 1:
		return 1
	case n > MaxLimit:
		return MaxLimit
	}
	return int64(n)
}

// Allow decides one request of key at now and, if it is accepted, records it
// in both windows; a rejected request changes neither. The limiter keeps key
// itself (no copy), so pass a string that does not pin a larger buffer; a
// caller passing the same string on every call also saves comparing its
// bytes on each lookup. dayState is the
// persisted per-day state of the key (0 if none); it is used only when the
// limiter holds no state for the key (first use, after a restart, after Sweep
// or Forget).
func (l *Limiter) Allow(key string, lim Limits, now time.Time, dayState int64) Decision {
	t := now.UnixNano()
	lm, ld := clampLimit(lim.PerMinute), clampLimit(lim.PerDay)
	s := l.shard(key)

	s.mu.Lock()
	e := s.keys[key]
	if e == nil {
		e = &entry{min: window{tat: t}, day: window{tat: t}}
		if dayState != 0 {
			e.day.tat = dayState
		}
		if l.perShard > 0 && len(s.keys) >= l.perShard {
			l.evict(s, t)
		}
		s.keys[key] = e // kept, not copied: see Allow
	}
	e.min.prepare(t, minutePeriod, lm)
	dayChanged := e.day.prepare(t, dayPeriod, ld)

	mt, mf := e.min.next()
	dt, df := e.day.next()
	mOK := fits(mt-t, mf, minutePeriod)
	dOK := fits(dt-t, df, dayPeriod)

	d := Decision{PerMinute: int(lm), PerDay: int(ld)}
	if mOK && dOK {
		d.Allowed = true
		e.min.tat, e.min.frac = mt, mf
		e.day.tat, e.day.frac = dt, df
		dayChanged = true
		e.allowed = max(e.allowed, t)
	} else {
		// Each rejecting window accepts from t + (next - period) on, rounded
		// up to a whole nanosecond; the other window accepts already.
		var retry int64
		if !mOK {
			retry = mt - t - minutePeriod + ceil(mf)
		}
		if !dOK {
			retry = max(retry, dt-t-dayPeriod+ceil(df))
		}
		d.RetryAfter = time.Duration(retry)
	}
	if dayChanged && !e.dirty {
		e.dirty = true
		s.dirty = append(s.dirty, key)
	}

	mRem, dRem := e.min.remaining(t, minutePeriod), e.day.remaining(t, dayPeriod)
	if mRem <= dRem {
		d.Limit, d.Remaining, d.Reset = int(lm), int(mRem), e.min.untilFull(t)
	} else {
		d.Limit, d.Remaining, d.Reset, d.Day = int(ld), int(dRem), e.day.untilFull(t), true
	}
	s.mu.Unlock()
	return d
}

// Dirty returns the per-day state of every key whose day state changed since
// the previous call, in no particular order (nil if none), with the time of
// its latest request accepted since then (every accepted request changes the
// day state). The caller persists it and passes DayState back as Allow's
// dayState when the limiter has no state for the key (e.g. after a restart).
// Each key is returned once, except a key forgotten (or restored) and used
// again since the previous call: its older state comes first.
func (l *Limiter) Dirty() []State {
	var out []State
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		out = append(out, s.orphans...)
		s.orphans = nil
		for _, k := range s.dirty {
			// A key may be listed twice if it was forgotten and came back;
			// the dirty flag makes it reported once.
			if e := s.keys[k]; e != nil && e.dirty {
				e.dirty = false
				out = append(out, State{Key: k, DayState: e.day.persisted(), LastAllowed: e.allowed})
				e.allowed = 0
			}
		}
		if cap(s.dirty) > 4096 {
			s.dirty = nil // do not keep a burst's worth of capacity forever
		} else {
			clear(s.dirty)
			s.dirty = s.dirty[:0]
		}
		s.mu.Unlock()
	}
	return out
}

// Sweep drops the state of keys whose both windows are fully replenished at
// now, which is the same as having no state, and returns how many it dropped;
// memory stays bounded by the keys used in the last 24 hours. Keys whose
// changes Dirty has not returned yet are kept (until a Sweep after the next
// Dirty), so nothing Dirty owes the caller is lost: call Dirty and persist
// before Sweep.
func (l *Limiter) Sweep(now time.Time) int {
	t := now.UnixNano()
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for k, e := range s.keys {
			if !e.dirty && e.min.full(t) && e.day.full(t) {
				delete(s.keys, k)
				n++
			}
		}
		s.mu.Unlock()
	}
	return n
}

// Forget drops the state of key (e.g. after its revocation): its next Allow
// starts from the dayState passed in. A change Dirty has not returned yet is
// still returned by the next Dirty, so that the key's last use is persisted.
func (l *Limiter) Forget(key string) {
	s := l.shard(key)
	s.mu.Lock()
	if e := s.keys[key]; e != nil {
		if e.dirty {
			s.orphans = append(s.orphans, State{Key: key, DayState: e.day.persisted(), LastAllowed: e.allowed})
		}
		delete(s.keys, key)
	}
	s.mu.Unlock()
}

// Restore hands back states that Dirty returned but the caller could not
// persist: the next Dirty returns them again. A key with newer changes is
// then returned twice, the older state first.
func (l *Limiter) Restore(states []State) {
	for _, st := range states {
		s := l.shard(st.Key)
		s.mu.Lock()
		s.orphans = append(s.orphans, st)
		s.mu.Unlock()
	}
}

// Len returns how many keys the limiter holds state for.
func (l *Limiter) Len() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += len(s.keys)
		s.mu.Unlock()
	}
	return n
}

// prepare brings w to limit lim at time t: it converts the fraction when the
// limit changed, forgets time already replenished (TAT before t means full),
// and caps the allowance in use at one period (the clock went backwards, or a
// persisted state is from the future). It reports whether the persisted value
// of the state changed.
func (w *window) prepare(t, period, lim int64) bool {
	if w.lim != lim {
		if w.frac > 0 {
			// frac is in units of 1/w.lim ns; round up to keep it exact and
			// conservative. The persisted value is unchanged.
			w.tat++
			w.frac = 0
		}
		w.lim, w.q, w.r = lim, period/lim, period%lim
	}
	if w.tat < t {
		// Fully replenished; equivalent to any TAT <= t, so not a change.
		w.tat, w.frac = t, 0
		return false
	}
	d := w.tat - t // >= 0 unless it overflowed
	if d < 0 || d > period || (d == period && w.frac > 0) {
		w.tat, w.frac = t+period, 0
		return true
	}
	return false
}

// next returns the TAT after one more request from the prepared state.
func (w *window) next() (tat, frac int64) {
	tat, frac = w.tat+w.q, w.frac+w.r
	if frac >= w.lim {
		tat, frac = tat+1, frac-w.lim
	}
	return tat, frac
}

// fits reports whether a TAT of t + d + frac/lim ns is within one period of t.
func fits(d, frac, period int64) bool {
	return d < period || (d == period && frac == 0)
}

// remaining is how many more requests the prepared window would accept at t:
// floor((period - (TAT - t)) / (period/lim)) = floor(((period-d)*lim - frac) / period).
func (w *window) remaining(t, period int64) int64 {
	d := w.tat - t // in [0, period] after prepare; d == period implies frac == 0
	if d < 0 || d > period {
		return 0 // not reached
	}
	hi, lo := bits.Mul64(uint64(period-d), uint64(w.lim)) // #nosec G115 -- d is in [0, period] (checked above) and lim > 0: both non-negative
	lo, borrow := bits.Sub64(lo, uint64(w.frac), 0)       // #nosec G115 -- frac is in [0, period): non-negative
	hi -= borrow
	// #nosec G115 -- period > 0
	if hi >= uint64(period) { // not reached: the quotient is at most lim
		return w.lim
	}
	n, _ := bits.Div64(hi, lo, uint64(period)) // #nosec G115 -- period > 0
	return int64(min(n, uint64(w.lim)))        // #nosec G115 -- lim > 0, and the result is at most lim
}

// untilFull is the time from t until the prepared window is fully replenished.
func (w *window) untilFull(t int64) time.Duration {
	return time.Duration(w.tat - t + ceil(w.frac))
}

// full reports whether the window is fully replenished at t (TAT <= t), which
// is the same as having no state.
func (w *window) full(t int64) bool {
	return w.tat < t || (w.tat == t && w.frac == 0)
}

// persisted is the TAT rounded up to a whole nanosecond.
func (w *window) persisted() int64 {
	return w.tat + ceil(w.frac)
}

func ceil(frac int64) int64 {
	if frac > 0 {
		return 1
	}
	return 0
}
