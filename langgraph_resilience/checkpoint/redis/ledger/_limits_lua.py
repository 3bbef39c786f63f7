"""The Lua scripts of shared limits: each acquire, pause or renewal of one limit
is one script on its three keys (`_keys.LimitKeys`: KEYS[1] its numbers and
pause, KEYS[2] its holds, KEYS[3] its rate window's starts), one hash tag, so
it is a compare-and-set that nothing interleaves, on Redis Cluster too.

Times are the server's clock (``TIME``, in milliseconds with microseconds):
every process on the server judges a lease, a pause and a rate window by the
same clock, as the SQL savers judge them by ``NOW()``. Times are stored as text
(``%.3f``): Lua's ``tostring`` keeps only 14 digits.
"""

from __future__ import annotations

from langgraph_resilience.checkpoint.redis.store._scripts import Script

__all__ = ["LIMIT_ACQUIRE", "LIMIT_PAUSE", "LIMIT_RENEW", "LIMIT_SCRIPTS"]

_NOW = r"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local function ms(x) return string.format('%.3f', x) end
"""

#: ARGV: concurrency ('' for none), rate ('' for none), per (its repr), hold,
#: holder, lease_ms, window_ms (`ledger._limits.window`), seconds waited to add,
#: then the holders judged gone. Creates the limit, or checks its numbers; then
#: refuses on a pause, a full set of live holds (dropping those past their lease
#: or of a holder gone) or a full rate window; else stores a start (rate) and a
#: hold (concurrency). Sent again after a lost reply, it finds its own hold and
#: start and keeps them (it does not count them against itself). Returns
#: {'ok'}, {'mismatch', conc, rate, per} (stored), {'paused', seconds},
#: {'full', holders...} or {'rate', seconds}.
LIMIT_ACQUIRE = Script(
    "limit_acquire",
    _NOW
    + r"""
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'concurrency', ARGV[1], 'rate', ARGV[2], 'per', ARGV[3],
    'waited', '0', 'created_at', ms(now))
end
if tonumber(ARGV[8]) > 0 then redis.call('HINCRBYFLOAT', KEYS[1], 'waited', ARGV[8]) end
local s = redis.call('HMGET', KEYS[1], 'concurrency', 'rate', 'per', 'paused_until')
if s[1] ~= ARGV[1] or s[2] ~= ARGV[2] or (s[2] ~= '' and s[3] ~= ARGV[3]) then
  return {'mismatch', s[1] or '', s[2] or '', s[3] or ''}
end
if s[4] and tonumber(s[4]) > now then
  return {'paused', string.format('%.6f', (tonumber(s[4]) - now) / 1000)}
end
if ARGV[1] ~= '' then
  local dead = {}
  for i = 9, #ARGV do dead[ARGV[i]] = true end
  local held = redis.call('HGETALL', KEYS[2])
  local live = {}
  for i = 1, #held, 2 do
    local holder, untl = string.match(held[i + 1], '^(.*)\n([^\n]*)\n[^\n]*$')
    if tonumber(untl) < now or dead[holder] then
      redis.call('HDEL', KEYS[2], held[i])
    elseif held[i] ~= ARGV[4] then  -- its own hold: this acquire sent again
      live[#live + 1] = holder
    end
  end
  if #live >= tonumber(ARGV[1]) then return {'full', unpack(live)} end
end
if ARGV[2] ~= '' then
  local window = tonumber(ARGV[7])
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ms(now - window))
  local again = redis.call('ZSCORE', KEYS[3], ARGV[4])
  if not again and redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[2]) then
    local oldest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
    return {'rate', string.format('%.6f', (tonumber(oldest[2]) + window - now) / 1000)}
  end
  if not again then redis.call('ZADD', KEYS[3], ms(now), ARGV[4]) end
end
if ARGV[1] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[4],
    ARGV[5] .. '\n' .. ms(now + tonumber(ARGV[6])) .. '\n' .. ms(now))
end
return {'ok'}
""",
)

#: ARGV: pause_ms, reason. Pauses the limit until now + pause unless a longer
#: pause is set; a limit not stored is left alone. Returns 1 if it set it.
LIMIT_PAUSE = Script(
    "limit_pause",
    _NOW
    + r"""
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local untl = now + tonumber(ARGV[1])
local cur = redis.call('HGET', KEYS[1], 'paused_until')
if cur and tonumber(cur) >= untl then return 0 end
redis.call('HSET', KEYS[1], 'paused_until', ms(untl), 'pause_reason', ARGV[2])
return 1
""",
)

#: ARGV: hold, lease_ms. Extends the hold's lease to now + lease; returns 1, or
#: 0 once it is not held (freed, or dropped by an acquirer after its lease).
LIMIT_RENEW = Script(
    "limit_renew",
    _NOW
    + r"""
local v = redis.call('HGET', KEYS[2], ARGV[1])
if not v then return 0 end
local holder, since = string.match(v, '^(.*)\n[^\n]*\n([^\n]*)$')
redis.call('HSET', KEYS[2], ARGV[1], holder .. '\n' .. ms(now + tonumber(ARGV[2])) .. '\n' .. since)
return 1
""",
)

LIMIT_SCRIPTS = (LIMIT_ACQUIRE, LIMIT_PAUSE, LIMIT_RENEW)
