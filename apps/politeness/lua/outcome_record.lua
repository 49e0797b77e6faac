-- domain_outcome_record (apps/politeness/limiter.py): a target's answer, the domain's adaptive
-- rate and its Retry-After pause.
-- KEYS: state hash, adapt hash, outcomes list. ARGV: retry-after s (0: none), bad 0/1 (429, 503
-- or a timeout), adapt 0/1, policy rate/s, floor rate/s, window (answers), minimum answers before
-- a cut, bad share that cuts, recovery step (rate per s per s), max pause s, adapt state ttl s,
-- pause wanted 0/1 (absent: 1).
-- Returns {pause left in ms (0: none; 0 also when not wanted and the answer had no Retry-After:
-- then the pause is not read), adaptive rate as a string ('' when not adapting)}.
--
-- AIMD, as TCP and Scrapy's AutoThrottle: every good answer raises the rate by step x the time
-- since the last answer (additive, capped at the policy's rate); a bad answer that brings the
-- window's bad share above the threshold halves it (never below the floor) and empties the
-- window, so the next cut is judged on answers given at the new rate (one cut per window, not
-- one per bad answer).
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local retry_after, bad, adapt = tonumber(ARGV[1]), ARGV[2] == '1', ARGV[3] == '1'
local ceiling, floor = tonumber(ARGV[4]), tonumber(ARGV[5])
local window, min_n, share, step = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local max_pause, ttl = tonumber(ARGV[10]), tonumber(ARGV[11])
local pause_wanted = ARGV[12] ~= '0'
floor = math.min(floor, ceiling)

local pause = 0
if retry_after > 0 or pause_wanted then
  pause = tonumber(redis.call('HGET', KEYS[1], 'cooldown')) or 0
end
if retry_after > 0 then
  local untl = now + math.min(retry_after, max_pause)
  if untl > pause then
    redis.call('HSET', KEYS[1], 'cooldown', string.format('%.6f', untl))
    local keep = math.ceil((untl - now + 60) * 1000)
    if redis.call('PTTL', KEYS[1]) < keep then redis.call('PEXPIRE', KEYS[1], keep) end
    pause = untl
  end
end

local rate_out = ''
if adapt then
  local a = redis.call('HMGET', KEYS[2], 'rate', 'ts', 'bad', 'until')
  local rate = math.min(tonumber(a[1]) or ceiling, ceiling)
  local ts = tonumber(a[2]) or now
  local nbad = tonumber(a[3]) or 0
  -- LPUSH answers the list's new length: no LLEN is asked.
  local n = redis.call('LPUSH', KEYS[3], bad and '1' or '0')
  if bad then nbad = nbad + 1 end
  -- One answer leaves per answer that comes, more when the window setting was lowered.
  while n > window do
    if redis.call('RPOP', KEYS[3]) == '1' then nbad = nbad - 1 end
    n = n - 1
  end
  local cut = false
  if bad and n >= min_n and nbad / n > share then
    rate = math.max(floor, rate / 2)
    redis.call('DEL', KEYS[3])
    nbad, cut = 0, true
  elseif not bad then
    rate = math.min(ceiling, rate + step * math.max(0, now - ts))
  end
  rate = math.max(rate, floor)
  -- The hash and the window are kept at least `ttl` after this answer. When they expire is kept in
  -- the hash ('until'), and lengthened a minute past `ttl` at a time, so that neither TTL nor
  -- EXPIRE is asked at every answer; only ever lengthened: a robots.txt Crawl-delay kept here may
  -- need longer (domain_crawl_delay_set, which drops 'until': then the TTL is read once).
  local kept, keep = tonumber(a[4]), ttl + 60
  local renew = kept == nil or kept - now < ttl
  local untl = kept
  if renew then untl = now + keep end
  redis.call('HSET', KEYS[2], 'rate', string.format('%.6f', rate), 'ts', string.format('%.6f', now),
             'bad', nbad, 'until', string.format('%.6f', untl))
  if renew then
    local left = (kept == nil) and redis.call('TTL', KEYS[2]) or -1
    if left < keep then
      redis.call('EXPIRE', KEYS[2], keep)
    else
      untl = now + left
      redis.call('HSET', KEYS[2], 'until', string.format('%.6f', untl))
    end
    if not cut then redis.call('EXPIRE', KEYS[3], keep) end
  elseif n == 1 and not cut then
    redis.call('EXPIRE', KEYS[3], math.ceil(untl - now))  -- a window begun afresh (after a cut)
  end
  rate_out = string.format('%.6f', rate)
end
return {math.ceil(math.max(pause - now, 0) * 1000), rate_out}
