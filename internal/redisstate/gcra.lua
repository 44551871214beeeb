-- The two-window GCRA of internal/ratelimit, decided and committed in one
-- atomic step (see that package for the algorithm; the names match).
--
-- KEYS: [revision token, state] for a key check (one hash slot: both carry
--       the workspace's hash tag); [state] for a throttle.
-- ARGV: 1 token seen ('' matches none); 2 the numbers, little-endian
--       doubles (struct.pack: no text to parse): minute limit, day limit
--       (both clamped), stored day state (unix s, ns; 0 0 if none) and, when
--       the caller's clock is the one, now (unix s, ns; absent for the
--       server's clock); 3 this instance's random value (for a new token).
--
-- Lua numbers are doubles: every value below stays under 2^53 by working on
-- differences from now (at most one day, 8.64e13 ns) and keeping absolute
-- times as whole seconds plus nanoseconds. The state is stored as eight
-- little-endian doubles (struct.pack: 64 bytes, no formatting or parsing
-- of text): minute TAT s, ns, fraction, limit; day TAT s, ns, fraction,
-- limit.
--
-- Cost (docs/clusters.md#what-a-key-check-costs): one MGET, one TIME, one
-- SET; the token's SET only when it is missing.
--
-- Returns one string: 'S' .. token when the seen token is not the current
-- one (nothing counted), else 'A' or 'R' followed by six little-endian
-- doubles (struct.pack: minute d, minute frac, day d, day frac, day state
-- s, day state ns, every one a whole number under 2^53): the windows'
-- states relative to now after the decision, from which the caller builds
-- the Decision (ratelimit.Decide) with the limiter's own arithmetic. One
-- bulk string rather than an array of seven: the client parses one reply,
-- not seven (docs/clusters.md#what-a-key-check-costs).
local NS = 1000000000
local MP = 60 * NS
local DP = 86400 * NS
local floor = math.floor

local st
if #KEYS == 2 then
  local v = redis.call('MGET', KEYS[1], KEYS[2])
  local token
  token, st = v[1], v[2]
  if not token then
    -- No revision yet, or it was lost (Redis restarted empty, evicted, a
    -- replica that never had it): a new token unlike any before makes
    -- every instance read its cached records of the workspace again. A
    -- missing token must never read as an old value, or a record cached
    -- before a revoke would pass.
    local t = redis.call('TIME')
    token = ARGV[3] .. ':' .. t[1] .. '.' .. t[2]
    redis.call('SET', KEYS[1], token)
  end
  if token ~= ARGV[1] then
    return 'S' .. token
  end
else
  st = redis.call('GET', KEYS[1])
end

local lm, ld, seedS, seedN = struct.unpack('<dddd', ARGV[2])
local ts, tn
if #ARGV[2] == 48 then
  ts, tn = struct.unpack('<dd', ARGV[2], 33)
else
  local t = redis.call('TIME')
  ts, tn = tonumber(t[1]), tonumber(t[2]) * 1000
end

-- prepare: convert the fraction when the limit changed (rounding up), forget
-- replenished time, cap the allowance in use at one period.
local function prepare(d, frac, oldlim, lim, period)
  if oldlim ~= lim and frac > 0 then
    d, frac = d + 1, 0
  end
  if d < 0 then
    return 0, 0
  end
  if d > period or (d == period and frac > 0) then
    return period, 0
  end
  return d, frac
end

-- interval: period = q*lim + r exactly (the double quotient may be one off).
local function interval(period, lim)
  local q = floor(period / lim)
  local r = period - q * lim
  if r < 0 then
    q, r = q - 1, r + lim
  elseif r >= lim then
    q, r = q + 1, r - lim
  end
  return q, r
end

local md, mf, dd, df = 0, 0, 0, 0
if st and #st == 64 then
  local ms, mn, mf0, lm0, ds, dn, df0, ld0 = struct.unpack('<dddddddd', st)
  md, mf = prepare((ms - ts) * NS + (mn - tn), mf0, lm0, lm, MP)
  dd, df = prepare((ds - ts) * NS + (dn - tn), df0, ld0, ld, DP)
elseif seedS ~= 0 or seedN ~= 0 then
  dd, df = prepare((seedS - ts) * NS + (seedN - tn), 0, ld, ld, DP)
end

-- next: one more request's emission interval on each window.
local q, r = interval(MP, lm)
local mt, mtf = md + q, mf + r
if mtf >= lm then
  mt, mtf = mt + 1, mtf - lm
end
q, r = interval(DP, ld)
local dt, dtf = dd + q, df + r
if dtf >= ld then
  dt, dtf = dt + 1, dtf - ld
end
local verdict = 'R'
if (mt < MP or (mt == MP and mtf == 0)) and (dt < DP or (dt == DP and dtf == 0)) then
  verdict = 'A'
  md, mf, dd, df = mt, mtf, dt, dtf
end

local a = tn + md
local s = floor(a / NS)
local ms, mn = ts + s, a - s * NS
a = tn + dd
s = floor(a / NS)
local ds, dn = ts + s, a - s * NS
local ttl = md
if dd > ttl then
  ttl = dd
end
redis.call('SET', KEYS[#KEYS], struct.pack('<dddddddd', ms, mn, mf, lm, ds, dn, df, ld),
  'PX', floor(ttl / 1000000) + 1000)
if df > 0 then
  dn = dn + 1
end
return verdict .. struct.pack('<dddddd', md, mf, dd, df, ds, dn)
