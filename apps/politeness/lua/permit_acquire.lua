-- domain_permit_acquire (apps/politeness/limiter.py): one domain's token, slot and line.
-- KEYS: state hash, slots zset, the job's ticket, adapt hash. ARGV: policy rate/s, burst, cap,
-- holder, slot ttl (s) (0: a token only, for a redirect hop within the domain whose slot the
-- fetch already holds), ticket grace (s).
-- Returns {granted 0/1, wait ms, reason}. Reasons: cooldown (a Retry-After or robots.txt pause),
-- queue (deferred jobs are booked ahead of this one), concurrency, rate (the policy's, the
-- adaptive rate or the robots.txt Crawl-delay, whichever is lowest).
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local ceiling, burst, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local holder, slot_ttl, grace = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
-- The rate in force: the adaptive rate (outcome_record.lua) and 1 / Crawl-delay (robots.txt)
-- lower the policy's; the burst shrinks in proportion, so a throttled domain does not get a full
-- bucket of back-to-back requests after a quiet spell.
local a = redis.call('HMGET', KEYS[4], 'rate', 'crawl')
local rate = math.min(ceiling, tonumber(a[1]) or ceiling)
local crawl = tonumber(a[2]) or 0
if crawl > 0 then rate = math.min(rate, 1 / crawl) end
burst = math.max(1, math.floor(burst * rate / ceiling))
local s = redis.call('HMGET', KEYS[1], 'tokens', 'ts', 'next', 'cooldown')
local tokens = tonumber(s[1]) or burst
local ts = tonumber(s[2]) or now
local nxt = tonumber(s[3]) or 0
local cooldown = tonumber(s[4]) or 0
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
local ticket = redis.call('EXISTS', KEYS[3]) == 1
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local reason, wait = '', 0
if cooldown > now then
  reason, wait = 'cooldown', cooldown - now
elseif (not ticket) and nxt > now then
  reason, wait = 'queue', nxt - now
elseif slot_ttl > 0 and redis.call('ZCARD', KEYS[2]) >= cap then
  reason, wait = 'concurrency', 1 / rate
elseif tokens < 1 then
  reason, wait = 'rate', (1 - tokens) / rate
end
local granted = 0
if reason == '' then
  granted = 1
  tokens = tokens - 1
  if slot_ttl > 0 then
    redis.call('ZADD', KEYS[2], string.format('%.6f', now + slot_ttl), holder)
    -- The set lives as long as its longest holder (holders have different timeouts).
    local keep = math.ceil((slot_ttl + 1) * 1000)
    if redis.call('PTTL', KEYS[2]) < keep then redis.call('PEXPIRE', KEYS[2], keep) end
  end
  redis.call('DEL', KEYS[3])
elseif ticket and reason == 'rate' then
  -- A booked job back a moment before its token (several booked jobs can come back in one
  -- publisher tick): it keeps its place and its ticket, and tries again when the token is due.
  redis.call('PEXPIRE', KEYS[3], math.ceil((wait + grace) * 1000))
else
  -- Book the next place in the domain's line, 1/rate after the last one booked.
  local at = math.max(nxt, now + wait)
  nxt = at + 1 / rate
  wait = at - now
  redis.call('SET', KEYS[3], '1', 'PX', math.ceil((wait + grace) * 1000))
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens), 'ts', string.format('%.6f', now),
           'next', string.format('%.6f', nxt))
local horizon = math.max(nxt, cooldown, now + burst / rate) - now + 60
redis.call('PEXPIRE', KEYS[1], math.ceil(horizon * 1000))
return {granted, math.ceil(wait * 1000), reason}
