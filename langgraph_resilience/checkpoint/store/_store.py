"""Statements, dialects and the executor: how every store operation is written and run.

Operations are written once, as generators of statements (the pattern of
LangGraph's own ``postgres/base.py``): each yields ``Stmt`` objects, receives the
rows of those that fetch, and returns its result. The savers run them with
`execute` / `aexecute` inside a transaction of their dialect, so the sync and
async savers share everything but the I/O lines.

The statements are written once with ``?`` placeholders and ``IN_LIST(?)`` for a
list parameter; `Dialect` renders them for SQLite (``IN (SELECT value FROM
json_each(?))``) or Postgres (``%s`` and ``= ANY(%s)``). Every parameter is bound,
never formatted in.

The operations themselves live by concern: `_schema` (tables and migrations),
`_counters`, `_threads` (checkpoints, writes, forks, thread maintenance),
`_ledger` (node attempts, side effects) and `_runs` (runs, leases, fencing).
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any, NamedTuple, TypeVar

__all__ = [
    "POSTGRES",
    "SQLITE",
    "Dialect",
    "Stmt",
    "Table",
    "aexecute",
    "execute",
    "from_row",
    "is_postgres",
    "select_list",
]

T = TypeVar("T")
R = TypeVar("R")
Row = tuple[Any, ...]


class Stmt(NamedTuple):
    """One statement: SQL, its parameters, whether rows come back, executemany."""

    sql: str
    params: Any = ()
    fetch: bool = False
    many: bool = False


Statements = Generator[Stmt, list[Row], T]


def no_statements() -> Statements[None]:
    """Nothing to run (a transaction that only stores what waits to ride along)."""
    yield from ()


# -- tables --------------------------------------------------------------------------


class Column(NamedTuple):
    """A column: its name, its type (``BLOB_T``, ``REAL_T``, ``BIGINT_T`` are
    rendered per dialect) and the migration that added it."""

    name: str
    type: str = ""
    since: int = 0


@dataclass(frozen=True)
class Table:
    """One table, the single source of its columns: the ``CREATE TABLE`` of our
    own tables, the column lists of copies and the record mappers derive from it
    (a test compares it with the live schema of both dialects)."""

    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()
    since: int = 0  # the migration that created it

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def create(self) -> str:
        """The ``CREATE TABLE`` of the migration that created it (columns added by
        later migrations come with theirs)."""
        parts = [f"{c.name} {c.type}" for c in self.columns if c.since <= self.since]
        if self.primary_key:
            parts.append(f"PRIMARY KEY ({', '.join(self.primary_key)})")
        body = ",\n    ".join(parts)
        return f"CREATE TABLE IF NOT EXISTS {self.name} (\n    {body}\n)"

    def added(self, version: int) -> tuple[str, ...]:
        """``ALTER TABLE`` statements for the columns migration ``version`` adds."""
        return tuple(
            f"ALTER TABLE {self.name} ADD COLUMN {c.name} {c.type}"
            for c in self.columns
            if c.since == version and version > self.since
        )


def _names(*names: str) -> tuple[Column, ...]:
    return tuple(Column(n) for n in names)


# LangGraph's own tables (created by its savers' setup()): the columns we copy.
_SQLITE_CHECKPOINTS = Table(
    "checkpoints",
    _names(
        "thread_id",
        "checkpoint_ns",
        "checkpoint_id",
        "parent_checkpoint_id",
        "type",
        "checkpoint",
        "metadata",
    ),
)
_PG_CHECKPOINTS = _SQLITE_CHECKPOINTS
_WRITES_KEY = ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "task_path", "idx")
_SQLITE_WRITES = Table("writes", _names(*_WRITES_KEY, "channel", "type", "value"))
_PG_WRITES = Table("checkpoint_writes", _names(*_WRITES_KEY, "channel", "type", "blob"))
_PG_BLOBS = Table(
    "checkpoint_blobs",
    _names("thread_id", "checkpoint_ns", "channel", "version", "type", "blob"),
)


# -- dialects ------------------------------------------------------------------------


@dataclass(frozen=True)
class Dialect:
    """How one database spells what the store needs, and what it can do in SQL."""

    name: str
    blob: str  # binary column type
    real: str  # floating point column type
    bigint: str
    in_list: str  # replaces IN_LIST(?)
    placeholder: str
    now: str  # the database's clock, epoch seconds (leases use one clock)
    # Leases judged by this machine's boot clock when their renewal was made on
    # it (SQLite: the store has no clock of its own; a stepped wall clock would
    # move every lease). Postgres judges every lease by the server's clock.
    local_leases: bool
    skip_locked: str  # what a claim's row selection ends with
    json_lists: bool  # a list parameter is bound as a JSON text
    # LangGraph's tables of this dialect (all keyed by thread_id).
    checkpoints: Table
    writes: Table
    blobs: Table | None
    # Whether our checks (no fork, the fence) run as stored functions in the
    # write's own statement; without them they run in Python, in its transaction.
    procedures: bool
    table_exists: str  # one row, true when table ? exists
    metadata_text: str  # the text of a key of a checkpoint's metadata: {key}
    migration_lock: str | None  # taken before migrating (two processes take turns)
    # A condition a write's statement may end with (``AND ...``, always true): its
    # transaction then commits without waiting for the disk.
    relax_commit: str | None

    def sql(self, text: str) -> str:
        """``text`` in this dialect (its placeholders, types, clock, list form),
        translated once per text: a step's statements ask for the same few on
        every write (a bounded table: statement texts are the package's constants)."""
        kept: dict[str, str] = self.__dict__.setdefault("_translated", {})  # this dialect's
        found = kept.get(text)
        if found is None:
            found = self._translate(text)
            if len(kept) < _TRANSLATIONS_KEPT:
                kept[text] = found
        return found

    def _translate(self, text: str) -> str:
        text = text.replace("IN_LIST(?)", self.in_list)
        text = text.replace("BLOB_T", self.blob).replace("REAL_T", self.real)
        text = text.replace("BIGINT_T", self.bigint).replace("NOW()", self.now)
        text = text.replace("SKIP_LOCKED", self.skip_locked)
        return text.replace("?", self.placeholder)

    def list_param(self, values: Iterable[str]) -> Any:
        """A list parameter that matches exactly what it holds, whatever the text.

        A text no driver can bind (a lone surrogate) is stored nowhere, and on
        Postgres neither is one holding a NUL: they are left out, which matches
        the same rows (none). SQLite's JSON cuts a string at a NUL, so its list
        carries NUL (and the escape's own \\x01) escaped, and ``in_list`` undoes it.
        """
        texts = [t for t in map(str, values) if _bindable(t, nul=self.json_lists)]
        if not self.json_lists:
            return texts
        return json.dumps(
            [t.replace("\x01", "\x01\x02").replace("\x00", "\x01\x03") for t in texts]
        )

    @property
    def thread_tables(self) -> tuple[Table, ...]:
        """LangGraph's tables holding a thread's checkpoints."""
        return (self.checkpoints, self.writes, *((self.blobs,) if self.blobs else ()))


#: The most translations `Dialect.sql` keeps per dialect.
_TRANSLATIONS_KEPT = 4096


def _bindable(text: str, *, nul: bool) -> bool:
    """Whether a driver can bind ``text`` (with a NUL in it if ``nul``)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return nul or "\x00" not in text


SQLITE = Dialect(
    name="sqlite",
    blob="BLOB",
    real="REAL",
    bigint="INTEGER",
    # The list's texts unescaped (`list_param`): the index on the column still serves.
    in_list="IN (SELECT replace(replace(value, char(1, 3), char(0)), char(1, 2), char(1)) "
    "FROM json_each(?))",
    placeholder="?",
    now="((julianday('now') - 2440587.5) * 86400.0)",
    local_leases=True,
    skip_locked="",  # the claim runs in an immediate transaction: one writer at a time
    json_lists=True,
    checkpoints=_SQLITE_CHECKPOINTS,
    writes=_SQLITE_WRITES,
    blobs=None,
    procedures=False,
    table_exists="SELECT count(*) FROM sqlite_master WHERE name = ?",
    metadata_text="json_extract(CAST(metadata AS TEXT), '$.{key}')",
    migration_lock=None,
    relax_commit=None,  # the SQLite savers lower PRAGMA synchronous around it
)
POSTGRES = Dialect(
    name="postgres",
    blob="BYTEA",
    real="DOUBLE PRECISION",
    bigint="BIGINT",
    in_list="= ANY(?)",
    placeholder="%s",
    now="extract(epoch from clock_timestamp())::double precision",
    local_leases=False,
    skip_locked="FOR UPDATE SKIP LOCKED",
    json_lists=False,
    checkpoints=_PG_CHECKPOINTS,
    writes=_PG_WRITES,
    blobs=_PG_BLOBS,
    procedures=True,
    table_exists="SELECT to_regclass(?) IS NOT NULL",
    metadata_text="metadata ->> '{key}'",
    migration_lock="SELECT pg_advisory_xact_lock(hashtext('resilience_schema'))",
    relax_commit="set_config('synchronous_commit', 'off', true) IS NOT NULL",
)

_PG_PREFIXES = ("postgres://", "postgresql://")


def is_postgres(db: str) -> bool:
    """A Postgres DSN (URL or ``key=value`` form) rather than a SQLite path."""
    return db.startswith(_PG_PREFIXES) or ("=" in db and ("host=" in db or "dbname=" in db))


# -- records from rows, by column name -------------------------------------------------

_CONVERT: dict[str, Any] = {"str": str, "int": int, "float": float, "bytes": bytes}


def select_list(record: type[Any]) -> str:
    """The columns a record is read from: its fields, by name."""
    return ", ".join(f.name for f in fields(record))


def from_row(record: type[R], row: Row) -> R:
    """A record from a row selected with `select_list` (each value converted to
    its field's type: drivers hand back memoryview, Decimal or int for them)."""
    values: dict[str, Any] = {}
    for f, value in zip(fields(record), row, strict=True):  # type: ignore[arg-type]
        convert = _CONVERT.get(str(f.type).split(" | ")[0])
        values[f.name] = value if value is None or convert is None else convert(value)
    return record(**values)


# -- drivers ---------------------------------------------------------------------------


def _rows(fetched: Sequence[Any]) -> list[Row]:
    return [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in fetched]


def execute(cur: Any, statements: Statements[T]) -> T:
    """Run a statement generator on a sync cursor (sqlite3 or psycopg)."""
    try:
        stmt = next(statements)
        while True:
            if stmt.many:
                cur.executemany(stmt.sql, stmt.params)
                rows: list[Row] = []
            else:
                cur.execute(stmt.sql, stmt.params)
                rows = _rows(cur.fetchall()) if stmt.fetch else []
            stmt = statements.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def aexecute(cur: Any, statements: Statements[T]) -> T:
    """Async twin of `execute` (aiosqlite or psycopg async cursor)."""
    try:
        stmt = next(statements)
        while True:
            if stmt.many:
                await cur.executemany(stmt.sql, stmt.params)
                rows: list[Row] = []
            else:
                await cur.execute(stmt.sql, stmt.params)
                rows = _rows(await cur.fetchall()) if stmt.fetch else []
            stmt = statements.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
