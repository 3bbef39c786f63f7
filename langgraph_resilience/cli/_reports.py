"""The read commands of the command line: ``runs`` (`list_runs`), ``show``
(`run_report`) and ``metrics`` (`recovery_metrics`), as JSON or as tables."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from rich.table import Table

from langgraph_resilience.cli._render import out_console, print_json, print_table, when
from langgraph_resilience.cli._store import CliError, Store
from langgraph_resilience.history._metrics import METRICS, RecoveryMetrics, recovery_metrics
from langgraph_resilience.history._report import RunReport, list_runs, run_report

__all__ = [
    "parse_duration",
    "parse_since",
    "print_metrics",
    "print_report",
    "print_runs",
    "run_of",
]

_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def _parse_duration(text: str) -> timedelta | None:
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    return timedelta(**{_UNITS[found.group(2)]: float(found.group(1))}) if found else None


def parse_duration(text: str | None, option: str) -> timedelta | None:
    """A duration option: ``90s``, ``30m``, ``24h``, ``7d``, ``2w``."""
    if text is None:
        return None
    found = _parse_duration(text)
    if found is None:
        raise CliError(f"{option} takes a duration (90s, 30m, 24h, 7d, 2w), got {text!r}")
    return found


def parse_since(text: str | None) -> datetime | timedelta | None:
    """``--since``: a duration back from now (``90s``, ``30m``, ``24h``, ``7d``,
    ``2w``) or an ISO date or time (``2026-11-30``, ``2026-11-30T08:00``)."""
    if text is None:
        return None
    found = _parse_duration(text)
    if found is not None:
        return found
    try:
        return datetime.fromisoformat(text.strip())
    except ValueError:
        raise CliError(
            f"--since takes a duration back from now (90s, 30m, 24h, 7d, 2w) or an ISO "
            f"date or time (2026-11-30T08:00), got {text!r}"
        ) from None


def run_of(text: str | None) -> int | str | None:
    """``--run``: the run's number on the thread, or its Worker run id."""
    if text is None:
        return None
    return int(text) if text.isdigit() else text


# -- runs ------------------------------------------------------------------------------

_RUN_COLUMNS = ("thread", "run", "run id", "status", "attempts", "recoveries", "owner", "updated")


def print_runs(store: Store, statuses: Sequence[str], limit: int, *, as_json: bool) -> None:
    found = list_runs(store.saver, status=list(statuses) or None, limit=limit)
    if as_json:
        print_json([r.to_dict() for r in found])
        return
    rows = [
        (
            r.thread_id,
            r.run,
            r.run_id,
            f"{r.status} (stale)" if r.stale else r.status,
            r.attempts,
            r.recoveries,
            r.owner,
            when(r.updated),
        )
        for r in found
    ]
    title = f"{len(found)} run(s) in {store.where}, newest first"
    print_table(title, _RUN_COLUMNS, rows)


# -- show ------------------------------------------------------------------------------


def print_report(
    store: Store,
    thread_id: str,
    run: int | str | None,
    *,
    graph: Any = None,
    mermaid_only: bool = False,
    as_json: bool,
) -> RunReport:
    report = run_report(store.saver, thread_id, run=run)
    if as_json:
        print_json({**report.to_dict(), "mermaid": report.to_mermaid(graph)})
    elif mermaid_only:
        print(report.to_mermaid(graph))
    else:
        print(report.to_text())
    return report


# -- metrics ---------------------------------------------------------------------------


def _rate_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def metric_rows(m: RecoveryMetrics) -> list[tuple[str, str, str]]:
    """Each metric (`METRICS`), with the counts it is made of."""
    return [(f.name, _rate_text(getattr(m, f.name)), f.made_of(m)) for f in METRICS]


def print_metrics(store: Store, since: str | None, graph: Any, *, as_json: bool) -> None:
    m = recovery_metrics(store.saver, since=parse_since(since), graph=graph)
    if as_json:
        print_json(m.to_dict())
        return
    out = out_console()
    scope = f"since {when(m.since)}" if m.since is not None else "all time"
    table = Table(title=f"recovery metrics, {store.where}, {scope}", title_justify="left")
    for name in ("metric", "value", "made of"):
        table.add_column(name)
    for row in metric_rows(m):
        table.add_row(*row)
    out.print(table)
    kinds = ", ".join(f"{k} {n}" for k, n in m.recoveries_by_kind.items() if n) or "none"
    out.print(
        f"runs: {m.runs} ({m.runs_succeeded} success, {m.runs_partial} partial, "
        f"{m.runs_failed} failed or cancelled); recoveries by kind: {kinds}"
    )
    out.print(
        f"waste: {m.steps_redone} steps, {m.seconds_redone:.2f} s and {m.tokens_redone:g} "
        f"tokens redone; {m.effects_replayed} side effects replayed from the ledger "
        f"instead of called again, {m.effects_reexecuted} called again under their key "
        "(outcome never recorded)",
        soft_wrap=True,
    )
