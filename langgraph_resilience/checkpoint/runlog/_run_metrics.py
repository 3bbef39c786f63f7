"""What `recovery_metrics` reads: SQL aggregates over the run ledger's rows
(runs, steps, recoveries) and the effects ledger, both dialects.

Nothing is decoded: each figure is a count or a sum the database makes, over
the runs last updated since ``since`` (the ``updated_at`` index) and the
recoveries made since then (the ``at`` index), so its cost follows the runs
inside ``since``, not the store's size.

The steps a recovery redid (`RecoveryMetrics.steps_redone_per_recovery`),
over step rows of the run it resumed (``run``):

- ``crash`` / ``takeover``: the top-level steps of the checkpoint it resumed
  that ended after it (the step in flight; a step of that checkpoint that had
  not started counts too: the rows cannot tell them apart);
- ``budget`` / ``human``: the paused steps, run again from their start: the
  top-level step rows of the checkpoint it resumed whose task wrote an
  interrupt there (the keys of LangGraph's interrupt writes, never their values);
- ``retry_failed``: for each path it re-runs (``resilience_recovery_paths``),
  the first step of that path (any namespace) that ended after the path's last
  failure before it (a step inside a subgraph re-runs before the parent's write
  that stores the recovery).

A redone step's seconds are its row's ``ended_at - started_at``, its tokens
its row's ``usage``; the effects it replayed are those recorded ``done`` for
its task before it ended (for a ``retry_failed``, also those of the failed
tries of the path's node at the checkpoint of the path's failed step row, as
keyed in ``resilience_node_attempts``: a failed step's row is stored by
another task than its try, and a try's rows by the node's own namespace).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from langgraph_resilience._langgraph import INTERRUPT_CHANNEL
from langgraph_resilience.checkpoint.runlog._step_rows import node_sql
from langgraph_resilience.checkpoint.store._schema import (
    ATTEMPTS,
    EFFECTS,
    RECOVERIES,
    RECOVERY_PATHS,
    RUN_LOG,
    RUNS,
    STEPS,
)
from langgraph_resilience.checkpoint.store._store import Dialect, Statements, Stmt

__all__ = ["Redone", "RunCounts", "read_metrics"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Redone:
    """One kind's recoveries and what they redid."""

    recoveries: int = 0
    steps: int = 0
    seconds: float = 0.0
    tokens: float = 0.0
    effects: int = 0
    reexecuted: int = 0  # effects called again under their key (`EffectRecord.how`)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunCounts:
    """The aggregates `recovery_metrics` is made of (counters apart)."""

    by_status: dict[str, int] = field(default_factory=dict)  # runs in the window
    resumed_by_status: dict[str, int] = field(default_factory=dict)  # of those, resumed
    by_kind: dict[str, Redone] = field(default_factory=dict)


_R, _S, _C = RUN_LOG.name, STEPS.name, RECOVERIES.name
# Grouped by an expression, not the column: SQLite would otherwise scan the
# whole status index to group, not the ``updated_at`` range of ``since``.
_BY_STATUS = "r.status || ''"


def _top_node(d: Dialect, path: str) -> str:
    """The top-level node of a step's path (``research/fetch``, ``work[2]`` and
    ``review#3`` are of ``research``, ``work``, ``review``), in SQL."""
    pos = "instr" if d.name == "sqlite" else "strpos"
    a, b, c = (f"{pos}({path}, '{ch}')" for ch in "/[#")
    return (
        f"substr({path}, 1, CASE WHEN {a} > 0 AND ({b} = 0 OR {a} < {b}) "
        f"AND ({c} = 0 OR {a} < {c}) THEN {a} - 1 "
        f"WHEN {b} > 0 AND ({c} = 0 OR {b} < {c}) THEN {b} - 1 "
        f"WHEN {c} > 0 THEN {c} - 1 ELSE length({path}) END)"
    )


def _runs_in(
    since: float | None, nodes: Sequence[str] | None, d: Dialect
) -> tuple[str, list[object]]:
    """The condition on run rows ``r`` for the window and the graph filter (a
    run of the graph: it has steps, and each ran under a node of it)."""
    sql, params = "1 = 1", list[object]()
    if since is not None:
        sql += " AND r.updated_at >= ?"
        params.append(since)
    if nodes is not None:
        mine = "s.thread_id = r.thread_id AND s.run = r.run"
        sql += (
            f" AND EXISTS (SELECT 1 FROM {_S} s WHERE {mine})"
            f" AND NOT EXISTS (SELECT 1 FROM {_S} s WHERE {mine} "
            f"AND NOT ({_top_node(d, 's.path')} IN_LIST(?)))"
        )
        params.append(d.list_param(nodes))
    return sql, params


def _tokens(d: Dialect, column: str) -> str:
    if d.name == "sqlite":
        return f"coalesce(json_extract({column}, '$.tokens'), 0)"
    return f"coalesce(({column}::json ->> 'tokens')::float8, 0)"


def read_metrics(
    d: Dialect, since: float | None, nodes: Sequence[str] | None
) -> Statements[RunCounts]:
    """The runs (by status), the resumed runs (by status) and the recoveries
    and what they redid (by kind), of the runs in the window (see the module)."""
    runs_sql, runs_params = _runs_in(since, nodes, d)
    by_status: dict[str, int] = {}
    rows = yield Stmt(
        d.sql(f"SELECT {_BY_STATUS}, count(*) FROM {_R} r WHERE {runs_sql} GROUP BY {_BY_STATUS}"),
        tuple(runs_params),
        fetch=True,
    )
    by_status.update((str(s), int(n)) for s, n in rows)
    if nodes is None:  # Worker runs that never started: no row of their own
        window = "AND w.updated_at >= ? " if since is not None else ""
        rows = yield Stmt(
            d.sql(
                f"SELECT w.status || '', count(*) FROM {RUNS.name} w WHERE NOT EXISTS "
                f"(SELECT 1 FROM {_R} r WHERE r.run_id = w.run_id) {window}"
                f"GROUP BY {_BY_STATUS.replace('r.', 'w.')}"
            ),
            (since,) if since is not None else (),
            fetch=True,
        )
        for s, n in rows:
            by_status[str(s)] = by_status.get(str(s), 0) + int(n)
    rec_at, rec_params = ("c.at >= ?", [since]) if since is not None else ("1 = 1", list[float]())
    rows = yield Stmt(
        d.sql(
            f"SELECT {_BY_STATUS}, count(*) FROM {_R} r WHERE {runs_sql} AND EXISTS (SELECT 1 "
            f"FROM {_C} c WHERE c.thread_id = r.thread_id AND c.run = r.run AND {rec_at}) "
            f"GROUP BY {_BY_STATUS}"
        ),
        (*runs_params, *rec_params),
        fetch=True,
    )
    resumed = {str(s): int(n) for s, n in rows}
    recs = (
        f"SELECT c.thread_id, c.key, c.kind, c.run, c.checkpoint_id, c.at FROM {_C} c "
        f"JOIN {_R} r ON r.thread_id = c.thread_id AND r.run = c.run "
        f"WHERE {rec_at} AND {runs_sql}"
    )
    cols = "s.thread_id, s.run, s.task_id, s.path, s.started_at, s.ended_at, s.usage"
    same = "s.thread_id = rec.thread_id AND s.run = rec.run"
    redone = (
        f"SELECT rec.kind, rec.at AS rec_at, {cols} FROM rec JOIN {_S} s ON {same} "
        "AND s.checkpoint_ns = '' AND s.checkpoint_id = rec.checkpoint_id "
        "WHERE (rec.kind IN ('crash', 'takeover') AND s.ended_at >= rec.at) "
        "OR (rec.kind IN ('budget', 'human') AND s.task_id IN (SELECT w.task_id "
        f"FROM {d.writes.name} w WHERE w.thread_id = rec.thread_id AND w.checkpoint_ns = '' "
        f"AND w.checkpoint_id = rec.checkpoint_id AND w.channel = '{INTERRUPT_CHANNEL}')) "
        f"UNION ALL SELECT rec.kind, rec.at AS rec_at, {cols} FROM retried rec "
        f"JOIN {_S} s ON {same} AND s.path = rec.path AND s.ended_at > rec.bound "
        f"WHERE NOT EXISTS (SELECT 1 FROM {_S} s2 "
        "WHERE s2.thread_id = s.thread_id AND s2.run = s.run AND s2.path = s.path "
        "AND s2.ended_at > rec.bound AND s2.ended_at < s.ended_at)"
    )
    # Each path a retry_failed re-runs, and the end of its last failure before
    # it (a step inside a subgraph re-runs before its parent's write says so).
    retried = (
        "SELECT rec.thread_id, rec.key, rec.kind, rec.run, rec.at, p.path, coalesce("
        f"(SELECT max(f.ended_at) FROM {_S} f WHERE f.thread_id = rec.thread_id "
        "AND f.run = rec.run AND f.path = p.path AND f.status = 'failed' "
        "AND f.ended_at < rec.at), rec.at) AS bound FROM rec "
        f"JOIN {RECOVERY_PATHS.name} p ON p.thread_id = rec.thread_id AND p.key = rec.key "
        "WHERE rec.kind = 'retry_failed'"
    )
    # A failed step's row is stored by another task than the try that failed
    # (its effects and attempts are keyed by that try's task): a retry_failed's
    # replays are the effects of the tries of its node that failed at the
    # checkpoint of the failed step's row.
    # Replayed: called once before (``how`` called, or unset before schema 2);
    # re-executed: called again under its key (`EffectRecord.how`).
    replayed, reexecuted = (
        f"(SELECT count(*) FROM {EFFECTS.name} e WHERE e.thread_id = x.thread_id "
        f"AND {how} "
        "AND e.status = 'done' AND e.outcome_at < x.ended_at AND (e.task_id = x.task_id "
        f"OR (x.kind = 'retry_failed' AND EXISTS (SELECT 1 FROM {_S} f "
        f"JOIN {ATTEMPTS.name} a ON a.thread_id = f.thread_id "
        "AND a.checkpoint_id = f.checkpoint_id "
        f"AND a.node = {node_sql(d, 'f')} WHERE f.thread_id = x.thread_id AND f.run = x.run "
        "AND f.path = x.path AND f.ended_at < x.rec_at AND a.task_id = e.task_id "
        "AND a.checkpoint_id = e.checkpoint_id))))"
        for how in (
            "coalesce(e.how, 'called') IN ('called', 'replayed')",
            "e.how = 'reexecuted'",
        )
    )
    seconds = "CASE WHEN x.ended_at > x.started_at THEN x.ended_at - x.started_at ELSE 0 END"
    rows = yield Stmt(
        d.sql(
            f"WITH rec AS ({recs}), retried AS ({retried}), redone AS ({redone}) "
            "SELECT y.kind, count(*) AS n, sum(y.seconds) AS seconds, sum(y.tokens) AS tokens, "
            "sum(y.effects) AS effects, sum(y.again) AS again FROM ("
            f"SELECT x.kind, {seconds} AS seconds, {_tokens(d, 'x.usage')} AS tokens, "
            f"{replayed} AS effects, {reexecuted} AS again FROM redone x) y GROUP BY y.kind"
        ),
        (*rec_params, *runs_params),
        fetch=True,
    )
    steps = {
        str(k): (int(n), float(sec or 0), float(tok or 0), int(eff or 0), int(again or 0))
        for k, n, sec, tok, eff, again in rows
    }
    rows = yield Stmt(
        d.sql(f"WITH rec AS ({recs}) SELECT rec.kind, count(*) FROM rec GROUP BY rec.kind"),
        (*rec_params, *runs_params),
        fetch=True,
    )
    by_kind = {}
    for kind, n in rows:
        n_steps, sec, tok, eff, again = steps.get(str(kind), (0, 0.0, 0.0, 0, 0))
        by_kind[str(kind)] = Redone(
            recoveries=int(n),
            steps=n_steps,
            seconds=sec,
            tokens=tok,
            effects=eff,
            reexecuted=again,
        )
    return RunCounts(by_status=by_status, resumed_by_status=resumed, by_kind=by_kind)
