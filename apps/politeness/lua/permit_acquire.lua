-- domain_permit_acquire (apps/politeness/limiter.py): one domain's token and slot, in the order of
-- the domain's line (NFR-9, NFR-10 at the gate; docs/design/politeness.md, "The line at a busy
-- domain").
-- KEYS: 1 state hash, 2 slots zset, 3 adapt hash, 4 fair hash, 5 lapses zset, 6..8 the lines
-- (zsets) of priorities high, normal, low.
-- ARGV: 1 policy rate/s, 2 burst, 3 cap, 4 holder, 5 slot ttl (s) (0: a token only, for a
-- redirect hop within the domain whose slot the fetch already holds), 6 member (the job's name in
-- the line), 7 its priority (1 high, 2 normal, 3 low), 8 its tenant, 9 the tenant's weight,
-- 10 hold (s): how long past its expected turn a place is kept for a job that has not come back,
-- 11..13 the priorities' weights (SCRAPEJOBS_PRIORITY_WEIGHTS), 14 the adaptive rate's recovery
-- step (rate per s per s; 0: adaptation off).
-- Returns {granted 0/1, wait ms, reason, place}. Reasons: cooldown (a Retry-After or robots.txt
-- pause), queue (other jobs come first in the line), concurrency, rate (the policy's, the adaptive
-- rate or the robots.txt Crawl-delay, whichever is lowest). place: how many permits go to others
-- before this job's (0: it is next).
--
-- The line. While nobody waits, a job with a permit free takes it (the common case: no line
-- command runs). Once one job is refused, every job asking for the domain takes a place: in its
-- priority's line by start-time fair queueing over tenants (a tenant's next job is tagged 1/weight
-- after its previous one, and no earlier than the line's virtual time, so a tenant that comes
-- late is not owed the past); across the three lines by smooth weighted round robin with the
-- priorities' weights, as the publisher shares the pool's slots. A job is granted when its place
-- is within the permits free now, and keeps its place when refused: it is told to come back when
-- the permits before it are due, and its place lapses `hold` seconds after that (its job was
-- cancelled, finished elsewhere, or its worker died). When the permits before it are due is
-- reckoned with the rate as it will be: an adaptive rate below its top climbs back while answers
-- come (outcome_record.lua), so the job is told the time at that climbing rate. Told at the rate
-- of now, the jobs deep in a line came back long after their turn once the rate had recovered,
-- and the domain's permits went unused while its jobs waited; told early, a job is refused again
-- and told again, keeping its place.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local ceiling, burst, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local holder, slot_ttl, member = ARGV[4], tonumber(ARGV[5]), ARGV[6]
local p, tenant, weight, hold = tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[10])
local w = {tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])}
local step = tonumber(ARGV[14]) or 0
local rate, tokens, cooldown, queued, slots_until, top
rate, burst, tokens, cooldown, queued, slots_until, top = bucket_read(KEYS[1], KEYS[3], ceiling, burst, now)  -- bucket.lua

-- Seconds until `n` more permits have been given, the rate climbing from `rate` by `step` per
-- second until it reaches `top` (at `rate` throughout when it does not climb).
local function permits_due_in(n)
  if n <= 0 then return 0 end
  if step <= 0 or rate >= top then return n / rate end
  local climb = (top - rate) / step
  local by_top = rate * climb + step * climb * climb / 2
  if n <= by_top then return (math.sqrt(rate * rate + 2 * step * n) - rate) / step end
  return climb + (n - by_top) / top
end
-- The permits free now: whole tokens, and slots below the cap (a hop's token needs no slot).
-- Holders past their expiry (killed workers) are pruned only when they could matter: with no
-- holder (the common case: the set is gone) there is nothing to prune, and while the set's count,
-- stale holders included, leaves more room than there are tokens, the tokens decide and the count
-- is not needed exactly (so the set never holds more than cap members).
local free, capped, held = math.floor(tokens), false, 0
if slot_ttl > 0 then
  held = redis.call('ZCARD', KEYS[2])
  if held > 0 and cap - held <= free then
    held = held - redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  end
  local room = cap - held
  if room <= free then free, capped = math.max(0, room), true end
end
if cooldown > now then free = 0 end

local granted, place, wait, reason = 0, 0, 0, ''
local line_horizon = 0
if queued == 0 and free >= 1 then
  granted = 1
else
  local lines = {KEYS[6], KEYS[7], KEYS[8]}
  local entry = p .. '\t' .. tenant .. '\t' .. member
  -- Places that lapsed: their jobs did not come back in time.
  local gone = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now)
  for _, e in ipairs(gone) do
    local q, m = string.match(e, '^(%d)\t[^\t]*\t(.*)$')
    if q then redis.call('ZREM', lines[tonumber(q)], m) end
  end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now) end
  -- This job's place in its priority's line: kept, or taken now behind its tenant's last one.
  local tag = tonumber(redis.call('ZSCORE', lines[p], member))
  if not tag then
    local f = redis.call('HMGET', KEYS[4], 'v' .. p, 'f' .. p .. ':' .. tenant)
    tag = math.max(tonumber(f[1]) or 0, tonumber(f[2]) or 0) + 1 / weight
    redis.call('ZADD', lines[p], string.format('%.17g', tag), member)
    redis.call('HSET', KEYS[4], 'f' .. p .. ':' .. tenant, string.format('%.17g', tag))
  end
  local rank = redis.call('ZRANK', lines[p], member)
  local len = {redis.call('ZCARD', lines[1]), redis.call('ZCARD', lines[2]), redis.call('ZCARD', lines[3])}
  local c = redis.call('HMGET', KEYS[4], 'c1', 'c2', 'c3')
  local credit = {}
  for q = 1, 3 do credit[q] = (len[q] > 0) and (tonumber(c[q]) or 0) or 0 end
  -- Its place across the lines: the round robin played forward from where it stands, as far as
  -- the line is long (at most 1,000 picks; past that an estimate by the weights).
  local sim, left = {credit[1], credit[2], credit[3]}, {len[1], len[2], len[3]}
  local steps, mine, horizon = 0, 0, math.min(len[1] + len[2] + len[3], 1000)
  place = -1
  if len[1] + len[2] + len[3] == len[p] then place = rank; horizon = 0 end  -- its line alone
  while steps < horizon do
    local total, best = 0, nil
    for q = 1, 3 do
      if left[q] > 0 then
        total = total + w[q]
        sim[q] = sim[q] + w[q]
        if best == nil or sim[q] > sim[best] then best = q end
      end
    end
    sim[best] = sim[best] - total
    left[best] = left[best] - 1
    if best == p then
      if mine == rank then place = steps break end
      mine = mine + 1
    end
    steps = steps + 1
  end
  if place < 0 then
    place = rank
    for q = 1, 3 do
      if q ~= p then place = place + math.min(len[q], math.ceil((rank + 1) * w[q] / w[p])) end
    end
  end
  if place < free then
    granted = 1
    redis.call('ZREM', lines[p], member)
    redis.call('ZREM', KEYS[5], entry)
    -- The round robin moves on by this pick; the line's virtual time to this job's start.
    local total = 0
    for q = 1, 3 do
      if len[q] > 0 then total = total + w[q]; credit[q] = credit[q] + w[q] end
    end
    credit[p] = credit[p] - total
    queued = len[1] + len[2] + len[3] - 1
    if queued == 0 then
      redis.call('DEL', KEYS[4], KEYS[5])
    else
      local v = math.max(tonumber(redis.call('HGET', KEYS[4], 'v' .. p)) or 0, tag - 1 / weight)
      redis.call('HSET', KEYS[4], 'c1', credit[1], 'c2', credit[2], 'c3', credit[3],
                 'v' .. p, string.format('%.17g', v))
    end
  else
    -- Come back when the permits before this one are due; the place is kept until `hold` after.
    if cooldown > now then
      reason, wait = 'cooldown', cooldown - now + place / rate
    else
      wait = permits_due_in(place + 1 - tokens)
      if place > 0 then
        reason = 'queue'
      elseif capped then
        reason = 'concurrency'
      else
        reason = 'rate'
      end
      -- Slots free as fetches end, which the gate cannot foresee: the estimate is the rate's.
      if capped then wait = math.max(wait, permits_due_in(place + 1)) end
    end
    redis.call('ZADD', KEYS[5], string.format('%.6f', now + wait + hold), entry)
    queued = len[1] + len[2] + len[3]
  end
  if queued > 0 then
    -- The line's keys live as long as its last place can.
    local last = redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')
    line_horizon = ((tonumber(last[2]) or now) - now) + 60
    local keep = math.ceil(line_horizon * 1000)
    for _, key in ipairs({lines[1], lines[2], lines[3], KEYS[4], KEYS[5]}) do
      redis.call('PEXPIRE', key, keep)
    end
  end
end
if granted == 1 then
  tokens = tokens - 1
  if slot_ttl > 0 then
    redis.call('ZADD', KEYS[2], string.format('%.6f', now + slot_ttl), holder)
    -- The set lives as long as its longest holder (holders have different timeouts). When it
    -- expires is kept in the state hash ('slots', which outlives the set: its horizon below), so
    -- no PTTL is asked; a set this ZADD created (held 0) has no expiry yet whatever was kept.
    local keep_until = now + slot_ttl + 1
    if slots_until == nil and held > 0 then
      local left = redis.call('PTTL', KEYS[2])  -- not recorded (a hash written before it was)
      slots_until = (left > 0) and (now + left / 1000) or 0
    end
    if held == 0 or keep_until > (slots_until or 0) then
      redis.call('PEXPIRE', KEYS[2], math.ceil((slot_ttl + 1) * 1000))
      slots_until = keep_until
    end
  end
end
local fields = {'tokens', string.format('%.6f', tokens), 'ts', string.format('%.6f', now), 'queued', queued}
if slots_until then
  fields[#fields + 1], fields[#fields + 2] = 'slots', string.format('%.6f', slots_until)
end
redis.call('HSET', KEYS[1], unpack(fields))
local horizon = math.max(cooldown - now, burst / rate, line_horizon, (slots_until or now) - now) + 60
redis.call('PEXPIRE', KEYS[1], math.ceil(horizon * 1000))
return {granted, math.ceil(wait * 1000), reason, place}
