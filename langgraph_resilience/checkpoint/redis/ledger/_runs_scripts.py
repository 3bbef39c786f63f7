"""The Lua of the run queue: each script changes one run's record, in its
thread's ``runs`` hash (`_runs`), atomically, by the server's clock.

A record is JSON (``cjson``): the `RunRecord` fields, its blobs base64. The
thread's open run (queued, running or paused: one at a time) is named by the
hash's field ``\\0open``. ``FENCE`` is the prelude that fences any thread script
(`fenced`): the script's last key is the thread's ``runs`` hash and its last two
arguments the run and its token; a stale token is refused with a
``LGR_LEASE_LOST <current> <token> <run>`` error before anything is written.
"""

from __future__ import annotations

from langgraph_resilience.checkpoint.redis.ledger._effects_lua import ATTEMPT, OUTCOMES, TAKE
from langgraph_resilience.checkpoint.redis.ledger._effects_lua import CLAIM as EFFECT_CLAIM
from langgraph_resilience.checkpoint.redis.store._scripts import (
    _RENEW,
    LEDGER,
    PUT,
    PUT_WRITES,
    REPLACE,
    Script,
)

__all__ = [
    "CANCEL",
    "CLAIM",
    "FENCED",
    "FINISH",
    "LEASE_LOST",
    "REINDEX",
    "RENEW",
    "REQUEUE",
    "RUN_SCRIPTS",
    "SETTLE",
    "SUBMIT",
    "fenced",
]

#: The error a fenced script answers with when the run's token moved on.
LEASE_LOST = "LGR_LEASE_LOST"

_COMMON = r"""
local OPEN = '\0open'
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function load(key, run)
  local raw = redis.call('HGET', key, run)
  if not raw then return nil end
  return cjson.decode(raw)
end
local function open(status)
  return status == 'queued' or status == 'running' or status == 'paused'
end
local function store(key, rec)
  redis.call('HSET', key, rec.run_id, cjson.encode(rec))
  if not open(rec.status) and redis.call('HGET', key, OPEN) == rec.run_id then
    redis.call('HDEL', key, OPEN)
  end
end
local function blob(value)
  if value == '' then return cjson.null end
  return value
end
"""

FENCE = r"""
local fence_token = table.remove(ARGV)
local fence_run = table.remove(ARGV)
local fence_key = table.remove(KEYS)
do
  local raw = redis.call('HGET', fence_key, fence_run)
  local cur = raw and tostring(cjson.decode(raw).fencing_token) or 'none'
  if cur ~= fence_token then
    return redis.error_reply('LGR_LEASE_LOST ' .. cur .. ' ' .. fence_token .. ' ' .. fence_run)
  end
end
"""


def fenced(script: Script) -> Script:
    """``script`` refused (``LEASE_LOST``) unless the run's token is the one given."""
    return Script(f"{script.name}_fenced", FENCE + script.source)


#: KEYS: runs. ARGV: run_id, the record (JSON, no times). Returns {0} (stored by
#: an earlier try), {1, open_run, its status} (the thread has an open run), {2}.
SUBMIT = Script(
    "run_submit",
    _COMMON
    + r"""
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return {0} end
local was = redis.call('HGET', KEYS[1], OPEN)
if was then
  local other = load(KEYS[1], was)
  if other and open(other.status) then return {1, was, other.status} end
end
local rec = cjson.decode(ARGV[2])
local now = now_ms() / 1000
rec.created_at = now
rec.updated_at = now
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(rec))
redis.call('HSET', KEYS[1], OPEN, ARGV[1])
return {2}
""",
)

#: KEYS: runs, the thread's checkpoint index, its recoveries. ARGV: run_id, owner,
#: claim_token, lease_ms, holder, dead (the holder known gone, or '').
#: Returns {1, record} (claimed, or claimed by this very claim before),
#: {2, lease_end_ms} (held by a live lease), {3, due_ms} (queued, not due yet),
#: {0} (not claimable: paused, ended or gone).
CLAIM = Script(
    "run_claim",
    _COMMON
    + r"""
local rec = load(KEYS[1], ARGV[1])
if not rec then return {0} end
if rec.status == 'running' and rec.claim_token == ARGV[3] and rec.owner == ARGV[2] then
  return {1, cjson.encode(rec)}
end
local now = now_ms()
local takeover = false
if rec.status == 'running' then
  local ends = rec.lease_expires_at ~= cjson.null and rec.lease_expires_at * 1000 or 0
  local gone = ARGV[6] ~= '' and rec.holder == ARGV[6]
  if ends >= now and not gone then return {2, tostring(math.floor(ends))} end
  takeover = true
elseif rec.status == 'queued' then
  if rec.not_before ~= cjson.null and rec.not_before * 1000 > now then
    return {3, tostring(math.floor(rec.not_before * 1000))}
  end
else
  return {0}
end
rec.status = 'running'
rec.owner = ARGV[2]
rec.claim_token = ARGV[3]
rec.fencing_token = rec.fencing_token + 1
rec.lease_expires_at = (now + tonumber(ARGV[4])) / 1000
rec.holder = ARGV[5]
rec.attempts = rec.attempts + 1
if takeover then rec.recoveries = rec.recoveries + 1 end
rec.not_before = cjson.null
rec.updated_at = now / 1000
store(KEYS[1], rec)
if takeover then
  local head = redis.call('ZREVRANGEBYLEX', KEYS[2], '(\1', '[\0', 'LIMIT', 0, 1)
  local note = {thread_id = rec.thread_id, kind = 'takeover', run_id = rec.run_id,
                owner = ARGV[2], at = now / 1000,
                checkpoint_id = head[1] and string.sub(head[1], 2) or cjson.null}
  redis.call('HSETNX', KEYS[3], 'takeover:' .. rec.run_id .. ':' .. rec.recoveries,
             cjson.encode(note))
end
return {1, cjson.encode(rec)}
""",
)

#: KEYS: runs. ARGV: run_id, token, owner, lease_ms, holder. Returns the lease's
#: new end (ms) as a string, or false when the run is not held with that token.
RENEW = Script(
    "run_renew",
    _COMMON
    + r"""
local rec = load(KEYS[1], ARGV[1])
if not rec or rec.status ~= 'running' or rec.owner ~= ARGV[3]
   or tostring(rec.fencing_token) ~= ARGV[2] then
  return false
end
local now = now_ms()
local ends = now + tonumber(ARGV[4])
rec.lease_expires_at = ends / 1000
rec.holder = ARGV[5]
rec.updated_at = now / 1000
store(KEYS[1], rec)
return tostring(ends)
""",
)

#: KEYS: the thread's, its ledger keys, then runs (KEYS[14]). ARGV: run_id,
#: token, status, outcome_type, outcome ('' for none), wait_ms ('' for none),
#: ttl_ms, then the run ledger's rows of the run's end (`_scripts.LEDGER`, at 8:
#: the SQL savers' ``finish_worker_run``, in the same script). Renews the
#: thread's TTL (none while the run is held: paused, or released for a wait,
#: `_scripts._RENEW`). Returns 1 (done), 0 (the lease was lost) or 3 (the ledger
#: moved: decide again).
FINISH = Script(
    "run_finish",
    _COMMON
    + _RENEW
    + LEDGER
    + r"""
local rec = load(KEYS[14], ARGV[1])
if not rec or rec.status ~= 'running' or tostring(rec.fencing_token) ~= ARGV[2] then
  return 0
end
if ledger_moved(8) then return 3 end
ledger_store(8)
local now = now_ms()
rec.status = ARGV[3]
rec.owner = cjson.null
rec.lease_expires_at = cjson.null
rec.outcome_type = blob(ARGV[4])
rec.outcome = blob(ARGV[5])
rec.resume_type = cjson.null
rec.resume = cjson.null
rec.not_before = ARGV[6] ~= '' and (now + tonumber(ARGV[6])) / 1000 or cjson.null
rec.updated_at = now / 1000
store(KEYS[14], rec)
renew(ARGV[7])
return 1
""",
)

#: KEYS: runs. ARGV: run_id, budget_type, budget ('' keeps the budget),
#: resume_type, resume ('' for none). Returns 1 (queued again) or 0 (not paused).
REQUEUE = Script(
    "run_requeue",
    _COMMON
    + r"""
local rec = load(KEYS[1], ARGV[1])
if not rec or rec.status ~= 'paused' then return 0 end
rec.status = 'queued'
if ARGV[2] ~= '' then
  rec.budget_type = ARGV[2]
  rec.budget = ARGV[3]
end
rec.resume_type = blob(ARGV[4])
rec.resume = blob(ARGV[5])
rec.updated_at = now_ms() / 1000
store(KEYS[1], rec)
return 1
""",
)

#: KEYS: runs. ARGV: run_id, status, outcome_type, outcome. Returns 1 or 0 (not paused).
SETTLE = Script(
    "run_settle",
    _COMMON
    + r"""
local rec = load(KEYS[1], ARGV[1])
if not rec or rec.status ~= 'paused' then return 0 end
rec.status = ARGV[2]
rec.outcome_type = blob(ARGV[3])
rec.outcome = blob(ARGV[4])
rec.resume_type = cjson.null
rec.resume = cjson.null
rec.updated_at = now_ms() / 1000
store(KEYS[1], rec)
return 1
""",
)

#: KEYS: the thread's, its ledger keys, then runs (KEYS[14]). ARGV: run_id,
#: outcome_type, outcome, ttl_ms, then the run ledger's rows (at 5:
#: ``cancel_worker_run``). Returns the status the run had, false (it was not
#: open) or 3 (the ledger moved: decide again). The token grows: its worker is
#: fenced off. Renews the thread's TTL (a cancelled paused run's thread expires
#: again).
CANCEL = Script(
    "run_cancel",
    _COMMON
    + _RENEW
    + LEDGER
    + r"""
local rec = load(KEYS[14], ARGV[1])
if not rec or not open(rec.status) then return false end
if ledger_moved(5) then return 3 end
ledger_store(5)
local was = rec.status
rec.status = 'cancelled'
rec.fencing_token = rec.fencing_token + 1
rec.owner = cjson.null
rec.lease_expires_at = cjson.null
rec.outcome_type = blob(ARGV[2])
rec.outcome = blob(ARGV[3])
rec.resume_type = cjson.null
rec.resume = cjson.null
rec.updated_at = now_ms() / 1000
store(KEYS[14], rec)
renew(ARGV[4])
return was
""",
)

#: KEYS: an index (sorted set). ARGV: member, the score it was seen with, the new
#: score ('' drops it). Changes the entry only if it still has the score seen, so
#: a repair never undoes a newer write of the index.
REINDEX = Script(
    "run_reindex",
    r"""
local seen = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not seen or tonumber(seen) ~= tonumber(ARGV[2]) then return 0 end
if ARGV[3] == '' then redis.call('ZREM', KEYS[1], ARGV[1])
else redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1]) end
return 1
""",
)

#: The thread scripts a fenced write runs: their fenced twins, by the plain one's sha
#: (`_runs_fence.fence_command` looks them up; the driver loads them all): the
#: checkpoints and writes, an effect's claim, takeover and outcome, a failed try.
FENCED = {
    s.sha: fenced(s) for s in (PUT, REPLACE, PUT_WRITES, EFFECT_CLAIM, TAKE, OUTCOMES, ATTEMPT)
}

RUN_SCRIPTS = (SUBMIT, CLAIM, RENEW, FINISH, REQUEUE, SETTLE, CANCEL, REINDEX, *FENCED.values())
