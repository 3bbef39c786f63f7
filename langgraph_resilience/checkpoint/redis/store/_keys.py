"""The key schema: every key of a thread under one hash tag, found without
``KEYS`` or ``SCAN``.

For a prefix ``P`` (default ``lgr``) and a thread ``T``:

- ``P:{T}:cp`` (hash): ``<ns>\\0<checkpoint_id>`` -> the checkpoint record (`_records`);
- ``P:{T}:ix`` (sorted set): ``<ns>\\0<checkpoint_id>``, score 0, so lexical order is id
  order and a namespace's latest is one ``ZREVRANGEBYLEX``;
- ``P:{T}:w`` (hash): ``<ns>\\0<checkpoint_id>\\0<task_id>\\0<idx>`` -> a write record;
- ``P:{T}:wx`` (hash): ``<ns>\\0<checkpoint_id>`` -> its writes' ``<task_id>\\0<idx>``,
  one a line;
- ``P:{T}:ns`` (set): the thread's namespaces;
- ``P:{T}:byrun`` (hash): run id -> the run's checkpoints (``<ns>\\0<id>``, one a line);
- ``P:{T}:archived`` (string, no TTL): the thread is in the cold tier, under this
  archive key (`_tier`); every script refuses to act on it until it is restored;
- ``P:{T}:fx`` (hash): idempotency key -> the side effect's record (`_effects`);
- ``P:{T}:at`` (hash): ``<ns>\\0<checkpoint_id>\\0<task_id>`` -> the task's failed
  tries (`_attempts`);
- ``P:{T}:st`` (hash): ``<ns>\0<checkpoint_id>\0<task_id>`` -> the step's row of the
  run log (`_steps`: JSON, the SQL step row's columns), stored with the task's writes;
- ``P:{T}:rl``, ``P:{T}:rc``, ``P:{T}:rp`` (hashes, `LedgerKeys`): the run ledger's
  rows (`_runlog`): run -> run row (and field ``\0v``: the ledger's version, its
  compare-and-set), key -> recovery, key ``\0`` path -> recovery path; each the
  JSON of the SQL row. Not among the thread's data: like the SQL savers' run rows
  they never leave the hot tier (demotion leaves them; the TTL, delete and the
  delete strategies of ``prune`` take them with the thread);
- ``P:{T}:cn`` (hash): the thread's save counters (`_counts`): ``<name>@<hour>`` ->
  tries, counted by the scripts of ``put`` and ``put_writes``; kept hot and
  expiring as the run ledger's rows;
- ``P:runlog`` (sorted set): the threads that have run-ledger rows, for the
  readers across threads (written before the rows, so no row is ever unlisted);
- ``P:run:{R}`` (set): the threads run ``R`` wrote (for ``delete_for_runs``);
- ``P:threads`` (sorted set): thread ids, scored by their last write (ms since the
  epoch), for ``list(None)`` and ``archive_idle``.

A shared `Limit` ``L`` is global, not a thread's: its three keys share a hash
tag of their own, ``{L}`` (`limit_keys`, `_limits`; a name with a brace, or
starting with ``#``, is tagged ``{#<its SHA-1>}``), so each limit's scripts
touch one slot:

- ``P:lim:{L}:def`` (hash): its numbers (``concurrency``, ``rate``, ``per``), its
  pause (``paused_until``, ms of the server's clock; ``pause_reason``), the
  seconds tries ``waited`` for it, ``created_at``;
- ``P:lim:{L}:holds`` (hash): hold id -> ``<holder>\n<lease until, ms>\n<since, ms>``,
  one field per try holding one of its slots;
- ``P:lim:{L}:starts`` (sorted set): hold ids of the tries started in its rate
  window, scored by their start (ms);
- ``P:limits`` (set): every limit's name (for ``limit_states``), in its own slot.

A thread's ten keys share the hash tag ``{T}``, so its Lua scripts touch one
slot and the layout works on Redis Cluster; the run index and the thread
registry live in their own slots and are written beside the script (they only
find threads, and a stale entry finds nothing). Every key but ``archived`` holds
the thread's data (`ThreadKeys.data`): the TTL, demotion, restore and copies
move them together, so a thread's ledger never outlives it nor is lost before it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import NamedTuple

from langgraph_resilience.errors import ConfigError

__all__ = [
    "check_prefix",
    "counts_key",
    "keyable",
    "ledger_keys",
    "LedgerKeys",
    "limit_keys",
    "limit_tag",
    "LimitKeys",
    "limits_key",
    "member",
    "run_key",
    "runlog_key",
    "thread_keys",
    "ThreadKeys",
    "threads_key",
]

SEP = "\0"


class ThreadKeys(NamedTuple):
    cp: str
    ix: str
    w: str
    wx: str
    ns: str
    byrun: str
    archived: str
    fx: str
    at: str
    st: str

    @property
    def data(self) -> tuple[str, ...]:
        """The keys holding the thread's data (all but the cold-tier marker), in
        the order of the scripts' KEYS without the 7th (`_scripts`)."""
        return (*self[:6], *self[7:])


class LedgerKeys(NamedTuple):
    """A thread's run-ledger hashes (`_runlog`), under its hash tag."""

    rl: str
    rc: str
    rp: str


def ledger_keys(prefix: str, thread_id: str) -> LedgerKeys:
    base = f"{prefix}:{{{thread_id}}}"
    return LedgerKeys(*(f"{base}:{part}" for part in LedgerKeys._fields))


def counts_key(prefix: str, thread_id: str) -> str:
    """The thread's save counters (a hash, `_counts`), under its hash tag."""
    return f"{prefix}:{{{thread_id}}}:cn"


def runlog_key(prefix: str) -> str:
    return f"{prefix}:runlog"


def check_prefix(prefix: str) -> str:
    if not prefix or any(c in prefix for c in "{}\0"):
        raise ConfigError(
            f"key prefix {prefix!r}: use a non-empty prefix without braces or NUL "
            "(the braces are the thread's hash tag), e.g. prefix='lgr'"
        )
    return prefix


def keyable(thread_ids: Sequence[str]) -> list[str]:
    """The thread ids a key can name (UTF-8 text): a thread under another id (a
    lone surrogate, refused at every write) is stored nowhere, so a delete of it
    has nothing to drop, as the SQL savers' ``Dialect.list_param`` leaves it out."""
    found = []
    for t in map(str, thread_ids):
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            continue
        found.append(t)
    return found


def thread_keys(prefix: str, thread_id: str) -> ThreadKeys:
    base = f"{prefix}:{{{thread_id}}}"
    return ThreadKeys(*(f"{base}:{part}" for part in ThreadKeys._fields))


def run_key(prefix: str, run_id: str) -> str:
    return f"{prefix}:run:{{{run_id}}}"


def threads_key(prefix: str) -> str:
    return f"{prefix}:threads"


class LimitKeys(NamedTuple):
    """A shared limit's keys, in the order of its scripts' KEYS (`_limits`)."""

    definition: str
    holds: str
    starts: str


def limit_tag(name: str) -> str:
    """A limit's hash tag: its name, or, for a name a hash tag cannot hold (a
    brace in it) or one that starts with ``#``, ``#`` and the name's SHA-1."""
    if name.startswith("#") or any(c in name for c in "{}"):
        return "#" + hashlib.sha1(name.encode()).hexdigest()
    return name


def limit_keys(prefix: str, name: str) -> LimitKeys:
    base = f"{prefix}:lim:{{{limit_tag(name)}}}"
    return LimitKeys(f"{base}:def", f"{base}:holds", f"{base}:starts")


def limits_key(prefix: str) -> str:
    return f"{prefix}:limits"


def member(ns: str, checkpoint_id: str) -> str:
    """A checkpoint's field in ``cp`` and member of ``ix``."""
    return f"{ns}{SEP}{checkpoint_id}"


def split_member(value: bytes | str) -> tuple[str, str]:
    text = value.decode() if isinstance(value, bytes) else value
    ns, _, checkpoint_id = text.partition(SEP)
    return ns, checkpoint_id
