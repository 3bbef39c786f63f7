"""The Lua scripts: each stores or reads one thread atomically (its keys,
`_keys.ThreadKeys`, in that order, are every script's KEYS: the 7th is the
cold-tier marker, the others its data). The ledgers' scripts are in
`_effects_lua`; `_driver.ALL_SCRIPTS` are those a server is given.

Redis runs a script as one command: nothing interleaves, and under
``appendfsync always`` its effects are on disk before the reply.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

__all__ = [
    "ARCHIVED",
    "DELETE_RUN",
    "DEMOTE",
    "GET",
    "PRUNE",
    "PUT",
    "PUT_WRITES",
    "REPLACE",
    "SCRIPTS",
    "Script",
]


class Script(NamedTuple):
    name: str
    source: str

    @property
    def sha(self) -> str:
        return hashlib.sha1(self.source.encode()).hexdigest()


#: What a script returns for a thread in the cold tier.
ARCHIVED = -7

_GUARD = r"""
if redis.call('EXISTS', KEYS[7]) == 1 then return -7 end
"""

# Renew the TTL (ms, ARGV[ttl_at]; 0: keys never expire) of a thread's data keys
# and its ledger keys (every renewing script's KEYS[1..13]: the thread's ten, then
# ``rl``, ``rc``, ``rp``), unless the run ledger says the thread's latest run is
# held (``rl``'s field NUL p, `PAUSED`: paused, or released for a durable wait):
# then they are made persistent, in the same script, so a paused run is never
# lost to its TTL; the write that takes the run up again clears the field, and
# its script puts the TTL back.
_RENEW = r"""
local function renew(ttl)
  if tonumber(ttl) > 0 then
    local held = redis.call('HGET', KEYS[11], '\0p') == '1'
    for i = 1, 13 do
      if i ~= 7 then
        if held then redis.call('PERSIST', KEYS[i]) else redis.call('PEXPIRE', KEYS[i], ttl) end
      end
    end
  end
end
"""

# The thread's data keys: every key but the marker (KEYS[7]).
_DATA = r"""
local data = {}
for i = 1, #KEYS do if i ~= 7 then table.insert(data, KEYS[i]) end end
"""


# The run ledger's compare-and-set (`_runlog`): ARGV[at] is the thread's ledger
# version the rows were decided on ('-': the write carries no rows), ARGV[at + 1]
# how many rows, then (KEYS index, field, row) triples. KEYS[rl] is the thread's
# ``rl`` (its field NUL v: the version), then ``rc`` and ``rp``.
def ledger_lua(rl: int) -> str:
    """The LEDGER functions of a script whose KEYS[rl] is the thread's ``rl``."""
    return (
        r"""
local function ledger_moved(at)
  if ARGV[at] == '-' then return false end
  return (redis.call('HGET', KEYS[RL], '\0v') or '') ~= ARGV[at]
end
local function ledger_store(at)
  if ARGV[at] == '-' or ARGV[at + 1] == '0' then return end
  for i = at + 2, at + 1 + 3 * tonumber(ARGV[at + 1]), 3 do
    redis.call('HSET', KEYS[tonumber(ARGV[i])], ARGV[i + 1], ARGV[i + 2])
  end
  redis.call('HINCRBY', KEYS[RL], '\0v', 1)
end
"""
    ).replace("RL", str(rl))


# The save counters (`_counts`): ARGV[at] is ``<name>@<hour>=<n>`` lines, added
# to the thread's counters, KEYS[14] (`_keys.counts_key`), by a write that stored.
COUNT = r"""
local function count(at)
  for f, n in string.gmatch(ARGV[at] or '', '([^\n=]+)=(%d+)') do
    redis.call('HINCRBY', KEYS[14], f, n)
  end
end
"""

#: In a thread's scripts, the ledger keys follow its ten (`_keys.LedgerKeys`).
LEDGER = ledger_lua(11)

_DROP = r"""
local function drop(m)
  redis.call('HDEL', KEYS[1], m)
  redis.call('ZREM', KEYS[2], m)
  local listed = redis.call('HGET', KEYS[4], m)
  if listed then
    for s in string.gmatch(listed, '[^\n]+') do redis.call('HDEL', KEYS[3], m .. '\0' .. s) end
    redis.call('HDEL', KEYS[4], m)
  end
end
"""


def _put_source(stored: str) -> str:
    """The script of ``put`` and ``replace``: ``stored`` is what it does when the
    checkpoint is already stored (before the fork check; '' goes on to it)."""
    return (
        _RENEW
        + _GUARD
        + LEDGER
        + COUNT
        + r"""
local m = ARGV[1]
local counts = 11 + 3 * tonumber(ARGV[10])
if ledger_moved(9) then return {3} end
local existed = redis.call('HEXISTS', KEYS[1], m) == 1
"""
        + stored
        + r"""
if ARGV[4] == '1' then
  local ns = ARGV[3]
  local newer = redis.call('ZREVRANGEBYLEX', KEYS[2], '(' .. ns .. '\1',
                           '(' .. ns .. '\0' .. ARGV[5], 'LIMIT', 0, 2)
  for _, h in ipairs(newer) do
    local hid = string.sub(h, #ns + 2)
    if hid ~= ARGV[6] then return {2, hid} end
  end
end
ledger_store(9)
redis.call('HSET', KEYS[1], m, ARGV[2])
redis.call('ZADD', KEYS[2], 0, m)
redis.call('SADD', KEYS[5], ARGV[3])
if ARGV[7] ~= '' and not existed then
  local runs = redis.call('HGET', KEYS[6], ARGV[7])
  redis.call('HSET', KEYS[6], ARGV[7], runs and (runs .. '\n' .. m) or m)
end
count(counts)
renew(ARGV[8])
return {1}
"""
    )


#: KEYS: the thread's, then its ledger keys (`_keys.LedgerKeys`), its counters.
#: ARGV: member, record, ns, check_fork (1/0), parent_id, checkpoint_id, run_id,
#: ttl_ms, then the run ledger's rows (`LEDGER`, at 9), then the counts (`COUNT`).
#: Returns {0} (already stored: a no-op, the
#: ledger's rows stored), {1} (stored), {2, head_id} (a fork refused), {3} (the
#: ledger moved since its rows were decided: nothing stored, decide again).
PUT = Script(
    "put",
    _put_source(r"""
if existed then ledger_store(9) count(counts) renew(ARGV[8]) return {0} end
"""),
)

#: ``put`` that replaces a checkpoint already stored (its record: blob, metadata,
#: checksum) instead of keeping it, after the same fork check: what a versioned
#: graph's upgrade stores (`ReplacingSaver`). Its writes and its place in its
#: run's list stay as they were. Same KEYS, ARGV and replies, but never {0}.
REPLACE = Script("replace", _put_source(""))

#: KEYS: the thread's, then its ledger keys, its counters. ARGV: member, replace
#: (1: special channels, replaced; 0: first kept), ttl_ms, the step row's field
#: in ``st`` ('' for none) and its row, the run ledger's rows (`LEDGER`, at 6),
#: the counts (`COUNT`), then (task_id\0idx, record) pairs. Returns how many
#: writes were new, or -3: the ledger moved since its rows were decided (nothing
#: stored). A step row is stored once.
PUT_WRITES = Script(
    "put_writes",
    _RENEW
    + _GUARD
    + LEDGER
    + COUNT
    + r"""
local m = ARGV[1]
local added = {}
if ledger_moved(6) then return -3 end
ledger_store(6)
if ARGV[4] ~= '' then redis.call('HSETNX', KEYS[10], ARGV[4], ARGV[5]) end
local first = 9 + 3 * tonumber(ARGV[7])
for i = first, #ARGV, 2 do
  local field = m .. '\0' .. ARGV[i]
  local new
  if ARGV[2] == '1' then new = redis.call('HSET', KEYS[3], field, ARGV[i + 1]) == 1
  else new = redis.call('HSETNX', KEYS[3], field, ARGV[i + 1]) == 1 end
  if new then table.insert(added, ARGV[i]) end
end
if #added > 0 then
  local listed = redis.call('HGET', KEYS[4], m)
  local joined = table.concat(added, '\n')
  redis.call('HSET', KEYS[4], m, listed and (listed .. '\n' .. joined) or joined)
end
count(first - 1)
renew(ARGV[3])
return #added
""",
)

#: ARGV: ns, checkpoint_id ('' for the namespace's latest). Returns false, or
#: {member, record, suffix1, write1, suffix2, write2, ...}.
GET = Script(
    "get",
    _GUARD
    + r"""
local m
if ARGV[2] == '' then
  local head = redis.call('ZREVRANGEBYLEX', KEYS[2], '(' .. ARGV[1] .. '\1',
                          '[' .. ARGV[1] .. '\0', 'LIMIT', 0, 1)
  if #head == 0 then return false end
  m = head[1]
else
  m = ARGV[1] .. '\0' .. ARGV[2]
end
local rec = redis.call('HGET', KEYS[1], m)
if not rec then return false end
local out = {m, rec}
local listed = redis.call('HGET', KEYS[4], m)
if listed then
  for s in string.gmatch(listed, '[^\n]+') do
    local v = redis.call('HGET', KEYS[3], m .. '\0' .. s)
    if v then table.insert(out, s) table.insert(out, v) end
  end
end
return out
""",
)

#: Keep each namespace's latest checkpoint (and its writes), drop the rest.
PRUNE = Script(
    "prune",
    _GUARD
    + _DROP
    + r"""
local members = redis.call('ZRANGE', KEYS[2], 0, -1)
local dropped = 0
for i, m in ipairs(members) do
  local nxt = members[i + 1]
  local ns = string.sub(m, 1, string.find(m, '\0', 1, true))
  if nxt and string.sub(nxt, 1, #ns) == ns then drop(m) dropped = dropped + 1 end
end
return dropped
""",
)

#: KEYS: the thread's, then its ledger keys. ARGV: run_id. Drop the run's
#: checkpoints (and their writes) from this thread, and the run rows naming it
#: (as the SQL savers' ``delete_for_runs`` deletes ``run_id IN (...)`` rows).
DELETE_RUN = Script(
    "delete_run",
    _GUARD
    + _DROP
    + r"""
local rows = redis.call('HGETALL', KEYS[11])
local gone = 0
for i = 1, #rows, 2 do
  local ok, row = pcall(cjson.decode, rows[i + 1])
  if ok and type(row) == 'table' and row[12] == ARGV[1] then
    redis.call('HDEL', KEYS[11], rows[i])
    gone = gone + 1
  end
end
if gone > 0 then redis.call('HINCRBY', KEYS[11], '\0v', 1) end
local listed = redis.call('HGET', KEYS[6], ARGV[1])
if not listed then return 0 end
local n = 0
for m in string.gmatch(listed, '[^\n]+') do drop(m) n = n + 1 end
redis.call('HDEL', KEYS[6], ARGV[1])
return n
""",
)

#: ARGV: the archive key, then the DUMP of the data keys as read before archiving
#: ('' for a missing key). Drops them and sets the marker, unless the thread was
#: written since (returns 0: it stays hot).
DEMOTE = Script(
    "demote",
    _DATA
    + r"""
for i, key in ipairs(data) do
  local now = redis.call('DUMP', key) or ''
  if now ~= ARGV[i + 1] then return 0 end
end
redis.call('DEL', unpack(data))
redis.call('SET', KEYS[7], ARGV[1])
return 1
""",
)

#: ARGV: the DUMP of the data keys ('' for a missing key). Puts them back and
#: drops the marker, unless another client restored the thread first (returns 0:
#: the thread may have been written since, and must not be overwritten).
RESTORE = Script(
    "restore",
    _DATA
    + r"""
if redis.call('EXISTS', KEYS[7]) == 0 then return 0 end
for i, key in ipairs(data) do
  if ARGV[i] and ARGV[i] ~= '' then redis.call('RESTORE', key, 0, ARGV[i], 'REPLACE') end
end
redis.call('DEL', KEYS[7])
return 1
""",
)

SCRIPTS = (PUT, REPLACE, PUT_WRITES, GET, PRUNE, DELETE_RUN, DEMOTE, RESTORE)
