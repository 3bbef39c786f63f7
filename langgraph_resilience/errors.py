"""The library's errors, every one of them, as a tree.

The top level (`langgraph_resilience`) exports the errors most code raises or
catches; every error is importable from here. The library's own errors derive
from `ResilienceError`, so a caller can catch the library's failures without
catching LangGraph's or the database driver's::

    ResilienceError
    ├── ConfigError            wrong wiring or bad input; says what would be right
    │                          (also a ValueError)
    ├── StoreUnavailable       the store could not be reached, even after retries
    │                          (also a ConnectionError: callers may retry later)
    ├── CheckpointConflict     a second process tried to continue the same thread
    ├── CheckpointCorrupt      a stored checkpoint or write is undecodable or fails its checksum
    ├── ArchiveError           the cold tier could not store or read a thread's objects
    ├── LeaseLost              this worker's lease was taken over (fencing)
    ├── RunStateError          a run is not in a state that allows the call
    │   │                      (a second open run on a thread, resuming a run
    │   │                      that is not paused)
    │   ├── UnknownThread      a report or a run list names a thread or run the
    │   │                      store does not have (also a LookupError)
    │   └── DeployBlocked      a thread stored by an older graph version names a
    │                          node the graph no longer has (nothing was stored)
    ├── EffectOutcomeUnknown   a side effect's intent has no recorded outcome
    ├── EffectInFlight         another executor holds a live claim on a side effect
    │                          (also a TransientError: the node retries, and
    │                          replays the outcome once it is recorded)
    └── LimitBusy              a shared `Limit` did not admit a try within its
                               ``Backoff.max_wait`` (also a TransientError)

Node code raises these to state how its failure should be handled (see
`langgraph_resilience.classify`); they are not the library's own errors::

    NodeFailure                  retry_after, details
    ├── TransientError           retry with backoff
    ├── PermanentError           no retry
    ├── ValidationFailed         retry with other parameters (NodePolicy.adapt)
    ├── DegradableError          take the fallback at once
    ├── ContextOverflow          compress the context, then retry
    └── BudgetExhausted          pause until the budget is topped up

The testing kit's (`langgraph_resilience.testing`), raised in a user's tests::

    AssertionError
    └── RecoveryFailed           a `recovery_suite` case failed; the message is the report
    BaseException
    └── SimulatedCrash           `FaultPlan`'s stand-in for a killed process: no
                                 node policy or ``except Exception`` catches it

Signals the package raises and handles itself; they are not part of the API and
are exported nowhere (a stored error's text may name the first two)::

    Exception
    ├── ResilienceRoute          a node that gave up hands its task, with the route
    │                            it takes, to its error handler (graph/_routes)
    ├── SubgraphStopped          a subgraph node's graph ended with a partial
    │                            result: the node failed (graph/_step_log)
    ├── CliError                 a command that cannot go on: one line, exit code 2
    ├── DemoFailed               the demo could not run, or a claim did not hold
    └── Archived                 a Redis script found its thread in the cold tier:
                                 the saver restores it and runs again (redis/store/_tier)

The driver's own exceptions (``sqlite3.Error``, ``psycopg.Error``) are mapped to
these at the saver boundary only where the saver knows more than the driver
does (which thread, which checkpoint, what to do next); otherwise they pass
through unchanged, chained as ``__cause__``.

An error is quoted in records, logs and suggestions through `message_of`,
`describe` and `repr_of` (internal, not exported): a user's exception whose
``__str__`` or ``__repr__`` raises is quoted as ``<ValueError: unprintable>``
and kept as it is, never replaced by the formatting error.
"""

from __future__ import annotations

__all__ = [
    "ArchiveError",
    "BudgetExhausted",
    "CheckpointConflict",
    "CheckpointCorrupt",
    "ConfigError",
    "ContextOverflow",
    "DegradableError",
    "DeployBlocked",
    "EffectInFlight",
    "EffectOutcomeUnknown",
    "LeaseLost",
    "LimitBusy",
    "NodeFailure",
    "PermanentError",
    "RecoveryFailed",
    "ResilienceError",
    "RunStateError",
    "SimulatedCrash",
    "StoreUnavailable",
    "TransientError",
    "UnknownThread",
    "ValidationFailed",
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
        head_id: the newer checkpoint that was already stored (the parent itself
            when ``archived``).
        checkpoint_id: the checkpoint that was refused.
        archived: the thread was moved to the archive (``archive_idle``) after
            this run read it.
    """

    def __init__(
        self,
        *,
        thread_id: str,
        checkpoint_ns: str,
        parent_id: str,
        head_id: str,
        checkpoint_id: str,
        archived: bool = False,
    ) -> None:
        ns = f" namespace {checkpoint_ns!r}" if checkpoint_ns else ""
        if archived:
            message = (
                f"thread {thread_id!r} was moved to the archive (archive_idle) after this "
                f"run read checkpoint {parent_id}, so checkpoint {checkpoint_id} was refused "
                "instead of being stored apart from its history. Run it again: reading the "
                "thread (graph.get_state, invoke) restores it from the archive first."
            )
        else:
            message = (
                f"thread {thread_id!r}{ns} has moved past checkpoint {parent_id} "
                f"(latest is {head_id}): another process resumed this thread, so "
                f"checkpoint {checkpoint_id} was refused instead of forking the history. "
                "Reload the thread (graph.get_state) and resume from its latest checkpoint, "
                "or run threads through a Worker so only one process owns a thread."
            )
        super().__init__(message)
        self.archived = archived
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.parent_id = parent_id
        self.head_id = head_id
        self.checkpoint_id = checkpoint_id


class CheckpointCorrupt(ResilienceError):
    """A stored checkpoint (or one of its writes) cannot be decoded, or does not
    match the checksum stored with it.

    Attributes:
        thread_id, checkpoint_ns, checkpoint_id: where the bad row is.
        mismatch: what failed its checksum ("" when the row could not be decoded).
        idempotency_key: the side effect whose recorded outcome failed its
            checksum (None for a checkpoint's own rows).
    """

    def __init__(
        self,
        *,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str | None,
        cause: BaseException | None = None,
        mismatch: str = "",
        idempotency_key: str | None = None,
    ) -> None:
        where = f"checkpoint {checkpoint_id}" if checkpoint_id else "a checkpoint"
        ns = f" namespace {checkpoint_ns!r}" if checkpoint_ns else ""
        what = (
            f"does not match its checksum: {mismatch} changed since it was written"
            if mismatch
            else f"cannot be decoded ({type(cause).__name__}: {cause})"
        )
        # an earlier checkpoint's task would call the effect again under a new key
        fix = (
            "It is neither replayed nor called again: look up in the outside system what "
            "the call with that idempotency key did, or delete the thread if it cannot be "
            "recovered."
            if idempotency_key
            else "Resume from an earlier checkpoint (pass its checkpoint_id), or delete "
            "the thread if it cannot be recovered."
        )
        super().__init__(
            f"{where} of thread {thread_id!r}{ns} {what}. The row is left as it is; other "
            f"checkpoints and threads are unaffected. {fix}"
        )
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id
        self.mismatch = mismatch
        self.idempotency_key = idempotency_key


class ArchiveError(ResilienceError):
    """The archive could not be read or written: which thread, which object, why.

    Attributes:
        thread_id: the thread being archived or restored (None for a bare call).
        key: the object (or prefix) concerned, as the archive names it.
    """

    def __init__(self, message: str, *, thread_id: str | None = None, key: str = "") -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.key = key


class LeaseLost(ResilienceError):
    """This worker no longer holds the run's lease; its writes are refused."""


class RunStateError(ResilienceError):
    """A run is not in a state that allows the call: a thread that already has an
    open run (queued, running or paused) takes no second one; only a paused run
    can be resumed. The message names the run and its status."""


class UnknownThread(RunStateError, LookupError):
    """The store has no such thread (no checkpoint, no run), or no such run of it."""


class DeployBlocked(RunStateError):
    """A thread stored by an older version of the graph cannot go on under this one.

    Its pending task, interrupt or failed step names a node the graph no longer
    has and no ``renames={old: new}`` maps, or a version it needs has no
    migration. Nothing was stored: the thread stays as it was, for a graph
    version (or a mapping) that can take it. ``check_deploy`` lists such threads
    before a deploy.

    Attributes:
        thread_id: the thread.
        stored_version: the graph version that stored it (None: an unversioned graph).
        version: the graph version that refused it.
        reasons: what blocks it, one line each.
    """

    def __init__(
        self,
        *,
        thread_id: str,
        stored_version: object,
        version: object,
        reasons: tuple[str, ...],
    ) -> None:
        self.thread_id = thread_id
        self.stored_version = stored_version
        self.version = version
        self.reasons = reasons
        super().__init__(
            f"thread {thread_id!r} was stored by graph version {stored_version!r} and "
            f"cannot go on under version {version!r}: {'; '.join(reasons)}. Nothing was "
            "stored. Map the old node with ResilientStateGraph(..., renames={old: new}), add "
            "the missing migration, or run the thread to its end on the old version "
            "(langgraph-resilience check-deploy lists such threads)."
        )


class EffectOutcomeUnknown(ResilienceError):
    """A side effect was started but its outcome was never recorded.

    Raised (``on_unknown="raise"``) instead of calling it again. Check the outside
    system, record what happened with `settle_effect`, then `retry_failed`.

    Attributes:
        effect: the effect's name.
        idempotency_key: its key, as `settle_effect` takes it.
    """

    def __init__(self, message: str, *, effect: str = "", idempotency_key: str = "") -> None:
        super().__init__(message)
        self.effect = effect
        self.idempotency_key = idempotency_key


class NodeFailure(Exception):
    """Base of the exceptions node code raises to state its failure's kind.

    Args:
        message: what went wrong.
        retry_after: seconds the caller asked to wait before a retry, if any.
        details: anything worth keeping in the run log (must be JSON-friendly).

    Example:
        >>> raise TransientError("rate limited", retry_after=2.0)  # doctest: +SKIP
    """

    def __init__(
        self, message: str = "", *, retry_after: float | None = None, **details: object
    ) -> None:
        super().__init__(message)
        if retry_after is not None and (
            isinstance(retry_after, bool)
            or not isinstance(retry_after, (int, float))
            or retry_after < 0
        ):
            raise ConfigError(f"retry_after must be seconds >= 0, got {retry_after!r}")
        self.retry_after = None if retry_after is None else float(retry_after)
        self.details = details


class TransientError(NodeFailure):
    """A failure that may pass on its own: retried with backoff."""


class PermanentError(NodeFailure):
    """A failure a retry cannot fix: no retry."""


class ValidationFailed(NodeFailure):
    """The output was not acceptable: retried with the `NodePolicy.adapt` overrides."""


class DegradableError(NodeFailure):
    """A failure with an acceptable fallback: the fallback node runs at once."""


class ContextOverflow(NodeFailure):
    """The model's context window was exceeded: the context is compressed, then retried."""


class BudgetExhausted(NodeFailure):
    """The run's budget ran out: the run pauses until it is topped up."""


class EffectInFlight(ResilienceError, TransientError):
    """Another executor (a process resuming the same step) holds a live claim on
    this side effect: its call may be in flight, so this one does not call.

    A `TransientError`: a node retries after ``retry_after`` and then replays the
    recorded outcome, or takes the claim over once its holder's process is gone
    or its lease ran out. Attributes: ``idempotency_key``, ``owner``.
    """

    def __init__(self, message: str, *, idempotency_key: str, owner: str, wait: float) -> None:
        super().__init__(message, retry_after=wait)
        self.idempotency_key = idempotency_key
        self.owner = owner


class LimitBusy(ResilienceError, TransientError):
    """A shared `Limit` did not admit a try within its policy's ``Backoff.max_wait``:
    the try failed without running.

    A `TransientError`: retried with backoff; when the limit says how long it
    would take (paused after a ``Retry-After``, or its rate), that wait is the
    ``retry_after``, so under a `Worker` a longer one releases the run until then.
    Attributes: ``limit`` (its name), ``why`` (``paused``, ``full`` or ``rate``).
    """

    def __init__(self, message: str, *, limit: str, why: str, wait: float | None) -> None:
        super().__init__(message, retry_after=wait)
        self.limit = limit
        self.why = why


class RecoveryFailed(AssertionError):
    """A recovery case failed; the message is the report of the failed cases."""


class SimulatedCrash(BaseException):
    """The in-process stand-in for a killed process, raised at a crash point.

    A `BaseException`, so no node policy, retry or ``except Exception`` catches
    it. From the moment it is raised the run's saver refuses every write and
    forgets effect outcomes it had not stored yet: the store is left as a
    SIGKILL at that point would leave it. Recover with a new saver on the same
    store, as a new process would.
    """


# -- a missing extra (internal) ----------------------------------------------------------


def needs_extra(who: str, extra: str, missing: object, *, install: str = "") -> str:
    """What an import that failed for want of an optional extra says: ``who``
    (subject and verb) needs ``extra``, the import's own error ``missing``, and
    the pip line (naming the extras ``install``, by default ``extra`` alone)."""
    return (
        f"{who} the {extra} extra ({missing}): "
        f"pip install 'langgraph-resilience[{install or extra}]'"
    )


# -- quoting an error (internal) ------------------------------------------------------


def _unprintable(value: object) -> str:
    return f"<{type(value).__name__}: unprintable>"


def message_of(value: object) -> str:
    """``str(value)`` (an exception's message), or ``<ValueError: unprintable>``
    when its ``__str__`` raises."""
    try:
        return str(value)
    except Exception:
        return _unprintable(value)


def describe(exc: BaseException) -> str:
    """``"ValueError: message"``, or ``<ValueError: unprintable>`` when its
    ``__str__`` raises."""
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:
        return _unprintable(exc)


def repr_of(value: object) -> str:
    """``repr(value)``, or ``<ValueError: unprintable>`` when its ``__repr__`` raises."""
    try:
        return repr(value)
    except Exception:
        return _unprintable(value)
