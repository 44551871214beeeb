// Package ratelimit decides, per API key, whether one more request is within
// the key's two limits: requests per minute and requests per day. It is pure
// Go: no HTTP, no SQL, no clock of its own (the caller passes now).
//
// # What "per minute" and "per day" mean
//
// (This section is written for operators; docs/design.md#rate-limits repeats it.)
//
// Each key has two allowances, one for the minute limit and one for the day
// limit, and a request is accepted only when both have room; a rejected
// request uses up neither. An allowance works like a bucket that holds at most
// L requests (L being the limit) and refills steadily:
//
//   - A key that has been idle may send up to L requests at once.
//   - After that it earns back one request every period/L — for 600 per
//     minute, one every 100 ms; for 100,000 per day, one every 0.864 s — so
//     over any long stretch it gets at most L requests per period on average.
//   - After a full period without requests (one minute, or 24 hours) the
//     allowance is full again. It is never more than full: unused requests do
//     not carry over.
//   - Nothing resets on a fixed schedule. "A minute" is any 60 seconds and "a
//     day" is any 24 hours, not a calendar day; there is no reset at the top
//     of the minute or at midnight. A key that spends its whole day at once is
//     not locked out for 24 hours: it may go on at the daily average rate.
//   - In any span of s seconds a key gets at most L + L×s/period requests.
//     So the most it can send within one minute (or one day) is 2L: a full
//     burst of L after being idle, plus the L it earns back during that
//     period. Sustained over longer stretches it is held to L per period.
//
// The response headers describe the tighter of the two allowances (the one
// with fewer requests left; the minute one on a tie): RateLimit-Limit is its
// limit, RateLimit-Remaining how many more requests would be accepted right
// now, RateLimit-Reset the seconds until it is full again. A rejected request
// gets 429 with Retry-After: the seconds until a request would be accepted by
// both allowances.
//
// Limits are resolved by the caller (key override, else workspace default,
// else server default) on every request, so a changed limit applies from the
// next request on. A change keeps the share of the allowance already used: a
// key that had used half its minute has half of its new minute left; lowering
// a limit never lets a key send more, raising one lets it refill faster at
// once.
//
// The day allowance survives a restart (the server persists it about once a
// second; a crash can lose at most the last flush interval of use); the minute
// allowance starts full after a restart. This package is one node's limiter;
// instances started with --redis share the same windows through one Redis
// script of the same arithmetic (internal/redisstate, using Decide).
//
// # Algorithm
//
// Each window is a GCRA (generic cell rate algorithm) state: a theoretical
// arrival time TAT, stored exactly as whole unix nanoseconds plus a fraction
// frac/L of a nanosecond, so the emission interval T = period/L is exact for
// every L (no rounding drift, a burst is exactly L). A request at t is
// accepted by a window when max(TAT, t) + T - t <= period, which then becomes
// the new TAT. Both windows are computed first and committed only if both
// accept. TAT is in time units, so a new limit only changes T; the fraction,
// which is in units of 1/L ns, is rounded up to a whole nanosecond when L
// changes (more conservative by under a nanosecond).
//
// The clock may step backwards: the amount of the allowance in use (TAT - t)
// is then capped at one period, i.e. the window counts as exhausted at the new
// "now" and refills from there. That never grants a request the state before
// the step would not have granted, and it bounds the lockout to one period
// (without the cap a key would be locked out for as long as the clock jumped).
//
// The persisted day state is the day window's TAT rounded up to a whole unix
// nanosecond; callers treat it as opaque (0 means none). Limits below 1 are
// treated as 1 and limits above 1<<40 as 1<<40.
//
// Concurrency: the state lives in 64 shards chosen by a seeded hash of the
// key, each behind its own mutex, and a decision is made and committed under
// that mutex, so N concurrent requests for one key against a limit L accept
// exactly min(N, L). A call for a key that already has state does not
// allocate.
package ratelimit
