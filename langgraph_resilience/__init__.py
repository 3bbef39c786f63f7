"""langgraph-resilience: partial-failure handling for LangGraph pipelines.

Checkpoint what succeeded, retry only what failed, never repeat a side effect.
The savers live in `langgraph_resilience.checkpoint.sqlite` (and ``.aio``) and
`langgraph_resilience.checkpoint.postgres` (and ``.aio``).
"""

from __future__ import annotations

from langgraph_resilience.errors import (
    CheckpointConflict,
    CheckpointCorrupt,
    ConfigError,
    EffectOutcomeUnknown,
    LeaseLost,
    ResilienceError,
    StoreUnavailable,
)
from langgraph_resilience.policy import Backoff

__version__ = "0.1.0"

__all__ = [
    "Backoff",
    "CheckpointConflict",
    "CheckpointCorrupt",
    "ConfigError",
    "EffectOutcomeUnknown",
    "LeaseLost",
    "ResilienceError",
    "StoreUnavailable",
]
