package ratelimit

import "time"

// Periods of the two windows, in nanoseconds, for implementations kept
// elsewhere (the Redis script of internal/redisstate).
const (
	MinutePeriod = minutePeriod
	DayPeriod    = dayPeriod
)

// Clamp returns the limits as the limiter honours them (see the package doc).
func (lim Limits) Clamp() (perMinute, perDay int64) {
	return clampLimit(lim.PerMinute), clampLimit(lim.PerDay)
}

// Relative is one window's state seen from the moment t of a decision: its
// theoretical arrival time is t + D + Frac/lim ns, with 0 <= D <= period
// and 0 <= Frac < lim (the state after the limiter's preparation: replenished
// time forgotten, in-use capped at one period, converted to the current limit).
type Relative struct {
	D, Frac int64
}

// Decide builds the Decision of a request from the two windows' states after
// it was decided (committed when allowed, prepared only when refused), with
// the same arithmetic as Limiter.Allow, so that an implementation keeping the
// windows elsewhere answers exactly what the in-memory limiter would.
func Decide(lim Limits, allowed bool, minute, day Relative) Decision {
	lm, ld := lim.Clamp()
	m := window{tat: minute.D, frac: minute.Frac, lim: lm, q: minutePeriod / lm, r: minutePeriod % lm}
	dw := window{tat: day.D, frac: day.Frac, lim: ld, q: dayPeriod / ld, r: dayPeriod % ld}
	d := Decision{Allowed: allowed, PerMinute: int(lm), PerDay: int(ld)}
	if !allowed {
		mt, mf := m.next()
		dt, df := dw.next()
		var retry int64
		if !fits(mt, mf, minutePeriod) {
			retry = mt - minutePeriod + ceil(mf)
		}
		if !fits(dt, df, dayPeriod) {
			retry = max(retry, dt-dayPeriod+ceil(df))
		}
		d.RetryAfter = time.Duration(retry)
	}
	mRem, dRem := m.remaining(0, minutePeriod), dw.remaining(0, dayPeriod)
	if mRem <= dRem {
		d.Limit, d.Remaining, d.Reset = int(lm), int(mRem), m.untilFull(0)
	} else {
		d.Limit, d.Remaining, d.Reset, d.Day = int(ld), int(dRem), dw.untilFull(0), true
	}
	return d
}
