"""The ``langgraph-resilience`` command line, for operators.

Subcommands (``--db``: a SQLite file path, a Postgres DSN or a Redis URL
``redis://host:port/db#prefix``, the Redis savers' key prefix after ``#``; or env
``LGR_DB``; `_store.ON_REDIS` names the commands a Redis URL takes):

- ``setup``: create or migrate the store's tables;
- ``check``: verify every checkpoint, write, blob and side-effect outcome against
  its checksum (and SQLite's ``PRAGMA quick_check``); exit code 1 on a damaged row;
- ``runs [--status S]``: the runs (thread, run, status, attempts, recoveries,
  owner, updated), newest first;
- ``show THREAD [--run N]``: the run report (`run_report`), or its graph in
  Mermaid (``--mermaid``);
- ``metrics [--since 24h]``: the four recovery metrics and their counts;
- ``resume THREAD... --graph module:attr``: continue threads from their last
  checkpoint (after a crash), ``--value`` answering a pause;
- ``retry THREAD... --graph module:attr [--step PATH] [--update JSON]``:
  `retry_failed` on threads that ended with a partial result;
- ``worker --graph module:attr [--concurrency N] [--drain-timeout S]
  [--durability sync|async|exit]``: run a `Worker` until SIGTERM/SIGINT (it
  drains: steps in flight finish, their runs are released; a step still busy
  after ``--drain-timeout`` is given back, or left to its lease when the store
  cannot be reached, and the process exits without it, code 75: `_exit`);
- ``cancel RUN [--reason TEXT]``: end a queued, running or paused run;
- ``archive --archive URL [--older-than 24h]``: move idle threads to the cold
  tier (``LGR_ARCHIVE`` names it for every subcommand: archived threads are
  restored when read);
- ``limits``: each shared `Limit` in the store: holders, starts in the current
  window, pause, seconds waited for it;
- ``prune [--older-than D] [--keep-last N] [--runs-older-than D]``: retention;
- ``check-deploy --graph module:attr``: every thread in flight checked against a
  new graph version (ok, migrates, blocked); exit code 1 when one is blocked;
- ``demo``: the whole story on a throwaway SQLite file (shipped in the package).

``--json`` prints machine-readable output. Exit codes: 0 done; 1 a thread or
the demo did not end as it should (a partial result, a pause, an error); 2 the
command could not act: usage, an unknown thread or run, a store that cannot be
reached or is not set up (one line on stderr); 75 a drained worker exited
without waiting for a hung step or store call (its runs: given back, or left
to their leases).

The rooms: ``_store`` (the store and the graph a subcommand names), ``_reports``
(``runs``, ``show``, ``metrics``), ``_actions`` (resume, retry, cancel),
``_limits`` (``limits``), ``_exit`` (how a drained ``worker`` process ends),
``_ui`` (``ui``: the console), ``_render`` (JSON,
tables, progress, errors), ``__main__`` (``python -m langgraph_resilience.cli``),
``demo/`` (the demo).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

import click
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Durability

from langgraph_resilience import __version__
from langgraph_resilience.checkpoint import ResilientSaver
from langgraph_resilience.cli._actions import (
    Acted,
    cancel_run,
    resume_thread,
    retry_thread,
)
from langgraph_resilience.cli._exit import LEFT_BEHIND, exit_now, watchdog
from langgraph_resilience.cli._limits import limits
from langgraph_resilience.cli._render import (
    err_console,
    print_acted,
    print_json,
    print_table,
    with_progress,
)
from langgraph_resilience.cli._reports import (
    parse_duration,
    print_metrics,
    print_report,
    print_runs,
    run_of,
)
from langgraph_resilience.cli._store import (
    ARCHIVE_ENV,
    DB_ENV,
    CliError,
    Store,
    load_graph,
    one_line,
    open_store,
    refuse_redis,
    store_check,
    thread_exists,
)
from langgraph_resilience.cli._ui import serve_console
from langgraph_resilience.cli.demo import run_demo
from langgraph_resilience.errors import ResilienceError
from langgraph_resilience.history._deploy import check_deploy
from langgraph_resilience.worker._worker import Worker

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])


def db_option(fn: F) -> F:
    return click.option(
        "--db",
        envvar=DB_ENV,
        metavar="PATH|DSN|URL",
        help=f"The store: a SQLite file path, a Postgres DSN, or a Redis URL "
        f"redis://host:port/db#prefix (env {DB_ENV}).",
    )(fn)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")(fn)


def graph_option(fn: F) -> F:
    return click.option(
        "--graph",
        "graph_spec",
        required=True,
        metavar="MODULE:ATTR",
        help="The graph: a ResilientStateGraph builder, a compiled graph, or a function "
        "returning one (e.g. myapp.pipeline:builder).",
    )(fn)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="langgraph-resilience")
def cli() -> None:
    """Inspect and operate LangGraph runs kept by langgraph-resilience's savers."""


# -- setup -------------------------------------------------------------------------


@cli.command()
@db_option
def setup(db: str | None) -> int:
    """Create the store's tables, or bring them up to date (on Redis: check the
    server and say what it keeps on disk)."""
    with open_store(db, setup=True, redis_ok=True) as store:
        err_console().print(f"store {store.where} is set up ({store.dialect})")
        if store.dialect == "redis":
            err_console().print(store.saver.durability.message)
    return 0


@cli.command()
@db_option
@json_option
def check(db: str | None, as_json: bool) -> int:
    """Verify a whole store: every checksum (checkpoints, writes, blobs, side-effect
    outcomes) and, on SQLite, PRAGMA quick_check. Exit code 1 when something does
    not match."""
    refuse_redis(
        db,
        "check",
        "it scans the SQL tables; a Redis saver verifies each record's checksum as it "
        "reads it (CheckpointCorrupt) and never scans the server",
    )
    with open_store(db) as store:
        found = store_check(store)
    if as_json:
        print_json(dataclasses.asdict(found) | {"ok": found.ok})
        return 0 if found.ok else 1
    kinds = sorted(found.checked)
    rows = [(k, found.checked[k], found.unverified[k]) for k in kinds]
    print_table(
        f"checksums of {store.where}",
        ["rows", "verified", "no checksum (written before)"],
        rows,
        status_column=None,
    )
    if found.quick_check:
        err_console().print(f"PRAGMA quick_check: {'; '.join(found.quick_check)}")
    if found.failures:
        print_table(
            f"{len(found.failures)} row(s) do not match their checksum",
            ["thread", "namespace", "checkpoint", "what"],
            [
                (f.thread_id, f.checkpoint_ns, f.checkpoint_id or "-", f.what)
                for f in found.failures
            ],
            status_column=None,
        )
    err_console().print("store is sound" if found.ok else "store has damaged rows")
    return 0 if found.ok else 1


# -- reading -----------------------------------------------------------------------------

RUN_STATUSES = ("queued", "running", "paused", "success", "partial_complete", "error", "cancelled")


@cli.command()
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(RUN_STATUSES),
    help="Only runs in this status (repeat for several).",
)
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@db_option
@json_option
def runs(statuses: tuple[str, ...], limit: int, db: str | None, as_json: bool) -> int:
    """List the runs, newest first: thread, run, status, attempts, recoveries, owner."""
    with open_store(db, redis_ok=True) as store:
        print_runs(store, statuses, limit, as_json=as_json)
    return 0


@cli.command()
@click.argument("thread")
@click.option("--run", "run", metavar="N|RUN_ID", help="Which run (default: the latest).")
@click.option("--mermaid", is_flag=True, help="Print only the coloured graph (Mermaid).")
@click.option(
    "--graph",
    "graph_spec",
    metavar="MODULE:ATTR",
    help="Draw every node of this graph in the Mermaid, reached or not.",
)
@db_option
@json_option
def show(
    thread: str,
    run: str | None,
    mermaid: bool,
    graph_spec: str | None,
    db: str | None,
    as_json: bool,
) -> int:
    """The run report of THREAD: steps, tries, effects, usage, outcome, suggestions."""
    with open_store(db, redis_ok=True) as store:
        graph = load_graph(graph_spec, store.saver) if graph_spec else None
        print_report(store, thread, run_of(run), graph=graph, mermaid_only=mermaid, as_json=as_json)
    return 0


@cli.command()
@click.option("--since", metavar="WHEN", help="A duration back (24h, 7d) or an ISO time.")
@click.option(
    "--graph", "graph_spec", metavar="MODULE:ATTR", help="Only runs of this graph's nodes."
)
@db_option
@json_option
def metrics(since: str | None, graph_spec: str | None, db: str | None, as_json: bool) -> int:
    """The four recovery metrics, with the counts they are made of, and the waste."""
    with open_store(db, redis_ok=True) as store:
        graph = load_graph(graph_spec, store.saver) if graph_spec else None
        print_metrics(store, since, graph, as_json=as_json)
    return 0


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Bind here (loopback).")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--allow-actions", is_flag=True, help="Show retry/resume/cancel/settle buttons.")
@click.option("--graph", "graph_spec", metavar="MODULE:ATTR", help="Draw and act with this graph.")
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME[:PORT]",
    help="Also answer this Host header (a proxy's name); repeatable. Others get 403.",
)
@db_option
def ui(
    db: str | None,
    host: str,
    port: int,
    allow_actions: bool,
    graph_spec: str | None,
    allowed_hosts: tuple[str, ...],
) -> int:
    """A web console of the store's runs, reports and metrics (docs/console.md)."""
    return serve_console(
        db,
        host=host,
        port=port,
        allow_actions=allow_actions,
        graph_spec=graph_spec,
        allowed_hosts=allowed_hosts,
    )


@cli.command("check-deploy")
@graph_option
@db_option
@json_option
def check_deploy_command(graph_spec: str, db: str | None, as_json: bool) -> int:
    """Check every thread in flight against a new graph version before deploying it:
    ok, migrates (which migrations and renames would run) or blocked (why). Exit code
    1 when a thread is blocked (docs/deploying.md)."""
    with open_store(db, redis_ok=True) as store:
        graph = load_graph(graph_spec, store.saver)
        report = check_deploy(store.saver, graph)
    if as_json:
        click.echo(json.dumps(report.to_dict(), default=str))
    else:
        click.echo(str(report))
    return 1 if report.blocked else 0


# -- acting on threads ---------------------------------------------------------------


def _known_threads(store: Store, threads: Sequence[str]) -> list[str]:
    missing = [t for t in threads if not thread_exists(store.saver, t)]
    if missing:
        raise CliError(
            f"no thread {', '.join(map(repr, missing))} in the store at {store.where} "
            "(`langgraph-resilience runs` lists the runs and their threads)"
        )
    return list(dict.fromkeys(threads))


def _act_on(
    verb: str,
    threads: Sequence[str],
    graph_spec: str,
    db: str | None,
    as_json: bool,
    act: Callable[[CompiledStateGraph[Any, Any, Any, Any], ResilientSaver, str], Acted],
) -> int:
    """``act`` on each thread (all must exist), with a progress display; exit 0
    when every one ended ``success``, else 1."""
    with open_store(db, redis_ok=True) as store:
        known = _known_threads(store, threads)
        graph = load_graph(graph_spec, store.saver)
        acted = with_progress(verb, known, lambda t: act(graph, store.saver, t), quiet=as_json)
    print_acted(acted, as_json=as_json)
    return 0 if all(a.ok for a in acted) else 1


def _json_value(text: str | None, option: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"{option} must be JSON, e.g. '{{\"approved\": true}}': {exc}") from exc


@cli.command()
@click.argument("threads", nargs=-1, required=True, metavar="THREAD...")
@graph_option
@click.option("--value", metavar="JSON", help="The answer for a paused thread's interrupt (JSON).")
@db_option
@json_option
def resume(
    threads: tuple[str, ...], graph_spec: str, value: str | None, db: str | None, as_json: bool
) -> int:
    """Continue THREADs from their last checkpoint: only unfinished steps run."""
    answer = _json_value(value, "--value")
    return _act_on(
        "resuming", threads, graph_spec, db, as_json, partial(resume_thread, value=answer)
    )


@cli.command()
@click.argument("threads", nargs=-1, required=True, metavar="THREAD...")
@graph_option
@click.option("--step", metavar="PATH", help="Re-run this failed or degraded step path.")
@click.option(
    "--update", metavar="JSON", help="A state update applied first: the fix (a JSON object)."
)
@db_option
@json_option
def retry(
    threads: tuple[str, ...],
    graph_spec: str,
    step: str | None,
    update: str | None,
    db: str | None,
    as_json: bool,
) -> int:
    """Re-run the failed step of THREADs that ended with a partial result."""
    fix = _json_value(update, "--update")
    if fix is not None and not isinstance(fix, dict):
        raise CliError(f"--update must be a JSON object of state keys, got {update}")
    act = partial(retry_thread, step=step, update=fix)
    return _act_on("retrying", threads, graph_spec, db, as_json, act)


# -- runs ------------------------------------------------------------------------------


@cli.command()
@click.argument("run_id", metavar="RUN")
@click.option("--reason", default="cancelled from the command line", show_default=True)
@db_option
@json_option
def cancel(run_id: str, reason: str, db: str | None, as_json: bool) -> int:
    """End a queued, running or paused RUN as cancelled."""
    with open_store(db, redis_ok=True) as store:
        had = cancel_run(store.saver, run_id, reason)
    if as_json:
        print_json({"run_id": run_id, "was": had, "status": "cancelled", "reason": reason})
    else:
        err_console().print(f"run {run_id} cancelled (it was {had})")
    return 0


# -- the checkpoint lifecycle -----------------------------------------------------------


@cli.command()
@click.option(
    "--archive",
    "archive_url",
    envvar=ARCHIVE_ENV,
    required=True,
    metavar="URL",
    help=f"The cold tier: file:///dir, s3://bucket/prefix, ... (or {ARCHIVE_ENV}).",
)
@click.option("--older-than", default="24h", show_default=True, metavar="DURATION")
@click.option("--limit", type=click.IntRange(min=1), default=1000, show_default=True)
@db_option
@json_option
def archive(archive_url: str, older_than: str, limit: int, db: str | None, as_json: bool) -> int:
    """Move threads idle for --older-than, with no open run, to the archive."""
    idle = parse_duration(older_than, "--older-than")
    assert idle is not None
    with open_store(db, archive=archive_url, redis_ok=True) as store:
        done = store.saver.archive_idle(idle, limit=limit)
    failed = {thread: one_line(exc) for thread, exc in done.failed.items()}
    if as_json:
        print_json({"archived": done.archived, "skipped": done.skipped, "failed": failed})
    else:
        err_console().print(
            f"archived {len(done.archived)} thread(s), skipped {len(done.skipped)}, "
            f"failed {len(failed)}"
        )
        for thread, error in failed.items():
            err_console().print(f"  {thread}: {error}")
    return 1 if failed else 0


@cli.command()
@click.option("--older-than", metavar="DURATION", help="Checkpoints older than this.")
@click.option("--keep-last", type=click.IntRange(min=1), help="Checkpoints beyond the newest N.")
@click.option("--runs-older-than", metavar="DURATION", help="Records of runs that ended before.")
@click.option("--thread", "threads", multiple=True, help="Only this thread (repeat for several).")
@db_option
@json_option
def prune(
    older_than: str | None,
    keep_last: int | None,
    runs_older_than: str | None,
    threads: tuple[str, ...],
    db: str | None,
    as_json: bool,
) -> int:
    """Retention: old checkpoint history and ended runs' records (effects stay)."""
    if older_than is None and keep_last is None and runs_older_than is None:
        raise CliError(
            "say what to prune: --older-than DURATION, --keep-last N and/or "
            "--runs-older-than DURATION (each namespace's latest checkpoint always stays)"
        )
    refuse_redis(
        db,
        "prune",
        "a Redis saver's retention is its ttl= (a thread's keys expire that long after "
        "its last write) and archive_idle; saver.prune(thread_ids) keeps each "
        "namespace's latest checkpoint",
    )
    with open_store(db) as store:
        pruned = store.saver.prune_history(
            older_than=parse_duration(older_than, "--older-than"),
            keep_last=keep_last,
            runs_older_than=parse_duration(runs_older_than, "--runs-older-than"),
            thread_ids=list(threads) or None,
        )
    if as_json:
        print_json({"checkpoints": pruned.checkpoints, "runs": pruned.runs})
    else:
        err_console().print(
            f"pruned {pruned.checkpoints} checkpoint(s) and {pruned.runs} run record(s)"
        )
    return 0


@cli.command()
@graph_option
@click.option("--concurrency", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--lease-ttl",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds a claim lasts unrenewed: a dead worker's runs are taken over after it.",
)
@click.option("--poll-interval", type=click.FloatRange(min=0, min_open=True), default=None)
@click.option(
    "--drain-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds a drain (SIGTERM) waits for the steps in flight before it gives "
    "their runs back (default: the lease).",
)
@click.option("--worker-id", default=None, help="This worker's name (default host:pid:random).")
@click.option(
    "--durability",
    type=click.Choice(["sync", "async", "exit"]),
    default=None,
    help="LangGraph's durability of every run it drives (default: each graph's own; "
    "'sync' for a plain StateGraph parent, an agent or an @entrypoint).",
)
@click.option("--until-idle", is_flag=True, help="Exit once no run is queued or running.")
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
)
@db_option
@json_option
def worker(
    graph_spec: str,
    concurrency: int,
    lease_ttl: float,
    poll_interval: float | None,
    drain_timeout: float | None,
    worker_id: str | None,
    durability: Durability | None,
    until_idle: bool,
    log_level: str,
    db: str | None,
    as_json: bool,
) -> int:
    """Run a Worker: claim runs, run them under a lease, take over dead workers' runs.

    SIGTERM or SIGINT drains it: steps in flight finish, their runs go back to
    the queue, and it exits 0. A step still busy after --drain-timeout (a store
    call that hangs) is given back, or left to its lease when the store cannot
    be reached; the process then exits at once without it, with code 75, within
    the drain timeout plus one store call.
    """
    _log_to_stderr(log_level)
    with open_store(db, redis_ok=True) as store:
        graph = load_graph(graph_spec, store.saver)
        w = Worker(
            graph,
            checkpointer=store.saver,
            lease_ttl=lease_ttl,
            worker_id=worker_id,
            concurrency=concurrency,
            poll_interval=poll_interval,
            drain_timeout=drain_timeout,
            durability=durability,
        )
        err_console().print(
            f"worker {w.worker_id} on {store.where}: concurrency {concurrency}, lease "
            f"{lease_ttl:g} s, durability {durability or 'of each graph'}; "
            "SIGTERM or Ctrl-C drains it"
        )
        with watchdog(w):
            done = w.run(until_idle=until_idle)
            if w.left_behind:  # hung threads, and a store that may not answer a flush
                _print_done(w, done, as_json)
                logging.getLogger("langgraph_resilience").warning(
                    "worker %s: exiting without %s", w.worker_id, ", ".join(w.left_behind)
                )
                exit_now(LEFT_BEHIND)
    _print_done(w, done, as_json)
    return 0


def _print_done(w: Worker, done: dict[str, str], as_json: bool) -> None:
    if as_json:
        print_json({"worker_id": w.worker_id, "runs": done})
    elif done:
        print_table(f"runs worker {w.worker_id} left", ["run", "status"], sorted(done.items()))


def _log_to_stderr(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("langgraph_resilience")
    logger.addHandler(handler)
    logger.setLevel(level.upper())


# -- demo ------------------------------------------------------------------------------


@cli.command()
@click.option(
    "--dir",
    "workdir",
    type=click.Path(file_okay=False),
    default=None,
    help="Work in this directory (default: a new temporary one, kept for inspection).",
)
@click.option(
    "--db",
    default=None,
    help="The store (default: a SQLite file in --dir): a Postgres DSN, or "
    "redis://host:port/db (under a key prefix of the demo's own unless #prefix names one).",
)
def demo(workdir: str | None, db: str | None) -> int:
    """A research pipeline that fails every way and recovers (SQLite, under a minute)."""
    return run_demo(workdir, db)


cli.add_command(limits)


# -- entry point -------------------------------------------------------------------------


def _fail(message: str) -> int:
    print(f"langgraph-resilience: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code.

    Example:
        >>> main(["runs", "--db", "runs.db", "--json"])  # doctest: +SKIP
        0
    """
    try:
        result = cli.main(args=argv, prog_name="langgraph-resilience", standalone_mode=False)
    except CliError as exc:
        return _fail(str(exc))
    except ResilienceError as exc:  # ConfigError, StoreUnavailable, RunStateError
        return _fail(one_line(exc))
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return int(exc.exit_code)
    except click.Abort:
        print("aborted", file=sys.stderr)
        return 130
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
