"""How the command line prints: JSON for machines (``--json``), rich tables for
people, a progress display while acting on many threads, errors as one line.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from langgraph_resilience.cli._actions import Acted

__all__ = [
    "STATUS_STYLE",
    "err_console",
    "out_console",
    "print_acted",
    "print_json",
    "print_table",
    "when",
    "with_progress",
]

T = TypeVar("T")

STATUS_STYLE = {
    "success": "green",
    "partial_complete": "yellow",
    "paused": "cyan",
    "queued": "blue",
    "running": "blue",
    "cancelled": "magenta",
    "error": "red",
    "skipped": "dim",
}


def out_console() -> Console:
    console = Console(highlight=False, soft_wrap=False)
    if not console.is_terminal:  # a file or a pipe: no need to fold tables at 80 columns
        console.width = 200
    return console


def err_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    return str(value)


def print_json(data: Any) -> None:
    """``data`` as JSON on stdout (values JSON cannot hold as their text)."""
    print(json.dumps(data, indent=2, default=_json_safe, ensure_ascii=False))


def when(epoch: float | None) -> str:
    """An epoch time for a table: local ISO time to the second."""
    if epoch is None:
        return "-"
    return dt.datetime.fromtimestamp(epoch).isoformat(sep=" ", timespec="seconds")


def styled(status: str) -> str:
    style = STATUS_STYLE.get(status)
    return f"[{style}]{status}[/{style}]" if style else status


def print_table(
    title: str | None,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    status_column: str | None = "status",
) -> None:
    """A rich table on stdout; the status column coloured by status."""
    table = Table(title=title, title_justify="left", show_lines=False)
    for name in columns:
        table.add_column(name, overflow="fold")
    at = columns.index(status_column) if status_column in columns else -1
    for row in rows:
        cells = ["-" if v is None else str(v) for v in row]
        if at >= 0:
            cells[at] = styled(cells[at])
        table.add_row(*cells)
    out_console().print(table)


def print_acted(acted: Sequence[Acted], *, as_json: bool) -> None:
    """What came of a resume or retry, thread by thread."""
    if as_json:
        print_json([a.to_dict() for a in acted])
        return
    print_table(
        None, ["thread", "status", "detail"], [(a.thread_id, a.status, a.detail) for a in acted]
    )


def with_progress(
    verb: str, items: Sequence[str], act: Callable[[str], T], *, quiet: bool = False
) -> list[T]:
    """``act`` on each item in turn, with a progress display on stderr when
    there is more than one (and not ``quiet``)."""
    if quiet or len(items) < 2:
        return [act(item) for item in items]
    done: list[T] = []
    columns = (
        TextColumn(f"{verb} [bold]{{task.fields[item]}}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err_console(), transient=False) as progress:
        task = progress.add_task(verb, total=len(items), item="")
        for item in items:
            progress.update(task, item=item)
            done.append(act(item))
            progress.advance(task)
    return done
