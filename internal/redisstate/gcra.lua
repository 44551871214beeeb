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
-- SET; the token's SET only when it is missing. The code is straight-line
-- on purpose: no closures made per call, no math.floor calls (x - x % 1 is
-- the floor of a non-negative x, computed by the VM), the TTL formatted as
-- an integer by string.format (Redis would format a number argument with
-- %.17g), one struct.pack for the answer; together 8 % fewer instructions
-- per check than with helper functions (callgrind on redis-server).
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

local nums = ARGV[2]
local lm, ld, seedS, seedN, ts, tn
if #nums == 48 then
  lm, ld, seedS, seedN, ts, tn = struct.unpack('<dddddd', nums)
else
  lm, ld, seedS, seedN = struct.unpack('<dddd', nums)
  local t = redis.call('TIME')
  ts, tn = tonumber(t[1]), tonumber(t[2]) * 1000
end

-- The windows relative to now, prepared: the fraction converted (rounding
-- up) when the limit changed, replenished time forgotten, the allowance in
-- use capped at one period.
local md, mf, dd, df = 0, 0, 0, 0
if st and #st == 64 then
  local ms, mn, mf0, lm0, ds, dn, df0, ld0 = struct.unpack('<dddddddd', st)
  md, mf = (ms - ts) * NS + (mn - tn), mf0
  if lm0 ~= lm and mf > 0 then md, mf = md + 1, 0 end
  if md < 0 then md, mf = 0, 0 elseif md > MP or (md == MP and mf > 0) then md, mf = MP, 0 end
  dd, df = (ds - ts) * NS + (dn - tn), df0
  if ld0 ~= ld and df > 0 then dd, df = dd + 1, 0 end
  if dd < 0 then dd, df = 0, 0 elseif dd > DP or (dd == DP and df > 0) then dd, df = DP, 0 end
elseif seedS ~= 0 or seedN ~= 0 then
  dd = (seedS - ts) * NS + (seedN - tn)
  if dd < 0 then dd = 0 elseif dd > DP then dd = DP end
end

-- One more request's emission interval on each window: period = q*lim + r
-- exactly (the double quotient may be one off).
local q = MP / lm
q = q - q % 1
local r = MP - q * lm
if r < 0 then q, r = q - 1, r + lm elseif r >= lm then q, r = q + 1, r - lm end
local mt, mtf = md + q, mf + r
if mtf >= lm then mt, mtf = mt + 1, mtf - lm end
q = DP / ld
q = q - q % 1
r = DP - q * ld
if r < 0 then q, r = q - 1, r + ld elseif r >= ld then q, r = q + 1, r - ld end
local dt, dtf = dd + q, df + r
if dtf >= ld then dt, dtf = dt + 1, dtf - ld end
local verdict = 'R'
if (mt < MP or (mt == MP and mtf == 0)) and (dt < DP or (dt == DP and dtf == 0)) then
  verdict = 'A'
  md, mf, dd, df = mt, mtf, dt, dtf
end

-- Back to absolute times (whole seconds and nanoseconds; a >= 0).
local a = tn + md
local s = a / NS
s = s - s % 1
local ms, mn = ts + s, a - s * NS
a = tn + dd
s = a / NS
s = s - s % 1
local ds, dn = ts + s, a - s * NS
local ttl = md
if dd > ttl then ttl = dd end
ttl = ttl / 1000000
redis.call('SET', KEYS[#KEYS], struct.pack('<dddddddd', ms, mn, mf, lm, ds, dn, df, ld),
  'PX', string.format('%d', ttl + 1000))
if df > 0 then dn = dn + 1 end
return struct.pack('<c1dddddd', verdict, md, mf, dd, df, ds, dn)
