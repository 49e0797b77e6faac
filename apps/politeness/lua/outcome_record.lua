-- domain_outcome_record (apps/politeness/services.py): a target's answer, a domain's cooldown.
-- KEYS: state hash, throttled zset. ARGV: retry-after s (0: none), throttled 0/1, threshold,
-- window s, cooldown s (0: repeated throttles cool nothing), max cooldown s, unique member.
-- Returns the domain's cooldown left, in ms (0: none).
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local retry_after, throttled = tonumber(ARGV[1]), ARGV[2]
local threshold, window, cool, max_cool = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local untl = 0
if retry_after > 0 then untl = now + math.min(retry_after, max_cool) end
if throttled == '1' and cool > 0 then
  redis.call('ZADD', KEYS[2], string.format('%.6f', now), ARGV[7])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  redis.call('EXPIRE', KEYS[2], window)
  if redis.call('ZCARD', KEYS[2]) >= threshold then
    untl = math.max(untl, now + cool)
    redis.call('DEL', KEYS[2])
  end
end
local cur = tonumber(redis.call('HGET', KEYS[1], 'cooldown')) or 0
if untl > cur then
  redis.call('HSET', KEYS[1], 'cooldown', string.format('%.6f', untl))
  local keep = math.ceil((untl - now + 60) * 1000)
  if redis.call('PTTL', KEYS[1]) < keep then redis.call('PEXPIRE', KEYS[1], keep) end
  cur = untl
end
return math.ceil(math.max(cur - now, 0) * 1000)
