"""The size budget of a checkpoint: a warning past ``warn_checkpoint_bytes``
naming the largest channels, a refusal past ``max_checkpoint_bytes``.

The check costs a sum of lengths on every put (the rows are serialized for the
write anyway); the channels are measured only when the total is over.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from langgraph_resilience.errors import ConfigError

__all__ = ["DEFAULT_WARN_BYTES", "OVERSIZE_COUNTER", "SizeBudget"]

logger = logging.getLogger("langgraph_resilience")

DEFAULT_WARN_BYTES = 100 * 1024
#: The save counter of checkpoints stored over the warning size.
OVERSIZE_COUNTER = "checkpoint_oversize"
_SHOWN = 3


@dataclass(frozen=True, kw_only=True)
class SizeBudget:
    """How large a checkpoint may grow.

    Attributes:
        warn_bytes: log a warning (and count it) above this; None: never.
        max_bytes: refuse the checkpoint with a `ConfigError` above this; None: never.
    """

    warn_bytes: int | None = DEFAULT_WARN_BYTES
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        for name in ("warn_bytes", "max_bytes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ConfigError(
                    f"{name.replace('_bytes', '_checkpoint_bytes')} must be a positive "
                    f"number of bytes or None, got {value!r} (e.g. 100 * 1024)"
                )

    def check(
        self,
        size: int,
        where: Callable[[], str],
        channels: Callable[[], Mapping[str, int]],
        count: Callable[[str], None],
    ) -> None:
        """Warn about, or refuse, a checkpoint of ``size`` bytes (``where``
        names it; called only then).

        Raises:
            ConfigError: ``size`` is over ``max_bytes``.
        """
        over_warn = self.warn_bytes is not None and size > self.warn_bytes
        over_max = self.max_bytes is not None and size > self.max_bytes
        if not (over_warn or over_max):
            return
        named_where = where()
        largest = sorted(channels().items(), key=lambda kv: -kv[1])[:_SHOWN]
        named = ", ".join(f"{name!r} {_kb(n)}" for name, n in largest)
        if over_max:
            raise ConfigError(
                f"{named_where} is {_kb(size)}, over max_checkpoint_bytes={self.max_bytes}; "
                f"largest channels: {named}. Keep large data out of the graph state (store "
                "it elsewhere and keep a reference or a summary), or raise "
                "max_checkpoint_bytes; nothing was stored."
            )
        count(OVERSIZE_COUNTER)
        logger.warning(
            "%s is %s, over warn_checkpoint_bytes=%s; largest channels: %s",
            named_where,
            _kb(size),
            self.warn_bytes,
            named,
            extra={"checkpoint_bytes": size, "largest_channels": dict(largest)},
        )


def _kb(n: int) -> str:
    return f"{n / 1024:.1f} KB"


def put_size(row: tuple[Any, ...], blob_rows: Any) -> int:
    """The bytes a checkpoint's rows hold (a string kept inline in Postgres's
    JSON counts by its length)."""
    size = 0
    for value in row:
        kind = type(value)
        if kind is str or value is None:
            continue
        if kind is bytes or isinstance(value, bytearray | memoryview):
            size += len(value)
        elif (obj := getattr(value, "obj", None)) is not None and isinstance(obj, Mapping):
            values = obj.get("channel_values") or {}
            size += sum(len(v) for v in values.values() if isinstance(v, str))
    for blob_row in blob_rows or ():  # (thread, ns, channel, version, type, blob, sum)
        if isinstance(blob_row[5], bytes | bytearray | memoryview):
            size += len(blob_row[5])
    return size


def channel_sizes(
    values: Mapping[str, Any], dumps: Callable[[Any], tuple[str, bytes]]
) -> dict[str, int]:
    sizes = {}
    for name, value in values.items():
        try:
            sizes[name] = len(dumps(value)[1])
        except Exception:
            continue
    return sizes
