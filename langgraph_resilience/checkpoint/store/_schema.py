"""The resilience tables, the Postgres functions, and their migrations, both dialects.

Each table is defined once (`Table`); its ``CREATE TABLE``, the columns
`copy_thread` copies and the columns records are read from all derive from that
definition. Migrations are one append-only list (index = version), each entry
saying what it runs on SQLite and on Postgres: version 1 is the first schema,
every table as it stands; every change after it is a migration of its own.
Never edit or reorder an entry; append a new one (a new column: add it to its
table with ``since=`` the new version, and append
``Migration.both(*TABLE.added(version))``). We keep our own
``resilience_schema`` table and never append to LangGraph's
list: an upstream migration would then be skipped silently.
"""

from __future__ import annotations

from typing import NamedTuple

from langgraph_resilience.checkpoint.store._store import (
    Column,
    Dialect,
    Statements,
    Stmt,
    Table,
)
from langgraph_resilience.errors import ConfigError

__all__ = [
    "ARCHIVED_MARKER",
    "ARCHIVE",
    "ATTEMPTS",
    "COUNTERS",
    "EFFECTS",
    "FORK_MARKER",
    "LEASE_MARKER",
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
    "SETUP_LOCK",
    "SETUP_UNLOCK",
    "check_schema",
    "migrate",
    "migrations",
]

# -- the Postgres functions, and the markers their errors carry (the savers --------------
# -- translate a marked error into ours) ------------------------------------------------

# Postgres refuses a fork in the same statement as the write: this function takes
# a per-thread lock, then raises when the namespace already holds a checkpoint
# newer than the parent (other than the one being written). SQLite runs the same
# query in the write's transaction instead (`_threads.put_checkpoint`).
FORK_MARKER = "resilience-fork"


# Postgres fences a write in the same round trip: `_PG_CHECK_FENCE` raises unless
# the run still carries the writer's fencing token, and holds the run's row
# (FOR SHARE) until the write commits, so a claim cannot slip in between.
LEASE_MARKER = "resilience-lease-lost"
# The fork check also refuses a write to a thread moved to the archive after the
# writer read it (its parent is gone from the hot tier: the write would store a
# checkpoint whose history, and the blobs of its unchanged channels, are only in
# the archive). Reading the thread restores it.
ARCHIVED_MARKER = "resilience-archived"

_PG_REFUSE_FORK = f"""
CREATE OR REPLACE FUNCTION resilience_refuse_fork(
    p_thread TEXT, p_ns TEXT, p_parent TEXT, p_new TEXT
) RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    newer TEXT;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext(p_thread), hashtext(p_ns));
    SELECT checkpoint_id INTO newer FROM checkpoints
    WHERE thread_id = p_thread AND checkpoint_ns = p_ns
      AND checkpoint_id > p_parent AND checkpoint_id <> p_new
    ORDER BY checkpoint_id DESC LIMIT 1;
    IF newer IS NOT NULL THEN
        RAISE EXCEPTION '{FORK_MARKER}' USING DETAIL = newer;
    END IF;
    IF EXISTS (
        SELECT 1 FROM resilience_archive WHERE thread_id = p_thread AND status = 'archived'
    ) THEN
        RAISE EXCEPTION '{ARCHIVED_MARKER}' USING DETAIL = p_parent;
    END IF;
END $$"""

_PG_CHECK_FENCE = f"""
CREATE OR REPLACE FUNCTION resilience_check_fence(p_run TEXT, p_token BIGINT)
RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    current BIGINT;
BEGIN
    SELECT fencing_token INTO current FROM resilience_runs WHERE run_id = p_run FOR SHARE;
    IF current IS DISTINCT FROM p_token THEN
        RAISE EXCEPTION '{LEASE_MARKER}' USING DETAIL = coalesce(current::text, 'none');
    END IF;
END $$"""

# Postgres acquires limits in one round trip: for each (sorted) name, take the
# limit's lock (advisory, per transaction), create or read the limit, refuse on
# other numbers, a pause, a full set of live holds (dropping those of ``p_dead``
# holders and run-out leases) or a full rate window (dropping starts older than
# the window); admitted by all, store a start and a hold for each. 0 stands for
# "no bound" in the arrays. A rate's window is kept a guard longer than ``per``
# (2.5%, at most 25 ms; `_limits.window`), so that the starts the tries see,
# each a moment after its admission, also keep to the rate.
# Holds and starts come and go with every try, so a limit's index entries are
# mostly of dead rows until the next vacuum; bitmap scans (the planner's choice
# on these small tables) never mark those entries dead, plain index scans do, and
# later scans skip them. One scan counts the live holds and whether any are to
# drop (run-out leases, ``p_dead`` holders): the DELETE runs only then, and the
# holders' names are gathered only for a full limit. The rate's count reads only
# the window's starts (the index is by name and time).
_PG_LIMIT_ACQUIRE = """
CREATE OR REPLACE FUNCTION resilience_limit_acquire(
    p_names TEXT[], p_concurrency INTEGER[], p_rate INTEGER[], p_per DOUBLE PRECISION[],
    p_hold TEXT, p_holder TEXT, p_lease DOUBLE PRECISION, p_dead TEXT[],
    p_blamed TEXT, p_waited DOUBLE PRECISION
) RETURNS TABLE (
    o_wait DOUBLE PRECISION, o_why TEXT, o_name TEXT, o_concurrency INTEGER,
    o_rate INTEGER, o_per DOUBLE PRECISION, o_holders TEXT[]
) LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
    now_ DOUBLE PRECISION := extract(epoch from clock_timestamp());
    i INTEGER;
    l_conc INTEGER;
    l_rate INTEGER;
    l_per DOUBLE PRECISION;
    l_paused DOUBLE PRECISION;
    n INTEGER;
    gone INTEGER;
    oldest DOUBLE PRECISION;
    since_ DOUBLE PRECISION;
    hs TEXT[];
BEGIN
    -- A hold or start lost with the server's last moments is a try's slot for one
    -- crash: not worth a WAL flush per try (releases are relaxed the same way).
    PERFORM set_config('synchronous_commit', 'off', true);
    IF p_waited > 0 THEN
        UPDATE resilience_limits l SET waited = l.waited + p_waited WHERE l.name = p_blamed;
    END IF;
    FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
        -- One acquirer of a limit at a time (a lock, not a row write).
        PERFORM pg_advisory_xact_lock(hashtext('resilience_limit'), hashtext(p_names[i]));
        SELECT l.concurrency, l.rate, l.per, l.paused_until INTO l_conc, l_rate, l_per, l_paused
            FROM resilience_limits l WHERE l.name = p_names[i];
        IF NOT FOUND THEN
            INSERT INTO resilience_limits (name, concurrency, rate, per, waited, created_at)
            VALUES (p_names[i], nullif(p_concurrency[i], 0), nullif(p_rate[i], 0), p_per[i], 0,
                now_)
            RETURNING concurrency, rate, per, paused_until INTO l_conc, l_rate, l_per, l_paused;
        END IF;
        IF l_conc IS DISTINCT FROM nullif(p_concurrency[i], 0)
            OR l_rate IS DISTINCT FROM nullif(p_rate[i], 0)
            OR (l_rate IS NOT NULL AND l_per IS DISTINCT FROM p_per[i]) THEN
            RETURN QUERY SELECT NULL::float8, 'mismatch'::text, p_names[i], l_conc,
                l_rate, l_per, NULL::text[];
            RETURN;
        END IF;
        IF l_paused > now_ THEN
            RETURN QUERY SELECT l_paused - now_, 'paused'::text, p_names[i],
                l_conc, l_rate, l_per, NULL::text[];
            RETURN;
        END IF;
        IF l_conc IS NOT NULL THEN
            SELECT count(*) FILTER (WHERE h.lease_until >= now_ AND h.holder <> ALL(p_dead)),
                count(*) FILTER (WHERE h.lease_until < now_ OR h.holder = ANY(p_dead))
                INTO n, gone FROM resilience_limit_holds h WHERE h.name = p_names[i];
            IF gone > 0 THEN
                DELETE FROM resilience_limit_holds h WHERE h.name = p_names[i]
                    AND (h.lease_until < now_ OR h.holder = ANY(p_dead));
            END IF;
            IF n >= l_conc THEN
                SELECT array_agg(DISTINCT h.holder) INTO hs
                    FROM resilience_limit_holds h WHERE h.name = p_names[i];
                RETURN QUERY SELECT NULL::float8, 'full'::text, p_names[i], l_conc,
                    l_rate, l_per, hs;
                RETURN;
            END IF;
        END IF;
        IF l_rate IS NOT NULL THEN
            since_ := now_ - l_per - least(0.025, l_per * 0.025);
            DELETE FROM resilience_limit_starts s WHERE s.name = p_names[i] AND s.at <= since_;
            SELECT count(*), min(s.at) INTO n, oldest
                FROM resilience_limit_starts s WHERE s.name = p_names[i] AND s.at > since_;
            IF n >= l_rate THEN
                RETURN QUERY SELECT oldest + l_per + least(0.025, l_per * 0.025) - now_,
                    'rate'::text, p_names[i], l_conc, l_rate, l_per, NULL::text[];
                RETURN;
            END IF;
        END IF;
    END LOOP;
    FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
        IF p_rate[i] > 0 THEN
            INSERT INTO resilience_limit_starts (name, hold, at) VALUES (p_names[i], p_hold, now_);
        END IF;
        IF p_concurrency[i] > 0 THEN
            INSERT INTO resilience_limit_holds (name, hold, holder, since, lease_until)
            VALUES (p_names[i], p_hold, p_holder, now_, now_ + p_lease);
        END IF;
    END LOOP;
    RETURN QUERY SELECT 0::float8, ''::text, NULL::text, NULL::integer, NULL::integer,
        NULL::float8, NULL::text[];
END $$"""


# -- the tables ---------------------------------------------------------------------------

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
        Column("claim_token", "TEXT"),
        Column("resume_type", "TEXT"),
        Column("resume", "BLOB_T"),
        Column("not_before", "REAL_T"),
        Column("holder", "TEXT"),
        Column("lease_clock", "TEXT"),
        Column("lease_ticks", "REAL_T"),
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
        Column("wait", "REAL_T"),
        Column("route", "TEXT"),
    ),
    primary_key=("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "attempt"),
    since=1,
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
        Column("owner", "TEXT"),
        Column("lease_until", "REAL_T"),
        Column("outcome_sum", "BIGINT_T"),
        # How the outcome came about: called, replayed, reconciled, reexecuted.
        Column("how", "TEXT", since=2),
    ),
    primary_key=("thread_id", "idempotency_key"),
    since=1,
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
    since=1,
)
# One row per recovery of a thread, of every kind, stored when it happens: a
# Worker's takeover of a run whose lease expired (in the claim's transaction), a
# resume after a crash, and a `retry_failed`, a budget or a human resume (in the
# transaction of the write that makes it: `_run_log`). ``owner``: the worker (or
# process) that went on; ``checkpoint_id``: the checkpoint it resumed, so the
# steps it redid can be told from the rest; ``run``: the run of the thread it
# resumed.
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
        Column("run", "INTEGER"),
    ),
    primary_key=("thread_id", "key"),
    since=1,
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
    since=1,
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
    since=1,
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
        Column("paused_for", "TEXT"),
        # The error a run that ended ``error`` ended on (type: message), and the
        # graph version it ran on (`ResilientStateGraph(version=)`).
        Column("error", "TEXT", since=2),
        Column("graph_version", "TEXT", since=2),
        # The process driving a run no `Worker` holds (`_process.process_id`),
        # and when it was last seen doing so (its start, a resume, a retry):
        # readers tell a ``running`` run whose process is gone (`_liveness`).
        Column("holder", "TEXT", since=3),
        Column("seen_at", "REAL_T", since=3),
    ),
    primary_key=("thread_id", "run"),
    since=1,
)
# One row per step (task) that ran, from the record its own run-log write
# carries, stored in the transaction of that write: never a step row without its
# writes, nor the reverse. ``kinds`` and ``usage``: JSON text. ``tried``: the
# task whose tries these were (``namespace|task id``, the key of its attempts
# and effects) when another task stored the row (a failed step's). A row leaves
# out what its other columns say (``seconds``: one step's usage; `_step_rows`
# writes and reads every row).
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
        Column("tried", "TEXT"),
        Column("seconds", "REAL_T"),
    ),
    primary_key=("thread_id", "checkpoint_ns", "checkpoint_id", "task_id"),
    since=1,
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
    since=1,
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
    since=1,
)
LIMIT_STARTS = Table(
    "resilience_limit_starts",
    (
        Column("name", "TEXT NOT NULL"),
        Column("hold", "TEXT NOT NULL"),
        Column("at", "REAL_T NOT NULL"),
    ),
    primary_key=("name", "hold"),
    since=1,
)

#: Tables keyed by a thread's checkpoints, copied and deleted with them.
CHECKPOINT_TABLES = (ATTEMPTS, EFFECTS, STEPS)
#: Tables of a thread's history that `copy_thread` copies too (not keyed by checkpoint).
COPIED_TABLES = (*CHECKPOINT_TABLES, RUN_LOG)
#: Every resilience table with a thread_id (runs are deleted with their thread, not copied).
THREAD_TABLES = (*COPIED_TABLES, RUNS, RECOVERIES, RECOVERY_PATHS, ARCHIVE)

#: The statuses of a run that holds its thread: a thread has at most one such run.
OPEN_STATUSES = ("queued", "running", "paused")

#: The table of the versions a store was migrated to (a store with the table
#: of the pre-release schema, `_PRE_RELEASE`, is refused: `schema_version`).
VERSIONS = "resilience_schema"
_PRE_RELEASE = "resilience_migrations"
_CREATE_MIGRATIONS = f"CREATE TABLE IF NOT EXISTS {VERSIONS} (v INTEGER PRIMARY KEY)"
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


_INDEXES = (
    "CREATE INDEX IF NOT EXISTS resilience_runs_thread ON resilience_runs (thread_id)",
    "CREATE INDEX IF NOT EXISTS resilience_runs_claim "
    "ON resilience_runs (status, lease_expires_at)",
    "CREATE INDEX IF NOT EXISTS resilience_runs_updated ON resilience_runs (updated_at)",
    _ONE_OPEN_RUN,
    "CREATE INDEX IF NOT EXISTS resilience_recoveries_at ON resilience_recoveries (at)",
    # The run ledger's: the metrics' ``since=`` (updated, ended, started), the
    # newest-first listing (by status too), a Worker run's row, and the run a
    # nested step belongs to (latest started at a checkpoint).
    "CREATE INDEX IF NOT EXISTS resilience_run_log_ended ON resilience_run_log (ended_at)",
    "CREATE INDEX IF NOT EXISTS resilience_run_log_started ON resilience_run_log (started_at)",
    "CREATE INDEX IF NOT EXISTS resilience_run_log_updated ON resilience_run_log (updated_at)",
    "CREATE INDEX IF NOT EXISTS resilience_run_log_status "
    "ON resilience_run_log (status, started_at)",
    "CREATE INDEX IF NOT EXISTS resilience_run_log_run_id ON resilience_run_log (run_id)",
    "CREATE INDEX IF NOT EXISTS resilience_run_log_checkpoint "
    "ON resilience_run_log (thread_id, checkpoint_id)",
    "CREATE INDEX IF NOT EXISTS resilience_limit_starts_at ON resilience_limit_starts (name, at)",
)
# Every table but the steps', in the same words on both dialects.
_FIRST = (RUNS, ATTEMPTS, EFFECTS, COUNTERS, RECOVERIES, RECOVERY_PATHS, ARCHIVE, RUN_LOG)
_TABLES = tuple(t.create() for t in (*_FIRST, LIMITS, LIMIT_HOLDS, LIMIT_STARTS))

MIGRATIONS: tuple[Migration, ...] = (
    # 0: the version table itself (created before the loop runs).
    Migration.both(_CREATE_MIGRATIONS),
    # 1: the first schema: every table, index and stored function as it stands.
    # SQLite keeps the step rows in their key's order (no second b-tree for the
    # key: a step row costs about a quarter fewer bytes). A checksum column on
    # LangGraph's checkpoint, write (and blob) rows (`_sums`). Postgres checks
    # forks and fences and acquires limits in stored functions; SQLite runs the
    # same steps in Python, in the write's transaction.
    Migration(
        sqlite=(
            *_TABLES,
            f"{STEPS.create()} WITHOUT ROWID",
            *_INDEXES,
            *(f"ALTER TABLE {t} ADD COLUMN {SUM} INTEGER" for t in _SUMMED["sqlite"]),
        ),
        postgres=(
            *_TABLES,
            STEPS.create(),
            *_INDEXES,
            *(
                f"ALTER TABLE {t} ADD COLUMN IF NOT EXISTS {SUM} BIGINT"
                for t in _SUMMED["postgres"]
            ),
            _PG_REFUSE_FORK,
            _PG_CHECK_FENCE,
            _PG_LIMIT_ACQUIRE,
        ),
    ),
    # 2: how an effect's outcome came about; a run's error and graph version.
    Migration.both(*EFFECTS.added(2), *RUN_LOG.added(2)),
    # 3: the process driving a plain run, and when it was last seen.
    Migration.both(*RUN_LOG.added(3)),
    # Append here: never edit or reorder an entry above (a new column: add it to
    # its table with ``since=`` the new version, and append
    # ``Migration.both(*TABLE.added(version))``).
)
SCHEMA_VERSION = len(MIGRATIONS) - 1

# Postgres: one process's setup() at a time, LangGraph's migrations and ours (its
# CREATE TABLE IF NOT EXISTS checkpoint_migrations races: a UniqueViolation). A
# session lock, on a connection of its own, so LangGraph's statements may run on
# any connection; its key is not the migration's (`Dialect.migration_lock`).
SETUP_LOCK = "SELECT pg_advisory_lock(hashtext('resilience_setup'))"
SETUP_UNLOCK = "SELECT pg_advisory_unlock(hashtext('resilience_setup'))"


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
        yield Stmt(d.sql(f"INSERT INTO {VERSIONS} (v) VALUES (?)"), (v,))


def schema_version(d: Dialect) -> Statements[int | None]:
    """The stored schema version, or None when the table does not exist.

    A store set up by a pre-release build (its versions in `_PRE_RELEASE`, before
    the migrations were squashed into one first schema) is refused: it is not
    read, and nothing in it is changed."""
    rows = yield Stmt(d.sql(d.table_exists), (VERSIONS,), fetch=True)
    if not rows[0][0]:
        old = yield Stmt(d.sql(d.table_exists), (_PRE_RELEASE,), fetch=True)
        if old[0][0]:
            raise ConfigError(
                f"this {d.name} database holds resilience tables of a pre-release "
                f"langgraph-resilience (their versions in {_PRE_RELEASE}); this release "
                "does not read them (nothing was changed). Point the saver at a new "
                "database, or drop the resilience_* tables and call saver.setup() again."
            )
        return None
    rows = yield Stmt(f"SELECT max(v) FROM {VERSIONS}", fetch=True)
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
