"""What the four resilient savers share and that is not SQL: their shared state,
what rides along with a write, and the helpers around the store operations."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

try:
    from psycopg_pool import AsyncConnectionPool as AsyncConnectionPool
    from psycopg_pool import ConnectionPool as ConnectionPool
except ImportError:  # the base install (no `postgres` extra): no pool to be given
    ConnectionPool = AsyncConnectionPool = ()  # type: ignore[assignment,misc]

from langgraph_resilience._store_errors import is_missing_table, is_store_error
from langgraph_resilience.checkpoint.archive._objects import Archive, archive_of
from langgraph_resilience.checkpoint.archive._sizes import DEFAULT_WARN_BYTES, SizeBudget
from langgraph_resilience.checkpoint.ledger._ledger import (
    OutcomeFields,
    PendingOutcomes,
    store_outcomes,
)
from langgraph_resilience.checkpoint.ledger._releases import PendingReleases, Waiting, free_holds
from langgraph_resilience.checkpoint.store._counters import Counters, bump
from langgraph_resilience.checkpoint.store._store import Dialect, Statements
from langgraph_resilience.checkpoint.store._store_retry import DEFAULT_STORE_RETRY
from langgraph_resilience.errors import CheckpointCorrupt, ConfigError, ResilienceError
from langgraph_resilience.policy import Backoff
from langgraph_resilience.telemetry import _serde_events

T = TypeVar("T")
logger = logging.getLogger("langgraph_resilience")


@dataclass
class SaverState:
    """State every copy of a saver shares (``compile()`` may ``copy.copy`` a saver).

    Attributes:
        backoff: how store operations are retried.
        counters: save counters waiting to be stored.
        outcomes: side-effect outcomes waiting to be stored.
        releases: shared limits' slots whose tries ended, waiting to be freed.
        conn: the live connection (Postgres savers replace a broken one).
        conninfo: how to open a fresh Postgres connection, password included;
            for SQLite, the file path (named in errors).
        schema_checked: whether the resilience schema version was verified.
        suspect: a try failed on a store error since the last one that succeeded,
            so the next try checks its connection before using it.
        archive: the cold tier (`Archive`), if any.
        sizes: the checkpoint size budget.
        is_setup: SQLite savers: LangGraph's ``is_setup`` flag (a copy that sets
            itself up sets up every copy).
        synchronous: SQLite savers: the connection's ``PRAGMA synchronous``, read
            in ``setup()`` and restored after a relaxed (no-fsync) commit.
    """

    backoff: Backoff = DEFAULT_STORE_RETRY
    counters: Counters = field(default_factory=Counters)
    outcomes: PendingOutcomes = field(default_factory=PendingOutcomes)
    releases: PendingReleases = field(default_factory=PendingReleases)
    conn: Any = None
    conninfo: str | None = None
    schema_checked: bool = False
    suspect: bool = False
    archive: Archive | None = None
    sizes: SizeBudget = field(default_factory=SizeBudget)
    is_setup: bool = False
    synchronous: int = 2  # FULL, SQLite's default


def make_state(store_retry: Backoff | None, default: Backoff = DEFAULT_STORE_RETRY) -> SaverState:
    """A saver's shared state, retrying with ``store_retry`` (``default`` if None).

    Also starts counting LangGraph's serde events in this process (`_serde_events`)."""
    if store_retry is not None and not isinstance(store_retry, Backoff):
        raise ConfigError(
            f"store_retry must be a langgraph_resilience.Backoff, got {type(store_retry).__name__}"
        )
    _serde_events.watch()
    return SaverState(backoff=store_retry or default)


class SqliteSetupShared:
    """LangGraph's ``is_setup`` and the connection's ``synchronous`` setting of a
    SQLite saver, kept in its shared state: under strict msgpack, ``compile()``
    keeps a copy of the saver, and a copy that sets itself up (or reads the
    setting) does so for the user's object too."""

    _state: SaverState

    @property
    def is_setup(self) -> bool:
        return self._state.is_setup

    @is_setup.setter
    def is_setup(self, value: bool) -> None:
        self._state.is_setup = value

    @property
    def _synchronous(self) -> int:
        return self._state.synchronous

    @_synchronous.setter
    def _synchronous(self, value: int) -> None:
        self._state.synchronous = value


# -- encryption at rest ---------------------------------------------------------------

#: How a text our tables would keep in the clear is stored when the serde encrypts.
SEALED = "lgr-sealed:"


def encrypts(serde: SerializerProtocol) -> bool:
    """Whether a saver's serde encrypts what it stores (LangGraph's ``EncryptedSerializer``,
    also the allowlisted copy strict msgpack makes of one).

    Asked on every write; the answer is the serde's class's (``EncryptedSerializer``
    inherits a `typing.Protocol`'s metaclass, whose ``isinstance`` costs ~10 µs), so
    it is kept per class."""
    kind = type(serde)
    known = _ENCRYPTS.get(kind)
    if known is None:
        known = _ENCRYPTS[kind] = issubclass(kind, EncryptedSerializer)
    return known


_ENCRYPTS: dict[type[Any], bool] = {}


def seal(serde: SerializerProtocol, text: str | None) -> str | None:
    """``text`` as a text column stores it: through the serde when it encrypts
    (``lgr-sealed:`` and the base64 of its type and bytes), else as it is."""
    if text is None or not encrypts(serde):
        return text
    kind, data = serde.dumps_typed(text)
    return SEALED + base64.b64encode(kind.encode() + b"\0" + bytes(data)).decode("ascii")


#: What `unseal` gives for a sealed text that does not decode.
UNREADABLE = "[encrypted; does not decode with this serde's key]"


def unseal(serde: SerializerProtocol, text: Any) -> Any:
    """A text column's value as written (`seal`'s inverse; other values as they are).

    A sealed text that does not decode (its bytes changed, or another key wrote
    it) reads as `UNREADABLE` and is logged: these texts (a failed try's
    message) are shown, never used to decide anything.
    """
    if not isinstance(text, str) or not text.startswith(SEALED):
        return text
    try:
        raw = base64.b64decode(text[len(SEALED) :], validate=True)
        kind, _, data = raw.partition(b"\0")
        return str(serde.loads_typed((kind.decode("ascii"), data)))
    except Exception as exc:  # any decoder's error: a wrong key, changed bytes
        logger.warning("a stored encrypted text does not decode: %s: %s", type(exc).__name__, exc)
        return UNREADABLE


def set_lifecycle(
    state: SaverState,
    archive: Archive | str | None,
    warn_checkpoint_bytes: int | None,
    max_checkpoint_bytes: int | None,
) -> None:
    """A saver's ``archive=``, ``warn_checkpoint_bytes=`` and ``max_checkpoint_bytes=``."""
    state.archive = archive_of(archive)
    state.sizes = SizeBudget(warn_bytes=warn_checkpoint_bytes, max_bytes=max_checkpoint_bytes)


#: The default of the savers' ``warn_checkpoint_bytes=``.
WARN_BYTES = DEFAULT_WARN_BYTES


def thread_key(config: RunnableConfig) -> tuple[str, str, str | None]:
    """(thread_id, checkpoint_ns, checkpoint_id) of a config, with a clear error."""
    configurable = config.get("configurable") or {}
    if configurable.get("thread_id") is None:
        raise ConfigError(
            'config["configurable"]["thread_id"] is required, e.g. '
            '{"configurable": {"thread_id": "job-42"}}'
        )
    return (
        check_thread_id(configurable["thread_id"]),
        str(configurable.get("checkpoint_ns") or ""),
        configurable.get("checkpoint_id"),
    )


#: The longest thread id, in bytes of UTF-8, that every backend stores and indexes.
MAX_THREAD_ID_BYTES = 1024


def check_thread_id(thread_id: Any) -> str:
    """The thread id as the store keeps it, or a `ConfigError`: one rule on every backend.

    A thread id is text (``str``); an ``int`` (not a bool) or a ``uuid.UUID`` is
    taken as its ``str()``, everywhere alike (so ``42`` and ``"42"`` are one
    thread). At most `MAX_THREAD_ID_BYTES` bytes of UTF-8, with no NUL character
    and no lone surrogate: Postgres text cannot hold a NUL or index a long key,
    and SQLite would read a lone surrogate back changed. A thread only one backend
    can hold is one a move to the other would lose, so every backend refuses it,
    before any write and at a read. (A thread an older version stored on SQLite
    under such an id is still deleted whole: `Dialect.list_param`.)
    """
    if isinstance(thread_id, str):
        text = thread_id
    elif isinstance(thread_id, (int, uuid.UUID)) and not isinstance(thread_id, bool):
        text = str(thread_id)
    else:
        raise ConfigError(
            f"thread id {thread_id!r} is a {type(thread_id).__name__}: a thread id is text "
            "(str; an int or a uuid.UUID is taken as its str()), e.g. a uuid or 'job-42'"
        )
    problem = None
    if "\x00" in text:
        problem = f"holds a NUL character at index {text.index(chr(0))}"
    else:
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError as exc:
            problem = f"is not valid Unicode text ({exc.reason} at index {exc.start})"
        else:
            if size > MAX_THREAD_ID_BYTES:
                problem = f"is {size} bytes long (UTF-8), over the {MAX_THREAD_ID_BYTES} allowed"
    if problem is not None:
        shown = repr(text) if len(text) <= 80 else repr(text[:60]) + f"... ({len(text)} characters)"
        raise ConfigError(
            f"thread id {shown} {problem}. Thread ids are text of at most "
            f"{MAX_THREAD_ID_BYTES} bytes without NUL characters or lone surrogates, on "
            "every backend: use e.g. a uuid or 'job-42'."
        )
    return text


def check_config_thread(config: RunnableConfig) -> RunnableConfig:
    """`check_thread_id` on a config's thread id, if it has one (a read's config):
    the config with the id as the store keeps it (an ``int`` as its text)."""
    configurable = config.get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None:
        return config
    text = check_thread_id(thread_id)
    if text is thread_id:
        return config
    return cast(RunnableConfig, {**config, "configurable": {**configurable, "thread_id": text}})


def thread_checked(config: RunnableConfig | None) -> RunnableConfig | None:
    """`check_config_thread` on a call's config, if it has one (a graph's entry:
    refused there before any write, an ``int`` id as its text for every read)."""
    return None if config is None else check_config_thread(config)


def corrupt(
    config: RunnableConfig | None, checkpoint_id: str | None, exc: BaseException
) -> BaseException:
    """Map a decoding failure to `CheckpointCorrupt`, a missing table to the
    `ConfigError` that says to call ``setup()``; pass anything else through."""
    if is_missing_table(exc):
        return ConfigError(
            f"the checkpoint tables of this database are missing ({exc}). Call "
            "saver.setup() once before running graphs (it creates LangGraph's tables "
            "and ours, and is safe to call again)."
        )
    if is_store_error(exc) or isinstance(exc, ResilienceError) or config is None:
        return exc
    thread_id, ns, _ = thread_key(config)
    return CheckpointCorrupt(
        thread_id=thread_id, checkpoint_ns=ns, checkpoint_id=checkpoint_id, cause=exc
    )


_NOTHING: dict[Any, Any] = {}


class Riders:
    """What one try of a write stores in its own transaction besides its statements:
    waiting side-effect outcomes, the slots of shared limits whose tries ended
    (`_releases`) and the counts that are due (maybe nothing).

    ``with Riders(state, ok) as riders:`` takes them; they go back if the try
    fails, and the try itself is counted once it succeeded (here) or failed
    (`count_failure`). A class, not a generator: it runs on every write.
    ``ride=False`` (a read) takes nothing. A durable write (not ``relaxed``)
    also stores again the outcomes earlier writes committed without waiting for
    the disk (`PendingOutcomes.relaxed`); a ``relaxed`` one leaves them, and
    adds the outcomes that rode along with it.
    """

    __slots__ = (
        "_flush",
        "_ok",
        "_relaxed",
        "_ride",
        "_state",
        "again",
        "counts",
        "outcomes",
        "releases",
        "riding",
    )

    def __init__(
        self,
        state: SaverState,
        ok: str | None,
        *,
        flush: bool = False,
        ride: bool = True,
        relaxed: bool = False,
    ) -> None:
        self._state = state
        self._ok = ok
        self._flush = flush
        self._ride = ride
        self._relaxed = relaxed
        self.counts: dict[str, int] = _NOTHING  # replaced, never changed in place
        self.outcomes: dict[tuple[str, str], OutcomeFields] = _NOTHING
        self.again: dict[tuple[str, str], OutcomeFields] = _NOTHING
        self.releases: dict[str, Waiting] = _NOTHING
        #: Whether anything rides along (set on entering; `__bool__`).
        self.riding = False

    def __enter__(self) -> Riders:
        if not self._ride:
            return self
        state = self._state
        counters = state.counters
        if self._flush:
            self.counts = counters.take_all()
        elif self._ok is not None and counters.due(now := time.monotonic()):
            self.counts = counters.take_due(now)
        outcomes = state.outcomes
        if outcomes.waiting:  # an unlocked peek: mostly nothing waits
            self.outcomes = outcomes.take_all()
        if not self._relaxed and outcomes.relaxed:
            self.again = outcomes.take_relaxed()
        if state.releases.waiting:  # an unlocked peek, as `PendingReleases.take_all`'s
            self.releases = state.releases.take_all()
        self.riding = bool(self.counts or self.outcomes or self.again or self.releases)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        outcomes = self._state.outcomes
        if exc_type is not None:
            self._state.counters.give_back(self.counts)
            if self.outcomes:
                outcomes.give_back(self.outcomes)
            outcomes.committed_relaxed(self.again)  # still to be stored durably
            if self.releases:
                self._state.releases.give_back(self.releases)
            return
        if self._relaxed:
            outcomes.committed_relaxed(self.outcomes)
        if self._ok is not None:
            self._state.counters.add(self._ok)

    def __bool__(self) -> bool:
        return self.riding

    def statements(self, d: Dialect) -> Statements[None]:
        """Slots to free, waiting side-effect outcomes, relaxed ones again, then
        the counts."""
        yield from free_holds(d, self.releases)
        yield from store_outcomes(d, self.outcomes)
        yield from store_outcomes(d, self.again, again=True)
        if self.counts:
            yield from bump(d, self._state.counters.scope, self.counts)


def _waiting(state: SaverState) -> bool:
    """Whether a closing saver has something to store: counts, outcomes written
    behind or not yet durable, slots to free."""
    o = state.outcomes
    return bool(state.counters.snapshot() or o.waiting or o.relaxed or state.releases.waiting)


def flush_quietly(state: SaverState, flush: Callable[[], object]) -> None:
    """Store waiting counts and outcomes when a saver closes; a store that is down
    loses them (an outcome lost so is settled like one lost to a crash)."""
    if not _waiting(state):
        return
    try:
        flush()
    except Exception as exc:
        logger.warning("could not store save counters and effect outcomes on close: %s", exc)


async def aflush_quietly(state: SaverState, flush: Callable[[], Awaitable[object]]) -> None:
    """Async twin of `flush_quietly`."""
    if not _waiting(state):
        return
    try:
        await flush()
    except Exception as exc:
        logger.warning("could not store save counters and effect outcomes on close: %s", exc)


def count_failure(state: SaverState, failed: str | None) -> None:
    if failed is not None:
        state.counters.add(failed)


def bridge(coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop, owner: str) -> T:
    """Run an async saver method from a sync caller in another thread."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        coro.close()
        raise asyncio.InvalidStateError(
            f"synchronous calls to {owner} are only allowed from a thread other than "
            "its event loop's; from async code, use the a-prefixed methods"
        )
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


def unstorable(
    serde: Any, writes: Sequence[tuple[str, Any]], task_path: str, exc: TypeError
) -> TypeError:
    """The error for a task's write the serde cannot store: which channel (state
    key), which task, what type, and what to return instead."""
    for channel, value in writes:
        try:
            serde.dumps_typed(value)
        except TypeError:
            where = f"the task at {task_path!r}" if task_path else "a node"
            return TypeError(
                f"{where} wrote to {channel!r} a value the checkpointer cannot store "
                f"({type(value).__name__}: {exc}). Return plain data (str, numbers, lists, "
                "dicts), pydantic models or dataclasses from the node, and keep clients, "
                "locks and connections out of the state."
            )
    return exc
