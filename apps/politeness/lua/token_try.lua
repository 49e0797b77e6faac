-- domain_token_try (apps/politeness/limiter.py): one token of a domain's bucket, now or never.
-- For a rendered page's subresource of the page's own registrable domain (NFR-32): it takes a
-- token when one is there and no job is waiting in the domain's line, and otherwise
-- is refused at once, booking nothing (a page's assets never wait, nor push jobs back).
-- KEYS: state hash, adapt hash. ARGV: policy rate/s, burst. Returns 1 (granted) or 0.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local ceiling, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local rate, tokens, cooldown, queued, slots_until
rate, burst, tokens, cooldown, queued, slots_until = bucket_read(KEYS[1], KEYS[2], ceiling, burst, now)  -- bucket.lua
if cooldown > now or queued > 0 or tokens < 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens - 1), 'ts', string.format('%.6f', now))
-- The hash outlives the slots set, whose expiry it keeps (permit_acquire.lua).
local horizon = math.max(cooldown - now, burst / rate, (slots_until or now) - now) + 60
redis.call('PEXPIRE', KEYS[1], math.ceil(horizon * 1000))
return 1
