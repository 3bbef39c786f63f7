"""``langgraph-resilience limits``: each shared limit's holders, rate and pause,
on a SQL store or a Redis server (``--db redis://...``, under ``--prefix``)."""

from __future__ import annotations

import dataclasses
import warnings

import click

from langgraph_resilience.cli._render import print_json, print_table
from langgraph_resilience.cli._store import (
    DB_ENV,
    REDIS_SCHEMES,
    CliError,
    one_line,
    open_store,
    redis_saver,
)
from langgraph_resilience.errors import StoreUnavailable
from langgraph_resilience.limits import LimitState, limit_states

__all__ = ["limits"]


def _on_redis(url: str, prefix: str) -> list[LimitState]:
    """The limits a Redis saver under ``prefix`` keeps on the server at ``url``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # what the server keeps on disk
        try:
            with redis_saver(url, prefix) as saver:
                return limit_states(saver)
        except StoreUnavailable as exc:
            raise CliError(one_line(exc)) from exc


@click.command()
@click.option(
    "--db",
    envvar=DB_ENV,
    metavar="PATH|DSN",
    help=f"The store: a SQLite file path, a Postgres DSN or a redis:// URL (env {DB_ENV}).",
)
@click.option(
    "--prefix", default="lgr", show_default=True, help="On Redis: the savers' key prefix."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
def limits(db: str | None, prefix: str, as_json: bool) -> int:
    """The shared limits in the store: holders, starts in the window, pause, waits."""
    if db is not None and db.startswith(REDIS_SCHEMES):
        found = _on_redis(db, prefix)
    else:
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
