#!lua flags=allow-cross-slot-keys
-- gcra.lua for many key checks in one call: the same decisions, in the
-- order of the checks, as that many calls of gcra.lua would make one after
-- the other. A measured alternative, not btk's path (batch_test.go;
-- docs/clusters.md#what-a-key-check-costs).
--
-- ARGV: 1 this instance's random value (for a new token); then four per
--       check: revision key, state key, token seen, numbers (gcra.lua's
--       KEYS[1], KEYS[2], ARGV[1], ARGV[2]).
--
-- The keys come as arguments, not KEYS: on Redis Cluster the keys of one
-- call span hash slots (of one node), which declared keys may not
-- (CROSSSLOT); the flag allows the script's commands to use them.
--
-- Every key is read before anything is written. A key this node does not
-- serve (its slot moved away, or it is missing in a slot being migrated)
-- fails the script at its read, before any write: a failed call changed
-- nothing, and the caller checks each again on its own. Once the reads
-- succeeded, the writes go to the same slots of the same node, within one
-- atomic script: they cannot fail for the cluster.
--
-- Returns an array: each check's answer, as gcra.lua's.
local NS = 1000000000
local MP = 60 * NS
local DP = 86400 * NS
local floor = math.floor

local n = (#ARGV - 1) / 4
local vals = {} -- key: its value, read or written by an earlier check; false when missing
for i = 0, n - 1 do
  local rk, sk = ARGV[2 + 4 * i], ARGV[3 + 4 * i]
  if vals[rk] == nil then
    local v = redis.call('MGET', rk, sk)
    vals[rk] = v[1]
    if vals[sk] == nil then
      vals[sk] = v[2]
    end
  elseif vals[sk] == nil then
    vals[sk] = redis.call('GET', sk)
  end
end

local ts0, tn0
local function now()
  if not ts0 then
    local t = redis.call('TIME')
    ts0, tn0 = tonumber(t[1]), tonumber(t[2])
  end
  return ts0, tn0
end

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

local out = {}
local newTokens = {} -- revision keys given a token, in order
local states = {}    -- state keys written, in order
local ttls = {}      -- state key: its expiry (ms)
for i = 0, n - 1 do
  local rk, sk, seen, nums = ARGV[2 + 4 * i], ARGV[3 + 4 * i], ARGV[4 + 4 * i], ARGV[5 + 4 * i]
  local token = vals[rk]
  if not token then
    local s, us = now()
    token = ARGV[1] .. ':' .. s .. '.' .. us
    vals[rk] = token
    newTokens[#newTokens + 1] = rk
  end
  if token ~= seen then
    out[i + 1] = 'S' .. token
  else
    local st = vals[sk]
    local lm, ld, seedS, seedN = struct.unpack('<dddd', nums)
    local ts, tn
    if #nums == 48 then
      ts, tn = struct.unpack('<dd', nums, 33)
    else
      ts, tn = now()
      tn = tn * 1000
    end
    local md, mf, dd, df = 0, 0, 0, 0
    if st and #st == 64 then
      local ms, mn, mf0, lm0, ds, dn, df0, ld0 = struct.unpack('<dddddddd', st)
      md, mf = prepare((ms - ts) * NS + (mn - tn), mf0, lm0, lm, MP)
      dd, df = prepare((ds - ts) * NS + (dn - tn), df0, ld0, ld, DP)
    elseif seedS ~= 0 or seedN ~= 0 then
      dd, df = prepare((seedS - ts) * NS + (seedN - tn), 0, ld, ld, DP)
    end
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
    if ttls[sk] == nil then
      states[#states + 1] = sk
    end
    vals[sk] = struct.pack('<dddddddd', ms, mn, mf, lm, ds, dn, df, ld)
    ttls[sk] = floor(ttl / 1000000) + 1000
    if df > 0 then
      dn = dn + 1
    end
    out[i + 1] = verdict .. struct.pack('<dddddd', md, mf, dd, df, ds, dn)
  end
end

for _, rk in ipairs(newTokens) do
  redis.call('SET', rk, vals[rk])
end
for _, sk in ipairs(states) do
  redis.call('SET', sk, vals[sk], 'PX', ttls[sk])
end
return out
