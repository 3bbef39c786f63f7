"""The ledgers' Lua scripts: every compare-and-set on an effect's record or a
task's failed tries, in one script on the thread's keys (`_keys.ThreadKeys`,
all ten, as every script's KEYS: ``fx`` is KEYS[8], ``at`` KEYS[9]; a writing
script's then also its ledger keys, for the TTL: `_scripts._RENEW`).

A record is JSON (`_effects`): its times as strings (Lua's ``cjson`` keeps 14
digits of a number), its lease as whole milliseconds of the server's clock
(``TIME``: one clock for every executor, as the SQL savers' ``NOW()``). Each
script refuses a thread in the cold tier (`_scripts.ARCHIVED`) and renews the
thread's TTL when it writes.
"""

from __future__ import annotations

from langgraph_resilience.checkpoint.redis.store._scripts import _GUARD, _RENEW, Script

__all__ = [
    "ATTEMPT",
    "CLAIM",
    "LEDGER_SCRIPTS",
    "ORPHANS",
    "OUTCOMES",
    "RENEW",
    "TAKE",
]

_NOW = r"""
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""

_HEAD = _RENEW + _GUARD + _NOW

#: ARGV: key, the intent's record (JSON), lease_ms, ttl_ms. Stores the intent,
#: held until now + lease, unless the key has a record. Returns {1} (stored) or
#: {0, record, now_ms} (what is there, and the server's clock).
CLAIM = Script(
    "effect_claim",
    _HEAD
    + r"""
local now = now_ms()
local found = redis.call('HGET', KEYS[8], ARGV[1])
if found then return {0, found, tostring(now)} end
local rec = cjson.decode(ARGV[2])
rec.lease_until = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[8], ARGV[1], cjson.encode(rec))
renew(ARGV[4])
return {1}
""",
)

#: ARGV: key, the status and owner ('' for none) judged gone, the new owner, its
#: fencing token ('' for none), lease_ms, ttl_ms. Takes the intent over if it is
#: still as judged: returns {1}, else {0, record, now_ms} ({0}: no record).
TAKE = Script(
    "effect_take",
    _HEAD
    + r"""
local now = now_ms()
local found = redis.call('HGET', KEYS[8], ARGV[1])
if not found then return {0} end
local rec = cjson.decode(found)
local owner = rec.owner
if owner == nil or owner == cjson.null then owner = '' end
if rec.status ~= ARGV[2] or owner ~= ARGV[3] then return {0, found, tostring(now)} end
rec.status = 'intent'
rec.owner = ARGV[4]
if ARGV[5] == '' then rec.fencing_token = cjson.null else rec.fencing_token = tonumber(ARGV[5]) end
rec.lease_until = now + tonumber(ARGV[6])
rec.outcome_sum = cjson.null  -- the new call's outcome brings its own
redis.call('HSET', KEYS[8], ARGV[1], cjson.encode(rec))
renew(ARGV[7])
return {1}
""",
)

#: ARGV: key, owner, lease_ms, ttl_ms. Extends a held intent's lease (0: lets it
#: go now); returns 1, or 0 once it is not held (settled, taken over, expired).
RENEW = Script(
    "effect_renew",
    _HEAD
    + r"""
local now = now_ms()
local found = redis.call('HGET', KEYS[8], ARGV[1])
if not found then return 0 end
local rec = cjson.decode(found)
if rec.owner ~= ARGV[2] or rec.status ~= 'intent' then return 0 end
if rec.lease_until == cjson.null or tonumber(rec.lease_until) <= now then return 0 end
rec.lease_until = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[8], ARGV[1], cjson.encode(rec))
renew(ARGV[4])
return 1
""",
)

#: ARGV: ttl_ms, then (key, again, outcome JSON) triples. Stores each outcome
#: (with its sum) into its record; ``again`` '1': only where the record is still
#: an intent. A key without a record is left alone. Returns how many were stored.
OUTCOMES = Script(
    "effect_outcomes",
    _HEAD
    + r"""
local n = 0
for i = 2, #ARGV, 3 do
  local found = redis.call('HGET', KEYS[8], ARGV[i])
  if found then
    local rec = cjson.decode(found)
    if ARGV[i + 1] ~= '1' or rec.status == 'intent' then
      for k, v in pairs(cjson.decode(ARGV[i + 2])) do rec[k] = v end
      redis.call('HSET', KEYS[8], ARGV[i], cjson.encode(rec))
      n = n + 1
    end
  end
end
if n > 0 then renew(ARGV[1]) end
return n
""",
)

#: ARGV: the task's field, the try's number, its record (JSON), ttl_ms. Stores
#: (or replaces) the try in the task's map of tries.
ATTEMPT = Script(
    "attempt_record",
    _RENEW
    + _GUARD
    + r"""
local cur = redis.call('HGET', KEYS[9], ARGV[1])
local tries = {}
if cur then tries = cjson.decode(cur) end
tries[ARGV[2]] = ARGV[3]
redis.call('HSET', KEYS[9], ARGV[1], cjson.encode(tries))
renew(ARGV[4])
return 1
""",
)

#: After a prune or a run's deletion: drop the effects, the tries and the step rows
#: whose checkpoint is gone, as the SQL savers' ``delete_orphans``. Returns how many.
ORPHANS = Script(
    "ledger_orphans",
    _GUARD
    + r"""
local n = 0
local fx = redis.call('HGETALL', KEYS[8])
for i = 1, #fx, 2 do
  local rec = cjson.decode(fx[i + 1])
  local ns, cid = rec.checkpoint_ns, rec.checkpoint_id
  if type(ns) ~= 'string' then ns = '' end
  if type(cid) ~= 'string' then cid = '' end
  if redis.call('HEXISTS', KEYS[1], ns .. '\0' .. cid) == 0 then
    redis.call('HDEL', KEYS[8], fx[i])
    n = n + 1
  end
end
for _, key in ipairs({KEYS[9], KEYS[10]}) do
  for _, f in ipairs(redis.call('HKEYS', key)) do
    local task_at = string.find(f, '%z[^%z]*$')
    if redis.call('HEXISTS', KEYS[1], string.sub(f, 1, task_at - 1)) == 0 then
      redis.call('HDEL', key, f)
      n = n + 1
    end
  end
end
return n
""",
)

LEDGER_SCRIPTS: tuple[Script, ...] = (CLAIM, TAKE, RENEW, OUTCOMES, ATTEMPT, ORPHANS)
