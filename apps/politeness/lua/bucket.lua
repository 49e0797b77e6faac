-- bucket_read: a domain's token bucket as the rate in force refills it, shared by the scripts
-- that spend its tokens (limiter.py prepends this file to permit_acquire.lua and token_try.lua).
-- The rate in force: the adaptive rate (outcome_record.lua) and 1 / Crawl-delay (robots.txt)
-- lower the policy's (ceiling); the burst shrinks in proportion, so a throttled domain does not
-- get a full bucket of back-to-back requests after a quiet spell.
-- Returns rate, burst, tokens (refilled to now), cooldown-until, jobs in the domain's line, when
-- the slots set expires as permit_acquire.lua last set it (nil: not recorded), and the top: the
-- rate an adaptive rate below it climbs back to (the policy's, or 1 / Crawl-delay if lower).
local function bucket_read(state_key, adapt_key, ceiling, burst, now)
  local a = redis.call('HMGET', adapt_key, 'rate', 'crawl')
  local top = ceiling
  local crawl = tonumber(a[2]) or 0
  if crawl > 0 then top = math.min(top, 1 / crawl) end
  local rate = math.min(top, tonumber(a[1]) or ceiling)
  burst = math.max(1, math.floor(burst * rate / ceiling))
  local s = redis.call('HMGET', state_key, 'tokens', 'ts', 'cooldown', 'queued', 'slots')
  local tokens = tonumber(s[1]) or burst
  local ts = tonumber(s[2]) or now
  tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
  return rate, burst, tokens, tonumber(s[3]) or 0, tonumber(s[4]) or 0, tonumber(s[5]), top
end
