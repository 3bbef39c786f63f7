"""The resilience tables and their migrations, both dialects.

Each table is defined once (`Table`); its ``CREATE TABLE``, the columns
`copy_thread` copies and the columns records are read from all derive from that
definition. Migrations are one append-only list (index = version), each entry
saying what it runs on SQLite and on Postgres. Never edit or reorder an entry
that has shipped; append a new one (a new column: add it to its table with
``since=`` the new version, and append ``Migration.both(*TABLE.added(version))``).
We keep our own ``resilience_migrations`` table and never append to LangGraph's
list: an upstream migration would then be skipped silently.
"""

from __future__ import annotations

from typing import NamedTuple

from langgraph_resilience.checkpoint.store._pg_functions import (
    _PG_CHECK_FENCE,
    _PG_LIMIT_ACQUIRE,
    _PG_LIMIT_ACQUIRE_29,
    _PG_REFUSE_FORK,
    _PG_REFUSE_FORK_OR_ARCHIVED,
)
from langgraph_resilience.checkpoint.store._pg_functions import ARCHIVED_MARKER as ARCHIVED_MARKER
from langgraph_resilience.checkpoint.store._pg_functions import FORK_MARKER as FORK_MARKER
from langgraph_resilience.checkpoint.store._pg_functions import LEASE_MARKER as LEASE_MARKER
from langgraph_resilience.checkpoint.store._store import (
    Column,
    Dialect,
    Statements,
    Stmt,
    Table,
)
from langgraph_resilience.errors import ConfigError

__all__ = [
    "ARCHIVE",
    "ATTEMPTS",
    "BACKFILL",
    "COUNTERS",
    "EFFECTS",
    "LIMITS",
    "LIMIT_HOLDS",
    "LIMIT_STARTS",
    "MIGRATIONS",
    "RECOVERIES",
    "RECOVERY_PATHS",
    "RUNS",
    "RUN_LOG",
    "STEPS",
    "SCHEMA_VERSION",
    "check_schema",
    "migrate",
    "migrations",
]

RUNS = Table(
    "resilience_runs",
    (
        Column("run_id", "TEXT PRIMARY KEY"),
        Column("thread_id", "TEXT NOT NULL"),
        Column("status", "TEXT NOT NULL DEFAULT 'queued'"),
        Column("owner", "TEXT"),
        Column("fencing_token", "BIGINT_T NOT NULL DEFAULT 0"),
        Column("lease_expires_at", "REAL_T"),
        Column("attempts", "INTEGER NOT NULL DEFAULT 0"),
        Column("recoveries", "INTEGER NOT NULL DEFAULT 0"),
        Column("input_type", "TEXT"),
        Column("input", "BLOB_T"),
        Column("budget_type", "TEXT"),
        Column("budget", "BLOB_T"),
        Column("outcome_type", "TEXT"),
        Column("outcome", "BLOB_T"),
        Column("created_at", "REAL_T NOT NULL"),
        Column("updated_at", "REAL_T NOT NULL"),
        Column("claim_token", "TEXT", since=9),
        Column("resume_type", "TEXT", since=10),
        Column("resume", "BLOB_T", since=10),
        Column("not_before", "REAL_T", since=11),
        Column("holder", "TEXT", since=16),
        Column("lease_clock", "TEXT", since=16),
        Column("lease_ticks", "REAL_T", since=16),
    ),
    since=1,
)
ATTEMPTS = Table(
    "resilience_node_attempts",
    (
        Column("thread_id", "TEXT NOT NULL"),
        Column("checkpoint_ns", "TEXT NOT NULL DEFAULT ''"),
        Column("checkpoint_id", "TEXT NOT NULL"),
        Column("task_id", "TEXT NOT NULL"),
        Column("attempt", "INTEGER NOT NULL"),
        Column("node", "TEXT NOT NULL"),
        Column("status", "TEXT NOT NULL"),
        Column("kind", "TEXT"),
        Column("error_type", "TEXT"),
        Column("reason", "TEXT"),
        Column("started_at", "REAL_T NOT NULL"),
        Column("finished_at", "REAL_T"),
        Column("wait", "REAL_T", since=11),
    ),
    primary_key=("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "attempt"),
    since=2,
)
EFFECTS = Table(
    "resilience_effects",
    (
        Column("thread_id", "TEXT NOT NULL"),
        Column("idempotency_key", "TEXT NOT NULL"),
        Column("checkpoint_ns", "TEXT NOT NULL DEFAULT ''"),
        Column("checkpoint_id", "TEXT NOT NULL"),
        Column("task_id", "TEXT NOT NULL"),
        Column("name", "TEXT NOT NULL"),
        Column("args_digest", "TEXT"),
        Column("status", "TEXT NOT NULL"),
        Column("fencing_token", "BIGINT_T"),
        Column("intent_at", "REAL_T NOT NULL"),
        Column("outcome_at", "REAL_T"),
        Column("outcome_type", "TEXT"),
        Column("outcome", "BLOB_T"),
        Column("error", "TEXT"),
        Column("owner", "TEXT", since=8),
        Column("lease_until", "REAL_T", since=8),
        Column("outcome_sum", "BIGINT_T", since=17),
    ),
    primary_key=("thread_id", "idempotency_key"),
    since=3,
)
# One row per (scope, name); a scope is one process, so workers never contend for a row.
COUNTERS = Table(
    "resilience_counters",
    (
        Column("scope", "TEXT NOT NULL"),
        Column("name", "TEXT NOT NULL"),
        Column("value", "BIGINT_T NOT NULL DEFAULT 0"),
    ),
    primary_key=("scope", "name"),
    since=4,
)
# One row per recovery of a thread, of every kind, stored when it happens: a
# Worker's takeover of a run whose lease expired (in the claim's transaction), a
# resume after a crash, and (since 26) a `retry_failed`, a budget or a human
# resume (in the transaction of the write that makes it: `_run_log`). ``owner``:
# the worker (or process) that went on; ``checkpoint_id``: the checkpoint it
# resumed, so the steps it redid can be told from the rest; ``run``: the run of
# the thread it resumed (since 26).
RECOVERIES = Table(
    "resilience_recoveries",
    (
        Column("thread_id", "TEXT NOT NULL"),
        Column("key", "TEXT NOT NULL"),
        Column("kind", "TEXT NOT NULL"),
        Column("run_id", "TEXT"),
        Column("owner", "TEXT"),
        Column("checkpoint_id", "TEXT"),
        Column("at", "REAL_T NOT NULL"),
        Column("run", "INTEGER", since=26),
    ),
    primary_key=("thread_id", "key"),
    since=12,
)
# The paths a `retry_failed` recovery re-runs (its steps redone), one row each.
RECOVERY_PATHS = Table(
    "resilience_recovery_paths",
    (
        Column("thread_id", "TEXT NOT NULL"),
        Column("key", "TEXT NOT NULL"),
        Column("path", "TEXT NOT NULL"),
    ),
    primary_key=("thread_id", "key", "path"),
    since=26,
)

# Threads whose runs began before the run ledger (checkpoints older than their
# first run row, or none): `history._backfill` reads each once from its writes,
# stores its rows, and deletes its row here (since 27).
BACKFILL = Table(
    "resilience_backfill",
    (Column("thread_id", "TEXT PRIMARY KEY"),),
    since=27,
)

# One row per thread that was ever archived: ``archived`` (its checkpoints are in
# the cold tier only), ``archiving`` (an archiver holds ``claim`` until
# ``claimed_until``; the hot rows are still there) or ``hot`` (restored at
# ``touched_at``, or released). See `checkpoint.archive._archival`.
ARCHIVE = Table(
    "resilience_archive",
    (
        Column("thread_id", "TEXT PRIMARY KEY"),
        Column("status", "TEXT NOT NULL"),
        Column("claim", "TEXT"),
        Column("claimed_until", "REAL_T"),
        Column("objects", "INTEGER NOT NULL DEFAULT 0"),
        Column("archived_at", "REAL_T"),
        Column("touched_at", "REAL_T"),
    ),
    since=13,
)

# The run ledger (`_run_log`): one row per run of a thread, whatever ran it (a
# plain invoke or stream, a Worker, the Agent Server), keyed by the run's number
# on the thread (``state["resilience"]["run"]``). Started in the transaction of
# the run's input checkpoint, ended in that of the write that ends it (or by the
# driver, or the Worker). ``task_spec``: the run's input, verbatim (the saver's
# serde); ``usage``, JSON text. A run nested in another (a resilient subgraph, a
# graph invoked inside a node) has no row of its own: its steps are the run's.
RUN_LOG = Table(
    "resilience_run_log",
    (
        Column("thread_id", "TEXT NOT NULL"),
        Column("run", "INTEGER NOT NULL"),
        Column("status", "TEXT NOT NULL"),
        Column("task_spec_type", "TEXT"),
        Column("task_spec", "BLOB_T"),
        Column("checkpoint_id", "TEXT"),
        Column("started_at", "REAL_T NOT NULL"),
        Column("ended_at", "REAL_T"),
        Column("updated_at", "REAL_T NOT NULL"),
        Column("failed_step", "TEXT"),
        Column("usage", "TEXT"),
        Column("run_id", "TEXT"),
        Column("worker", "TEXT"),
        Column("paused_for", "TEXT", since=26),
    ),
    primary_key=("thread_id", "run"),
    since=18,
)
# One row per step (task) that ran, from the record its own run-log write
# carries, stored in the transaction of that write: never a step row without its
# writes, nor the reverse. ``kinds`` and ``usage``: JSON text. ``tried`` (since
# 26): the task whose tries these were (``namespace|task id``, the key of its
# attempts and effects) when another task stored the row (a failed step's).
# Since 30 a row leaves out what its other columns say (``seconds``: one step's
# usage; `_step_rows` writes and reads every row).
STEPS = Table(
    "resilience_steps",
    (
        Column("thread_id", "TEXT NOT NULL"),
        Column("checkpoint_ns", "TEXT NOT NULL DEFAULT ''"),
        Column("checkpoint_id", "TEXT NOT NULL"),
        Column("task_id", "TEXT NOT NULL"),
        Column("run", "INTEGER"),
        Column("path", "TEXT NOT NULL"),
        Column("node", "TEXT NOT NULL"),
        Column("status", "TEXT NOT NULL"),
        Column("attempts", "INTEGER NOT NULL DEFAULT 0"),
        Column("kinds", "TEXT"),
        Column("started_at", "REAL_T"),
        Column("ended_at", "REAL_T"),
        Column("summary", "TEXT"),
        Column("run_id", "TEXT"),
        Column("worker", "TEXT"),
        Column("usage", "TEXT"),
        Column("tried", "TEXT", since=26),
        Column("seconds", "REAL_T", since=30),
    ),
    primary_key=("thread_id", "checkpoint_ns", "checkpoint_id", "task_id"),
    since=19,
)
# Shared limits (`langgraph_resilience.limits`): one row per named limit, its
# numbers, its pause (a Retry-After met while holding it) and the seconds tries
# waited for it; a hold per try holding a concurrency slot (``holder``: its
# process, judged alive or gone as effect claims judge theirs; ``lease_until``
# for holders on other machines); a start per try admitted under a rate, kept
# for one window (``per`` seconds).
LIMITS = Table(
    "resilience_limits",
    (
        Column("name", "TEXT PRIMARY KEY"),
        Column("concurrency", "INTEGER"),
        Column("rate", "INTEGER"),
        Column("per", "REAL_T"),
        Column("paused_until", "REAL_T"),
        Column("pause_reason", "TEXT"),
        Column("waited", "REAL_T NOT NULL DEFAULT 0"),
        Column("created_at", "REAL_T NOT NULL"),
    ),
    since=24,
)
LIMIT_HOLDS = Table(
    "resilience_limit_holds",
    (
        Column("name", "TEXT NOT NULL"),
        Column("hold", "TEXT NOT NULL"),
        Column("holder", "TEXT NOT NULL"),
        Column("since", "REAL_T NOT NULL"),
        Column("lease_until", "REAL_T NOT NULL"),
    ),
    primary_key=("name", "hold"),
    since=24,
)
LIMIT_STARTS = Table(
    "resilience_limit_starts",
    (
        Column("name", "TEXT NOT NULL"),
        Column("hold", "TEXT NOT NULL"),
        Column("at", "REAL_T NOT NULL"),
    ),
    primary_key=("name", "hold"),
    since=24,
)

#: Tables keyed by a thread's checkpoints, copied and deleted with them.
CHECKPOINT_TABLES = (ATTEMPTS, EFFECTS, STEPS)
#: Tables of a thread's history that `copy_thread` copies too (not keyed by checkpoint).
COPIED_TABLES = (*CHECKPOINT_TABLES, RUN_LOG)
#: Every resilience table with a thread_id (runs are deleted with their thread, not copied).
THREAD_TABLES = (*COPIED_TABLES, RUNS, RECOVERIES, RECOVERY_PATHS, BACKFILL, ARCHIVE)

#: The statuses of a run that holds its thread: a thread has at most one such run.
OPEN_STATUSES = ("queued", "running", "paused")

_CREATE_MIGRATIONS = "CREATE TABLE IF NOT EXISTS resilience_migrations (v INTEGER PRIMARY KEY)"
_ONE_OPEN_RUN = (
    "CREATE UNIQUE INDEX IF NOT EXISTS resilience_runs_one_open ON resilience_runs "
    f"(thread_id) WHERE status IN ({', '.join(repr(s) for s in OPEN_STATUSES)})"
)


#: LangGraph's tables that carry a checksum column (`_sums`), per dialect.
_SUMMED = {
    "sqlite": ("checkpoints", "writes"),
    "postgres": ("checkpoints", "checkpoint_blobs", "checkpoint_writes"),
}
SUM = "resilience_sum"


class Migration(NamedTuple):
    """What one schema version runs on each dialect (maybe nothing on one)."""

    sqlite: tuple[str, ...]
    postgres: tuple[str, ...]

    @classmethod
    def both(cls, *statements: str) -> Migration:
        return cls(sqlite=statements, postgres=statements)

    @classmethod
    def postgres_only(cls, *statements: str) -> Migration:
        return cls(sqlite=(), postgres=statements)


MIGRATIONS: tuple[Migration, ...] = (
    # 0: the version table itself (created before the loop runs).
    Migration.both(_CREATE_MIGRATIONS),
    # 1: runs, with their lease (owner, fencing token, expiry).
    Migration.both(
        RUNS.create(),
        "CREATE INDEX IF NOT EXISTS resilience_runs_thread ON resilience_runs (thread_id)",
        "CREATE INDEX IF NOT EXISTS resilience_runs_claim "
        "ON resilience_runs (status, lease_expires_at)",
    ),
    # 2: node attempts, one row per try of a task.
    Migration.both(ATTEMPTS.create()),
    # 3: side-effect intents and outcomes.
    Migration.both(EFFECTS.create()),
    # 4: save counters.
    Migration.both(COUNTERS.create()),
    # 5: the fork check (SQLite checks in Python).
    Migration.postgres_only(_PG_REFUSE_FORK),
    # 6: the fencing check (SQLite checks in Python).
    Migration.postgres_only(_PG_CHECK_FENCE),
    # 7: at most one open run per thread, also when two processes submit at once.
    Migration.both(_ONE_OPEN_RUN),
    # 8: an effect's intent names its executor and how long its claim holds.
    Migration.both(*EFFECTS.added(8)),
    # 9: a run names the claim that took it, so a retried claim finds its own.
    Migration.both(*RUNS.added(9)),
    # 10: a paused run keeps the value it is resumed with (a human's answer).
    Migration.both(*RUNS.added(10)),
    # 11: a queued run may wait for a time (a service's long Retry-After); a failed
    # try records the wait that followed it.
    Migration.both(*RUNS.added(11), *ATTEMPTS.added(11)),
    # 12: recoveries nothing else stores (takeovers, crash resumes), for the metrics.
    Migration.both(
        RECOVERIES.create(),
        "CREATE INDEX IF NOT EXISTS resilience_recoveries_at ON resilience_recoveries (at)",
    ),
    # 13: threads moved to the cold tier (archive_idle) and back.
    Migration.both(ARCHIVE.create()),
    # 14: the fork check also refuses a write to a thread archived meanwhile
    # (SQLite checks in Python).
    Migration.postgres_only(_PG_REFUSE_FORK_OR_ARCHIVED),
    # 15: a checksum on each checkpoint row, write and blob (`_sums`); rows written
    # before keep NULL: read as before, unverified.
    Migration(
        sqlite=tuple(f"ALTER TABLE {t} ADD COLUMN {SUM} INTEGER" for t in _SUMMED["sqlite"]),
        postgres=tuple(
            f"ALTER TABLE {t} ADD COLUMN IF NOT EXISTS {SUM} BIGINT" for t in _SUMMED["postgres"]
        ),
    ),
    # 16: a claim names its worker's process (a dead one's runs are taken over at
    # once) and, on SQLite, the boot clock its lease is judged by.
    Migration.both(*RUNS.added(16)),
    # 17: a checksum on each effect outcome (`_sums.outcome_sum`); outcomes stored
    # before keep NULL: replayed as before, unverified.
    Migration.both(*EFFECTS.added(17)),
    # 18: the run ledger's runs (threads written before have none: their history
    # is read from their writes, as before). Indexed for the metrics' ``since=``
    # (ended, started), the newest-first listing (by status too), a Worker run's
    # row, and the run a nested step belongs to (latest started at a checkpoint).
    Migration.both(
        RUN_LOG.create(),
        "CREATE INDEX IF NOT EXISTS resilience_run_log_ended ON resilience_run_log (ended_at)",
        "CREATE INDEX IF NOT EXISTS resilience_run_log_started ON resilience_run_log (started_at)",
        "CREATE INDEX IF NOT EXISTS resilience_run_log_status "
        "ON resilience_run_log (status, started_at)",
        "CREATE INDEX IF NOT EXISTS resilience_run_log_run_id ON resilience_run_log (run_id)",
        "CREATE INDEX IF NOT EXISTS resilience_run_log_checkpoint "
        "ON resilience_run_log (thread_id, checkpoint_id)",
    ),
    # 19: the run ledger's steps, one row per task that ran (its key: the writes').
    # SQLite keeps them in their key's order (no second b-tree for the key: a
    # step row costs about a quarter fewer bytes).
    Migration(sqlite=(f"{STEPS.create()} WITHOUT ROWID",), postgres=(STEPS.create(),)),
    # 20-23: unused (versions set aside for work that needed none).
    Migration.both(),
    Migration.both(),
    Migration.both(),
    Migration.both(),
    # 24: shared limits, their holds and their starts (`limits`).
    Migration.both(
        LIMITS.create(),
        LIMIT_HOLDS.create(),
        LIMIT_STARTS.create(),
        "CREATE INDEX IF NOT EXISTS resilience_limit_starts_at "
        "ON resilience_limit_starts (name, at)",
    ),
    # 25: a limit acquired in one round trip (SQLite runs the same steps in Python,
    # in an immediate transaction: `_limits.acquire`).
    Migration.postgres_only(_PG_LIMIT_ACQUIRE),
    # 26: every recovery a row when it happens: its run; the paths a retry_failed
    # re-runs; why a run paused (budget or human: the kind its resume is). The
    # metrics' ``since=`` reads runs by when they were last updated. Recoveries
    # stored before get their run from the runs' rows (the latest started then).
    Migration.both(
        *RECOVERIES.added(26),
        *RUN_LOG.added(26),
        *STEPS.added(26),
        RECOVERY_PATHS.create(),
        "CREATE INDEX IF NOT EXISTS resilience_run_log_updated ON resilience_run_log (updated_at)",
        "CREATE INDEX IF NOT EXISTS resilience_runs_updated ON resilience_runs (updated_at)",
        f"UPDATE {RECOVERIES.name} SET run = coalesce("
        f"(SELECT max(r.run) FROM {RUN_LOG.name} r WHERE r.run_id = {RECOVERIES.name}.run_id), "
        f"(SELECT max(r.run) FROM {RUN_LOG.name} r WHERE r.thread_id = {RECOVERIES.name}.thread_id "
        f"AND r.started_at <= {RECOVERIES.name}.at)) WHERE run IS NULL",
    ),
    # 27: the threads written before the ledger, to be read once into its rows.
    Migration.both(
        BACKFILL.create(),
        f"INSERT INTO {BACKFILL.name} (thread_id) SELECT DISTINCT c.thread_id FROM checkpoints c "
        f"WHERE c.checkpoint_ns = '' AND NOT EXISTS (SELECT 1 FROM {RUN_LOG.name} r "
        "WHERE r.thread_id = c.thread_id AND r.checkpoint_id <= c.checkpoint_id) "
        "ON CONFLICT DO NOTHING",
    ),
    # 28: set aside for another branch of this release (nothing here).
    Migration.both(),
    # 29: the acquire of version 25 with less server time: the same steps and
    # answers, fewer index walks (`_pg_functions._PG_LIMIT_ACQUIRE_29`).
    Migration.postgres_only(_PG_LIMIT_ACQUIRE_29),
    # 30: leaner step rows: one step's usage as ``seconds`` (REAL), and ``usage``,
    # ``kinds``, ``node``, ``status`` left out when the row says them already
    # (`_step_rows`). Rows stored before are read as they are.
    Migration.both(*STEPS.added(30)),
)
SCHEMA_VERSION = len(MIGRATIONS) - 1


def migrations(d: Dialect) -> tuple[tuple[str, ...], ...]:
    """The statements of each version on one dialect (index = version)."""
    return tuple(tuple(d.sql(s) for s in getattr(m, d.name)) for m in MIGRATIONS)


def check_schema_version(found: int, *, where: str) -> None:
    """Refuse a database migrated by a newer langgraph-resilience."""
    if found > SCHEMA_VERSION:
        raise ConfigError(
            f"{where} holds resilience schema version {found}, newer than this "
            f"langgraph-resilience knows (up to {SCHEMA_VERSION}). It was set up by a "
            "newer release; upgrade langgraph-resilience instead of using it with this "
            "one (nothing was changed)."
        )


def migrate(d: Dialect, *, where: str) -> Statements[None]:
    """Bring the resilience tables up to `SCHEMA_VERSION`, one transaction."""
    if d.migration_lock is not None:
        yield Stmt(d.migration_lock)
    # Read before any CREATE ... IF NOT EXISTS: the NOTICE such a statement raises
    # when the table exists can hand a pipelined fetch the wrong rows.
    found = yield from schema_version(d)
    if found is None:
        yield Stmt(_CREATE_MIGRATIONS)
        found = -1
    check_schema_version(found, where=where)
    for v, statements in enumerate(migrations(d)):
        if v <= found:
            continue
        for sql in statements:
            yield Stmt(sql)
        yield Stmt(d.sql("INSERT INTO resilience_migrations (v) VALUES (?)"), (v,))


def schema_version(d: Dialect) -> Statements[int | None]:
    """The stored schema version, or None when the table does not exist."""
    rows = yield Stmt(d.sql(d.table_exists), ("resilience_migrations",), fetch=True)
    if not rows[0][0]:
        return None
    rows = yield Stmt("SELECT max(v) FROM resilience_migrations", fetch=True)
    return -1 if rows[0][0] is None else int(rows[0][0])


def check_schema(d: Dialect) -> Statements[None]:
    """Refuse to write to a database whose resilience tables are missing or newer."""
    found = yield from schema_version(d)
    if found is None or found < SCHEMA_VERSION:
        raise ConfigError(
            f"the resilience tables of this {d.name} database are "
            f"{'missing' if found is None else f'at version {found}'} (this release needs "
            f"{SCHEMA_VERSION}). Call saver.setup() once before running graphs; it "
            "also runs LangGraph's own migrations."
        )
    check_schema_version(found, where=f"this {d.name} database")
