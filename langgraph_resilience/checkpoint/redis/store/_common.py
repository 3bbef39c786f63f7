"""What the Redis twins share besides their operations: options, the setup
checks (server version, durability), versions, and the features refused.

Kept on Redis besides the checkpoints: the effect ledger and the attempts
ledger (``saver.effects``, ``saver.attempts``: `_effects_parts`), so
``@side_effect`` works in a graph on a Redis saver, and the run queue under
leases (`_runs`): a `Worker` runs on a Redis saver, its writes fenced (its
checkpoints, writes, effects and failed tries), the run ledger (run rows,
recoveries, step rows: `_runlog`, `_steps`) that ``run_report``,
``recovery_metrics`` and ``list_runs`` read, and shared `Limit`s
(``saver.limits``: `_limits_parts`, their slots freed with the saver's next
write: `_limits.releasing`), the heads ``check_deploy`` reads
(``history.heads``) and the save counters (`_counts`). Refused, with
`ConfigError` (the docs' "What Redis does not keep"): the console's buttons;
they live in the SQL savers' own transactions, and a weaker copy would break
their promises silently.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from typing import Any, ClassVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_resilience.checkpoint.archive._objects import Archive, archive_of
from langgraph_resilience.checkpoint.archive._sizes import DEFAULT_WARN_BYTES, SizeBudget
from langgraph_resilience.checkpoint.ledger._ledger import EffectRecord
from langgraph_resilience.checkpoint.redis.ledger._effects import riding
from langgraph_resilience.checkpoint.redis.ledger._effects_parts import RedisAttempts, RedisEffects
from langgraph_resilience.checkpoint.redis.ledger._limits import releasing
from langgraph_resilience.checkpoint.redis.ledger._limits_parts import RedisLimits
from langgraph_resilience.checkpoint.redis.store._counts import counted
from langgraph_resilience.checkpoint.redis.store._durability import Durability, durability
from langgraph_resilience.checkpoint.redis.store._ops import Ops, Place, T
from langgraph_resilience.checkpoint.redis.store._tier import object_key
from langgraph_resilience.checkpoint.runlog._run_log import PutLedger, ledger_of_put
from langgraph_resilience.checkpoint.saver._base import SaverState
from langgraph_resilience.checkpoint.saver._savers import LeaseStops
from langgraph_resilience.checkpoint.store._counters import WRITES_OK
from langgraph_resilience.errors import ConfigError
from langgraph_resilience.policy import Backoff

__all__ = ["DEFAULT_REDIS_RETRY", "DEFAULT_TTL", "RedisCommon"]

#: A thread's keys live a day after its last write unless written again.
DEFAULT_TTL = timedelta(hours=24)

#: A restart from the AOF: ten tries, waits capped at 0.05 ... 2 s (~9 s in all).
DEFAULT_REDIS_RETRY = Backoff(
    max_attempts=10, initial_interval=0.05, backoff_factor=2.0, max_interval=2.0, jitter="none"
)

#: Servers already warned about (one warning per server and process).
_WARNED: set[str] = set()


def _ttl_ms(ttl: float | timedelta | None, *, zero: bool = False) -> int:
    if ttl is None:
        return 0
    seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
    if seconds < 0 or (seconds == 0 and not zero):
        raise ConfigError(f"ttl={ttl!r}: give a positive duration, or None for no TTL")
    return int(seconds * 1000) if zero else max(1, int(seconds * 1000))


def redis_target(conn: Any) -> str:
    """Host:port/db of a client, without its password (named in errors); a
    cluster client's: ``cluster <a node's host:port>``."""
    if callable(default := getattr(conn, "get_default_node", None)):
        node = default() or next(iter(getattr(conn, "startup_nodes", None) or []), None)
        return f"cluster {getattr(node, 'host', '?')}:{getattr(node, 'port', '?')}"
    kw = getattr(getattr(conn, "connection_pool", None), "connection_kwargs", {}) or {}
    if "path" in kw:
        return f"unix:{kw['path']}"
    return f"{kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"


def check_version(info: dict[str, Any], target: str) -> None:
    version = str(info.get("redis_version", "0"))
    if int(version.split(".")[0] or 0) < 7:
        raise ConfigError(f"Redis at {target} is {version}: the Redis savers need Redis >= 7")


def config_reply(reply: Any) -> dict[str, str] | None:
    if not isinstance(reply, dict):
        return None
    return {
        (k.decode() if isinstance(k, bytes) else str(k)): (
            v.decode() if isinstance(v, bytes) else str(v)
        )
        for k, v in reply.items()
    }


def judge(config: dict[str, str] | None, target: str) -> Durability:
    """The durability verdict, warned about once per server (`_durability`)."""
    verdict = durability(config, target)
    if verdict.warn and target not in _WARNED:
        _WARNED.add(target)
        warnings.warn(verdict.message, RuntimeWarning, stacklevel=3)
    return verdict


class RedisCommon(LeaseStops, BaseCheckpointSaver[str]):
    """Options and refusals both twins share."""

    place: Place
    backoff: Backoff
    target: str
    durability: Durability | None
    #: The classes of ``effects`` and ``attempts`` (the async twin's have a-methods).
    _effects_type: ClassVar[type[RedisEffects]] = RedisEffects
    _attempts_type: ClassVar[type[RedisAttempts]] = RedisAttempts
    _limits_type: ClassVar[type[RedisLimits]] = RedisLimits

    def __init__(
        self,
        conn: Any,
        *,
        prefix: str,
        ttl: float | timedelta | None,
        store_retry: Backoff | None,
        serde: SerializerProtocol | None,
        archive: Archive | str | None,
        warn_checkpoint_bytes: int | None = DEFAULT_WARN_BYTES,
        max_checkpoint_bytes: int | None = None,
    ) -> None:
        super().__init__(serde=serde)
        if store_retry is not None and not isinstance(store_retry, Backoff):
            raise ConfigError(f"store_retry must be a Backoff, got {type(store_retry).__name__}")
        self.conn = conn
        self.archive = archive_of(archive)
        ttl_ms = _ttl_ms(ttl)
        # with a cold tier, keys never expire: idle threads are demoted instead (`_tier`)
        self.idle_ms = ttl_ms or _ttl_ms(DEFAULT_TTL)
        sizes = SizeBudget(warn_bytes=warn_checkpoint_bytes, max_bytes=max_checkpoint_bytes)
        self.place = Place(prefix, 0 if self.archive is not None else ttl_ms, sizes)
        self.backoff = store_retry or DEFAULT_REDIS_RETRY
        self.target = redis_target(conn)
        self.durability = None
        # shared by copies (``compile()`` may ``copy.copy`` a saver): outcomes written behind
        self._state = SaverState()
        self.place.counters = self._state.counters  # the save counts waiting (`_counts`)

    @property
    def effects(self) -> RedisEffects:
        """The side-effect ledger (`saver._interfaces.Effects`), on Redis."""
        return self._effects_type(self)

    @property
    def attempts(self) -> RedisAttempts:
        """The failed tries of tasks (`saver._interfaces.Attempts`), on Redis."""
        return self._attempts_type(self)

    @property
    def limits(self) -> RedisLimits:
        """Shared limits (`langgraph_resilience.limits` drives them), on Redis."""
        return self._limits_type(self)

    def _riding(self, op: Ops[T]) -> Ops[T]:
        """``op`` carrying the outcomes written behind (`_effects.riding`) and the
        slots of ended tries (`_limits.releasing`)."""
        return riding(
            self._state.outcomes, self.place, releasing(self._state.releases, self.place, op)
        )

    def _failed(self, name: str | None) -> Callable[[], None] | None:
        """What counts a failed try of a write as ``name`` (a save counter)."""
        if name is None:
            return None
        counters = self._state.counters
        return lambda: counters.add(name)

    def _counted_writes(self, writes: Sequence[Any]) -> AbstractContextManager[str]:
        """The counts a task's writes carry (`_counts.counted`); no writes store
        nothing on Redis, and count their try as the SQL savers' empty
        transaction does, riding with the next write."""
        if not writes:
            self._state.counters.add(WRITES_OK)
            return nullcontext("")
        return counted(self._state.counters, WRITES_OK)

    def list_effects(self, thread_id: str) -> Sequence[EffectRecord]:
        """A thread's side effects: key, name, intent and outcome times, status."""
        return self.effects.listed(str(thread_id))

    def _object_key(self, thread_id: str) -> str:
        return object_key(self.place.prefix, thread_id)

    def _archive_for(self, thread_id: str) -> Archive:
        if self.archive is None:
            raise ConfigError(
                f"thread {thread_id!r} is in the cold tier: open the saver with the archive "
                "it was demoted to (archive=...)"
            )
        return self.archive

    def _idle_ms(self, older_than: float | timedelta | None) -> int:
        if self.archive is None:
            raise ConfigError("archive_idle needs a cold tier: pass archive=Archive(...) or a URL")
        return self.idle_ms if older_than is None else _ttl_ms(older_than, zero=True)

    def _put_ledger(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> PutLedger | None:
        """What a checkpoint tells the run ledger (`_run_log.ledger_of_put`), as the
        SQL savers decide it: once a put, outside the retried operation."""
        dumps = self.serde.dumps_typed
        return ledger_of_put(config, checkpoint, metadata, new_versions, dumps)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """As LangGraph's SQL savers: a zero-padded counter and a random tail."""
        current_v = 0 if current is None else int(str(current).split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"
