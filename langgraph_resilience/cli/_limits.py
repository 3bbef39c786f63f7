"""``langgraph-resilience limits``: each shared limit's holders, rate and pause,
on a SQL store or a Redis server (``--db redis://host:port/db#prefix``: the
savers' key prefix after ``#``; ``--prefix``, deprecated, says so and is moved
into the URL)."""

from __future__ import annotations

import dataclasses

import click

from langgraph_resilience.cli._render import err_console, print_json, print_table
from langgraph_resilience.cli._store import DB_ENV, REDIS_SCHEMES, CliError, open_store
from langgraph_resilience.limits import limit_states

__all__ = ["limits"]


def with_prefix(db: str | None, prefix: str | None) -> str | None:
    """``db`` with the deprecated ``--prefix`` moved into its URL (``#prefix``)."""
    if prefix is None:
        return db
    if db is None or not db.startswith(REDIS_SCHEMES):
        raise CliError("--prefix names a Redis key prefix: it takes a redis:// --db")
    url, _, named = db.partition("#")
    if named and named != prefix:
        raise CliError(f"--prefix {prefix} and the URL's #{named} disagree: keep the URL's")
    err_console().print(
        f"--prefix is deprecated: name the key prefix in the URL, --db "
        f"'{url.split('@')[-1]}#{prefix}'"
    )
    return f"{url}#{prefix}"


@click.command()
@click.option(
    "--db",
    envvar=DB_ENV,
    metavar="PATH|DSN|URL",
    help=f"The store: a SQLite file path, a Postgres DSN or a Redis URL "
    f"redis://host:port/db#prefix (env {DB_ENV}).",
)
@click.option(
    "--prefix",
    default=None,
    hidden=True,
    help="Deprecated: the Redis key prefix, now named in the URL (--db redis://...#prefix).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
def limits(db: str | None, prefix: str | None, as_json: bool) -> int:
    """The shared limits in the store: holders, starts in the window, pause, waits."""
    with open_store(with_prefix(db, prefix), redis_ok=True) as store:
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
