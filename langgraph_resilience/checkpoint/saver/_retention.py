"""Retention: prune finished runs' records and old checkpoint history, by age or
by count, in the hot tier.

A namespace's latest checkpoint always stays (it is the thread's state); older
ones go by age (``older_than``, read from their uuid6 ids) or beyond the newest
``keep_last``, with their writes, step rows, node attempts and, on
Postgres, the blobs no kept checkpoint references. Side effects stay: the
ledger is what keeps an effect from being called twice. A run's record goes
only once it ended (never a queued, running or paused one).
"""

from __future__ import annotations

from typing import NamedTuple

from langgraph_resilience.checkpoint.saver import _threads
from langgraph_resilience.checkpoint.store._schema import ATTEMPTS, OPEN_STATUSES, RUNS, STEPS
from langgraph_resilience.checkpoint.store._store import Dialect, Statements, Stmt
from langgraph_resilience.errors import ConfigError

__all__ = ["Pruned", "prune_history"]

_OPEN = ", ".join(f"'{s}'" for s in OPEN_STATUSES)


class Pruned(NamedTuple):
    """What `prune_history` deleted."""

    checkpoints: int
    runs: int


def check_keep_last(keep_last: int | None) -> None:
    if keep_last is not None and (not isinstance(keep_last, int) or keep_last < 1):
        raise ConfigError(
            f"keep_last must be a whole number >= 1 (the latest checkpoint always "
            f"stays), got {keep_last!r}"
        )


def prune_history(
    d: Dialect,
    *,
    before_id: str | None,
    keep_last: int | None,
    runs_idle: float | None,
    thread_ids: list[str] | None,
) -> Statements[Pruned]:
    """Delete old checkpoints (older than ``before_id``, or beyond ``keep_last``
    per namespace; never a namespace's latest) and runs ended ``runs_idle``
    seconds ago or more; only of ``thread_ids`` if given."""
    pruned = 0
    if before_id is not None or keep_last is not None:
        where = "WHERE thread_id IN_LIST(?)" if thread_ids is not None else ""
        params: list[object] = [d.list_param(thread_ids)] if thread_ids is not None else []
        doomed = yield Stmt(
            d.sql(
                "SELECT thread_id, checkpoint_ns, checkpoint_id FROM ("
                "SELECT thread_id, checkpoint_ns, checkpoint_id, row_number() OVER ("
                "PARTITION BY thread_id, checkpoint_ns ORDER BY checkpoint_id DESC) AS n "
                f"FROM checkpoints {where}) ranked WHERE n > 1 AND (n > ? OR checkpoint_id < ?)"
            ),
            (*params, keep_last if keep_last is not None else 2**62, before_id or ""),
            fetch=True,
        )
        by_ns: dict[tuple[str, str], list[str]] = {}
        for thread_id, ns, checkpoint_id in doomed:
            by_ns.setdefault((str(thread_id), str(ns)), []).append(str(checkpoint_id))
        for (thread_id, ns), ids in sorted(by_ns.items()):
            yield from _threads.delete_checkpoints(d, thread_id, ns, ids)
        # Their node attempts and step rows go too; side effects stay (the ledger).
        yield from _threads.delete_orphans(d, sorted({t for t, _ in by_ns}), (ATTEMPTS, STEPS))
        pruned = len(doomed)
    runs = 0
    if runs_idle is not None:
        scope = "AND thread_id IN_LIST(?) " if thread_ids is not None else ""
        extra: tuple[object, ...] = (d.list_param(thread_ids),) if thread_ids is not None else ()
        gone = yield Stmt(
            d.sql(
                f"DELETE FROM {RUNS.name} WHERE status NOT IN ({_OPEN}) "
                f"AND updated_at < NOW() - ? {scope}RETURNING run_id"
            ),
            (runs_idle, *extra),
            fetch=True,
        )
        runs = len(gone)
    return Pruned(checkpoints=pruned, runs=runs)
