"""The run queue on Redis (the store side of `Worker`), written once for both
twins as `_ops` operations: submit, claim, renew, finish, requeue, settle,
cancel, and the reads (`read_run`, `list_runs`, `active_runs`).

Keys (beside the thread's, `_keys`), for a prefix ``P``:

- ``P:{T}:runs`` (hash, no TTL): run id -> the run's record (JSON,
  `_runs_scripts`), and ``\\0open`` -> the thread's open run. It is under the
  thread's hash tag: a claim, a renewal, an end and the fencing check of a
  checkpoint write of that thread are each one script in one slot, so a
  stale token is refused in the write's own step.
- ``P:{T}:recov`` (hash, no TTL): the takeovers of the thread's runs
  (``takeover:<run>:<n>`` -> JSON), stored by the claim that made them.
- ``P:runs:ids`` (hash): run id -> thread id (``read_run`` by id);
- ``P:runs:queued`` (sorted set): ``<thread>\\0<run>`` of queued runs, scored by
  when they are due (ms since the epoch);
- ``P:runs:leased`` (sorted set): the same of running runs, scored by when
  their lease ends.

The last three are the queue: one key each, outside every thread's hash tag
(on Redis Cluster, each lives in a slot of its own; no script touches them and
a thread's keys together). The run's record is the truth; the queue is an index
written beside each script (in its pipeline, or just after it) that only finds
runs. A claimer checks every run it finds against its record (in the claim's
script, by the server's clock) and repairs an entry that a crash between a
script and its index write left stale (`REINDEX`: only if the entry is still as
it was seen). An entry is never later than its run is due, so no run is lost
to the index; a stale one costs a claimer one look.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields
from typing import Any

from langgraph_resilience._util._process import executor_alive
from langgraph_resilience.checkpoint.ledger._lease_judge import Claimant
from langgraph_resilience.checkpoint.ledger._runs import (
    RUN_STATUSES,
    Blob,
    Fence,
    RunRecord,
    one_open_run,
)
from langgraph_resilience.checkpoint.redis.ledger._runs_fence import runs_key
from langgraph_resilience.checkpoint.redis.ledger._runs_scripts import (
    CANCEL,
    CLAIM,
    FINISH,
    REINDEX,
    RENEW,
    REQUEUE,
    SETTLE,
    SUBMIT,
)
from langgraph_resilience.checkpoint.redis.runlog._runlog import (
    Decided,
    decide,
    held_of,
    read_command,
    script_keys,
)
from langgraph_resilience.checkpoint.redis.runlog._runlog import index as runlog_index
from langgraph_resilience.checkpoint.redis.store._keys import keyable
from langgraph_resilience.checkpoint.redis.store._ops import Command, Ops, Place, run
from langgraph_resilience.checkpoint.runlog._run_sql import cancel_worker_run, finish_worker_run
from langgraph_resilience.checkpoint.store._store import SQLITE, Statements
from langgraph_resilience.errors import ConfigError

__all__ = [
    "active_runs",
    "cancel",
    "claim",
    "finish",
    "list_runs",
    "read_run",
    "renew",
    "requeue",
    "settle",
    "submit",
]

SEP = "\0"
_OPEN = ("queued", "running", "paused")
_BLOBS = ("input", "budget", "outcome", "resume")
#: Runs a claim looks at beyond those it may take (stale entries, not yet due).
_LOOK = 16
#: Running runs a claim reads to judge their holders (those on this machine).
_HOLDERS = 1000


def recoveries_key(prefix: str, thread_id: str) -> str:
    return f"{prefix}:{{{thread_id}}}:recov"


def _ids(prefix: str) -> str:
    return f"{prefix}:runs:ids"


def _queued(prefix: str) -> str:
    return f"{prefix}:runs:queued"


def _leased(prefix: str) -> str:
    return f"{prefix}:runs:leased"


def _member(thread_id: str, run_id: str) -> str:
    return f"{thread_id}{SEP}{run_id}"


def _split(member: bytes | str) -> tuple[str, str]:
    text = member.decode() if isinstance(member, bytes) else member
    thread_id, _, run_id = text.partition(SEP)
    return thread_id, run_id


def _ms() -> int:
    return int(time.time() * 1000)


# -- records ---------------------------------------------------------------------------------

_FIELDS = tuple(f.name for f in fields(RunRecord))


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode()


def _blob_args(blob: Blob | None) -> tuple[str, str]:
    """A blob as two script arguments ('' for none)."""
    return ("", "") if blob is None else (blob[0], base64.b64encode(blob[1]).decode())


def record_of(raw: bytes | str) -> RunRecord:
    """A stored record (`_runs_scripts`) as a `RunRecord`."""
    found = json.loads(raw)
    values = {k: found.get(k) for k in _FIELDS}
    for name in _BLOBS:
        if values[name] is not None:
            values[name] = base64.b64decode(values[name])
    for name in ("fencing_token", "attempts", "recoveries"):
        values[name] = int(values[name] or 0)
    return RunRecord(**values)


def _new_record(run_id: str, thread_id: str, input_: Blob | None, budget: Blob | None) -> str:
    blank = RunRecord(
        run_id=run_id,
        thread_id=thread_id,
        status="queued",
        owner=None,
        fencing_token=0,
        lease_expires_at=None,
        attempts=0,
        recoveries=0,
        input_type=input_[0] if input_ else None,
        input=input_[1] if input_ else None,
        budget_type=budget[0] if budget else None,
        budget=budget[1] if budget else None,
        outcome_type=None,
        outcome=None,
        created_at=0.0,
        updated_at=0.0,
    )
    values = asdict(blank)
    for name in _BLOBS:
        values[name] = _b64(values[name])
    return json.dumps(values)


# -- the queue -------------------------------------------------------------------------------


def submit(
    place: Place, run_id: str, thread_id: str, input_: Blob | None, budget: Blob | None
) -> Ops[None]:
    """A queued run (`_runs.submit_run`'s rules: one open run per thread, idempotent
    by run id)."""
    if not run_id or run_id.startswith(SEP):
        raise ConfigError(f"run id {run_id!r}: give a non-empty id not starting with NUL")
    ids = _ids(place.prefix)
    taken = (yield [("HSETNX", ids, run_id, thread_id), ("HGET", ids, run_id)])[1]
    if taken is not None and taken.decode() != thread_id:
        raise ConfigError(
            f"run id {run_id!r} is already taken by a run of thread {taken.decode()!r}; "
            "submit with a new run id (Worker.submit makes a fresh one)"
        )
    record = _new_record(run_id, thread_id, input_, budget)
    replies = yield [
        run(SUBMIT, [runs_key(place.prefix, thread_id)], run_id, record),
        ("ZADD", _queued(place.prefix), "NX", _ms(), _member(thread_id, run_id)),
    ]
    reply = replies[0]
    if int(reply[0]) == 1:
        other, status = reply[1].decode(), reply[2].decode()
        raise one_open_run(thread_id, f" (run {other!r}, {status})")


def _pairs(reply: Sequence[Any]) -> list[tuple[bytes, float]]:
    """A ``WITHSCORES`` reply: flat, or already in pairs (as the client may parse it)."""
    if reply and isinstance(reply[0], (list, tuple)):
        return [(m, float(s)) for m, s in reply]
    return [(reply[i], float(reply[i + 1])) for i in range(0, len(reply), 2)]


def _gone(holder: str | None, who: Claimant) -> bool:
    """Whether a run's holder is a process of this machine known to be gone."""
    if not holder or who.machine.endswith("~") or not holder.startswith(f"{who.machine}|"):
        return False
    return executor_alive(holder) is False


def claim(
    place: Place, owner: str, limit: int, lease_ttl: float, token: str, who: Claimant | None = None
) -> Ops[list[RunRecord]]:
    """Claim up to ``limit`` runs (`_runs.claim_runs`' order: takeovers of runs
    whose lease ran out or whose holder is gone first, then due queued runs,
    oldest first). ``token`` names this claim: a retry returns what it claimed."""
    who = Claimant.here() if who is None else who
    queued, leased = _queued(place.prefix), _leased(place.prefix)
    now_s, leases, waiting = yield [
        ("TIME",),
        ("ZRANGEBYSCORE", leased, "-inf", "+inf", "WITHSCORES", "LIMIT", 0, _HOLDERS),
        ("ZRANGEBYSCORE", queued, "-inf", "+inf", "WITHSCORES", "LIMIT", 0, limit + _LOOK),
    ]
    now = int(now_s[0]) * 1000 + int(now_s[1]) // 1000
    seen = [(queued, m, s) for m, s in _pairs(waiting) if s <= now]
    judge = not who.machine.endswith("~")
    seen += [(leased, m, s) for m, s in _pairs(leases) if s <= now or judge]
    if not seen:
        return []
    raws = yield [("HGET", runs_key(place.prefix, _split(m)[0]), _split(m)[1]) for _, m, _ in seen]
    takeovers: list[tuple[RunRecord, str]] = []
    fresh: list[RunRecord] = []
    repairs: list[Command] = []
    for (index, m, score), raw in zip(seen, raws, strict=True):
        found = None if raw is None else record_of(raw)
        if found is None or found.status not in ("queued", "running"):
            repairs.append(run(REINDEX, [index], m, int(score), ""))
        elif found.status == "running":
            ends = int((found.lease_expires_at or 0) * 1000)
            if ends < now or _gone(found.holder, who):
                dead = found.holder if ends >= now else ""
                takeovers.append((found, dead or ""))
            elif index == leased and ends != int(score):
                repairs.append(run(REINDEX, [index], m, int(score), ends))
            elif index == queued:
                repairs += [
                    run(REINDEX, [index], m, int(score), ""),
                    ("ZADD", leased, "NX", ends, m),
                ]
        elif index == queued:  # queued (its wait may not be over)
            due = int((found.not_before or 0) * 1000)
            if due <= now:
                fresh.append(found)
            elif due != int(score):
                repairs.append(run(REINDEX, [index], m, int(score), due))
        else:  # queued by its record, found among the leased (a release cut short)
            fresh.append(found)
    takeovers.sort(key=lambda t: t[0].created_at)
    fresh.sort(key=lambda r: r.created_at)
    picked = [(r, dead) for r, dead in takeovers] + [(r, "") for r in fresh]
    unique: dict[str, tuple[RunRecord, str]] = {}
    for r, dead in picked:
        unique.setdefault(r.run_id, (r, dead))
    chosen = list(unique.values())[: max(0, int(limit))]
    replies = yield [
        run(
            CLAIM,
            [
                runs_key(place.prefix, r.thread_id),
                place.keys(r.thread_id).ix,
                recoveries_key(place.prefix, r.thread_id),
            ],
            r.run_id,
            owner,
            token,
            max(1, int(lease_ttl * 1000)),
            who.holder,
            dead,
        )
        for r, dead in chosen
    ]
    claimed = [record_of(reply[1]) for reply in replies if int(reply[0]) == 1]
    follow = list(repairs)
    for r in claimed:
        held = _member(r.thread_id, r.run_id)
        ends = int((r.lease_expires_at or 0) * 1000)
        follow += [("ZREM", queued, held), ("ZADD", leased, ends, held)]
    if follow:
        yield follow
    return sorted(claimed, key=lambda r: r.created_at)


def renew(
    place: Place, owner: str, fences: Sequence[Fence], lease_ttl: float, holder: str
) -> Ops[list[str]]:
    """Extend ``owner``'s leases; the run ids it still holds."""
    if not fences:
        return []
    threads = yield [("HGET", _ids(place.prefix), f.run_id) for f in fences]
    known = [(f, t.decode()) for f, t in zip(fences, threads, strict=True) if t is not None]
    if not known:
        return []
    lease_ms = max(1, int(lease_ttl * 1000))
    ends = yield [
        run(RENEW, [runs_key(place.prefix, t)], f.run_id, f.token, owner, lease_ms, holder)
        for f, t in known
    ]
    held = [(f, t, int(e)) for (f, t), e in zip(known, ends, strict=True) if e is not None]
    if held:
        leased = _leased(place.prefix)
        yield [("ZADD", leased, "GT", e, _member(t, f.run_id)) for f, t, e in held]
    return [f.run_id for f, _, _ in held]


def _thread_of(place: Place, run_id: str) -> Ops[str | None]:
    found = (yield [("HGET", _ids(place.prefix), run_id)])[0]
    return None if found is None else found.decode()


def finish(
    place: Place,
    fence: Fence,
    status: str,
    outcome: Blob | None,
    wait: float | None,
    error: str | None = None,
) -> Ops[bool]:
    """End, pause or release (``queued``, after ``wait`` seconds) a held run;
    False if its lease was lost. The run ledger's row of the run says so in the
    same script (``error``: what a run that ended ``error`` ended on)."""
    if wait is not None and status != "queued":
        raise ConfigError(f"only a released run (queued) waits; got status {status!r}")
    if status not in RUN_STATUSES or status == "running":
        raise ConfigError(
            f"a run cannot be finished as {status!r}; use one of "
            f"{', '.join(s for s in RUN_STATUSES if s != 'running')}"
        )
    thread_id = yield from _thread_of(place, fence.run_id)
    if thread_id is None:
        return False
    m = _member(thread_id, fence.run_id)
    wait_ms = "" if wait is None else str(max(0, int(wait * 1000)))
    keys = [*script_keys(place.prefix, thread_id), runs_key(place.prefix, thread_id)]
    waiting = status == "queued" and bool(wait)  # held until it is due (`_RENEW`)
    while True:
        ledger = yield from _ledger_of_run(
            place,
            thread_id,
            fence.run_id,
            lambda: finish_worker_run(SQLITE, fence, status, error),
            waiting,
        )
        batch: list[Command] = [runlog_index(place.prefix, thread_id)] if ledger.stores else []
        at = len(batch)
        batch.append(
            run(
                FINISH,
                keys,
                fence.run_id,
                fence.token,
                status,
                *_blob_args(outcome),
                wait_ms,
                place.ttl_ms,
                *ledger.args,
            )
        )
        if status == "queued":  # written with the release: a crash after it loses no run
            batch.append(("ZADD", _queued(place.prefix), _ms() + int(wait_ms or 0), m))
        reply = int((yield batch)[at])
        if reply != MOVED:
            break
    if reply:
        yield [("ZREM", _leased(place.prefix), m)]
    return bool(reply)


#: What a run script answers when the thread's run ledger moved since its rows
#: were decided (`_runlog`): nothing stored, decide again.
MOVED = 3


def _ledger_of_run(
    place: Place,
    thread_id: str,
    run_id: str,
    statements: Callable[[], Statements[None]],
    waiting: bool = False,
) -> Ops[Decided]:
    """The run ledger's rows a `Worker`'s end of a run changes (the SQL savers'
    statements, with the run's record as their `RUNS` row), to store in its script
    (``waiting``: it releases the run for a durable wait, `_runlog.decide`)."""
    held_reply, raw = yield [
        read_command(place.prefix, thread_id, full=False, rows_only=True),
        ("HGET", runs_key(place.prefix, thread_id), run_id),
    ]
    held = held_of(thread_id, held_reply)
    runs = [] if raw is None else [record_of(raw)]
    return decide(place.ledger, thread_id, held, statements, runs=runs, waiting=waiting)


def requeue(place: Place, run_id: str, budget: Blob | None, resume: Blob | None) -> Ops[bool]:
    """Queue a paused run again (a new budget, the value its interrupts get)."""
    thread_id = yield from _thread_of(place, run_id)
    if thread_id is None:
        return False
    replies = yield [
        run(
            REQUEUE,
            [runs_key(place.prefix, thread_id)],
            run_id,
            *_blob_args(budget),
            *_blob_args(resume),
        ),
        ("ZADD", _queued(place.prefix), _ms(), _member(thread_id, run_id)),
    ]
    return bool(replies[0])


def settle(place: Place, run_id: str, status: str, outcome: Blob) -> Ops[bool]:
    """End a paused run whose thread was resumed by hand."""
    thread_id = yield from _thread_of(place, run_id)
    if thread_id is None:
        return False
    key = runs_key(place.prefix, thread_id)
    return bool((yield [run(SETTLE, [key], run_id, status, *_blob_args(outcome))])[0])


def cancel(place: Place, run_id: str, outcome: Blob) -> Ops[str | None]:
    """End an open run as cancelled (its token grows); the status it had, or None."""
    thread_id = yield from _thread_of(place, run_id)
    if thread_id is None:
        return None
    keys = [*script_keys(place.prefix, thread_id), runs_key(place.prefix, thread_id)]
    while True:
        ledger = yield from _ledger_of_run(
            place, thread_id, run_id, lambda: cancel_worker_run(SQLITE, run_id)
        )
        batch: list[Command] = [runlog_index(place.prefix, thread_id)] if ledger.stores else []
        batch.append(run(CANCEL, keys, run_id, *_blob_args(outcome), place.ttl_ms, *ledger.args))
        was = (yield batch)[-1]
        if was != MOVED:
            break
    if was is None:
        return None
    m = _member(thread_id, run_id)
    yield [("ZREM", _leased(place.prefix), m), ("ZREM", _queued(place.prefix), m)]
    return str(was.decode() if isinstance(was, bytes) else was)


# -- reads -----------------------------------------------------------------------------------


def read_run(place: Place, run_id: str) -> Ops[RunRecord | None]:
    thread_id = yield from _thread_of(place, run_id)
    if thread_id is None:
        return None
    raw = (yield [("HGET", runs_key(place.prefix, thread_id), run_id)])[0]
    return None if raw is None else record_of(raw)


def list_runs(place: Place, statuses: Sequence[str] = ()) -> Ops[list[RunRecord]]:
    """Every run, oldest first (only those in ``statuses`` if given)."""
    flat = (yield [("HGETALL", _ids(place.prefix))])[0]
    pairs = (
        list(flat.items())
        if isinstance(flat, dict)
        else [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
    )
    if not pairs:
        return []
    raws = yield [("HGET", runs_key(place.prefix, t.decode()), r) for r, t in pairs]
    found = [record_of(raw) for raw in raws if raw is not None]
    wanted = set(statuses)
    return sorted(
        (r for r in found if not wanted or r.status in wanted),
        key=lambda r: (r.created_at, r.run_id),
    )


def active_runs(place: Place) -> Ops[int]:
    """Runs queued and due, or running: read from their records (not the index)."""
    queued, leased = _queued(place.prefix), _leased(place.prefix)
    now_s, waiting, leases = yield [
        ("TIME",),
        ("ZRANGE", queued, 0, -1),
        ("ZRANGE", leased, 0, -1),
    ]
    now = int(now_s[0]) + int(now_s[1]) / 1e6
    members = sorted(set(waiting) | set(leases))
    if not members:
        return 0
    raws = yield [("HGET", runs_key(place.prefix, _split(m)[0]), _split(m)[1]) for m in members]
    count = 0
    for raw in raws:
        r = None if raw is None else record_of(raw)
        if r is not None and (
            r.status == "running" or (r.status == "queued" and (r.not_before or 0) <= now)
        ):
            count += 1
    return count


def drop_threads(place: Place, thread_ids: Sequence[str]) -> Ops[None]:
    """Delete the threads' runs and takeovers, and their queue entries (as the SQL
    savers' ``delete_thread`` deletes their rows)."""
    threads = keyable(thread_ids)
    if not threads:
        return
    listed = yield [("HKEYS", runs_key(place.prefix, t)) for t in threads]
    batch: list[Command] = []
    for thread_id, found in zip(threads, listed, strict=True):
        runs = [f.decode() for f in found if not f.startswith(SEP.encode())]
        if runs:
            held = [_member(thread_id, r) for r in runs]
            batch += [
                ("HDEL", _ids(place.prefix), *runs),
                ("ZREM", _queued(place.prefix), *held),
                ("ZREM", _leased(place.prefix), *held),
            ]
        batch.append(
            ("DEL", runs_key(place.prefix, thread_id), recoveries_key(place.prefix, thread_id))
        )
    yield batch
