"""``langgraph-resilience limits``: each shared limit's holders, rate and pause."""

from __future__ import annotations

import dataclasses

import click

from langgraph_resilience.cli._render import print_json, print_table
from langgraph_resilience.cli._store import DB_ENV, open_store
from langgraph_resilience.limits import limit_states

__all__ = ["limits"]


@click.command()
@click.option(
    "--db",
    envvar=DB_ENV,
    metavar="PATH|DSN",
    help=f"The store: a SQLite file path or a Postgres DSN (env {DB_ENV}).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
def limits(db: str | None, as_json: bool) -> int:
    """The shared limits in the store: holders, starts in the window, pause, waits."""
    with open_store(db) as store:
        found = limit_states(store.saver)
    if as_json:
        print_json([dataclasses.asdict(s) for s in found])
        return 0
    rows = [
        (
            s.name,
            "-" if s.concurrency is None else f"{len(s.holders)}/{s.concurrency}",
            "-" if s.rate is None else f"{s.starts}/{s.rate} per {s.per:g} s",
            f"{s.paused_for:.1f} s ({s.pause_reason})" if s.paused_for else "-",
            f"{s.waited:.1f}",
            ", ".join(sorted(set(s.holders))) or "-",
        )
        for s in found
    ]
    print_table(
        "shared limits",
        ["limit", "holding", "rate (window)", "paused", "waited s", "holders"],
        rows,
        status_column=None,
    )
    return 0
