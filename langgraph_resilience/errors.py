"""The library's own errors.

Every error raised by langgraph-resilience derives from `ResilienceError`, so a
caller can catch the library's failures without catching LangGraph's or the
database driver's::

    ResilienceError
    ├── ConfigError            wrong wiring or bad input; says what would be right
    ├── StoreUnavailable       the store could not be reached, even after retries
    │                          (also a ConnectionError: callers may retry later)
    ├── CheckpointConflict     a second process tried to continue the same thread
    ├── CheckpointCorrupt      a stored checkpoint or write cannot be decoded
    ├── LeaseLost              this worker's lease was taken over (fencing)
    └── EffectOutcomeUnknown   a side effect's intent has no recorded outcome

The driver's own exceptions (``sqlite3.Error``, ``psycopg.Error``) are mapped to
these at the saver boundary only where the saver knows more than the driver
does (which thread, which checkpoint, what to do next); otherwise they pass
through unchanged, chained as ``__cause__``.
"""

from __future__ import annotations

__all__ = [
    "CheckpointConflict",
    "CheckpointCorrupt",
    "ConfigError",
    "EffectOutcomeUnknown",
    "LeaseLost",
    "ResilienceError",
    "StoreUnavailable",
]


class ResilienceError(Exception):
    """Base class of every error raised by langgraph-resilience."""


class ConfigError(ResilienceError, ValueError):
    """Something is wired or configured wrongly; the message says how to fix it."""


class StoreUnavailable(ResilienceError, ConnectionError):
    """The checkpoint store could not be reached, even after the configured retries.

    Attributes:
        target: where the saver tried to connect (a path or a DSN without password).
        attempts: how many tries were made.
    """

    def __init__(self, message: str, *, target: str, attempts: int) -> None:
        super().__init__(message)
        self.target = target
        self.attempts = attempts


class CheckpointConflict(ResilienceError):
    """A checkpoint would fork a thread's history.

    Raised when a run continues a thread from a checkpoint that is no longer the
    latest of its namespace: another process resumed the same thread and moved it
    on first. The losing write is refused in the same transaction, so the history
    keeps a single line.

    Attributes:
        thread_id, checkpoint_ns: the thread and namespace.
        parent_id: the checkpoint this run continued from.
        head_id: the newer checkpoint that was already stored.
        checkpoint_id: the checkpoint that was refused.
    """

    def __init__(
        self,
        *,
        thread_id: str,
        checkpoint_ns: str,
        parent_id: str,
        head_id: str,
        checkpoint_id: str,
    ) -> None:
        ns = f" namespace {checkpoint_ns!r}" if checkpoint_ns else ""
        super().__init__(
            f"thread {thread_id!r}{ns} has moved past checkpoint {parent_id} "
            f"(latest is {head_id}): another process resumed this thread, so "
            f"checkpoint {checkpoint_id} was refused instead of forking the history. "
            "Reload the thread (graph.get_state) and resume from its latest checkpoint, "
            "or run threads through a Worker so only one process owns a thread."
        )
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.parent_id = parent_id
        self.head_id = head_id
        self.checkpoint_id = checkpoint_id


class CheckpointCorrupt(ResilienceError):
    """A stored checkpoint (or one of its writes) cannot be decoded.

    Attributes:
        thread_id, checkpoint_ns, checkpoint_id: where the bad row is.
    """

    def __init__(
        self,
        *,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str | None,
        cause: BaseException,
    ) -> None:
        where = f"checkpoint {checkpoint_id}" if checkpoint_id else "a checkpoint"
        ns = f" namespace {checkpoint_ns!r}" if checkpoint_ns else ""
        super().__init__(
            f"{where} of thread {thread_id!r}{ns} cannot be decoded "
            f"({type(cause).__name__}: {cause}). The row is left as it is; other "
            "checkpoints and threads are unaffected. Resume from an earlier checkpoint "
            "(pass its checkpoint_id), or delete the thread if it cannot be recovered."
        )
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id


class LeaseLost(ResilienceError):
    """This worker no longer holds the run's lease; its writes are refused."""


class EffectOutcomeUnknown(ResilienceError):
    """A side effect was started but its outcome was never recorded."""
