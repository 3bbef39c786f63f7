"""langgraph-resilience: partial-failure handling for LangGraph pipelines.

Checkpoint what succeeded, retry only what failed, never repeat a side effect.
The savers live in `langgraph_resilience.checkpoint.sqlite` (and ``.aio``) and
`langgraph_resilience.checkpoint.postgres` (and ``.aio``).

``__all__`` is the documented API. Of the errors it holds the kinds node code
raises and the library's errors most callers catch; every error, the rare ones
too (`StoreUnavailable`, `RunStateError`, `ArchiveError`, ...), is importable
from `langgraph_resilience.errors`, whose docstring draws the whole tree.

The core, at the root: ``errors``, ``classify``, ``policy``, ``budget``,
``state`` (the public types), ``_engine`` (the pure decision of a failed try),
``_store_errors`` (which driver errors are store errors), ``_langgraph`` (the one
door to LangGraph's private names), ``_keys`` (our own config and metadata
keys), ``__main__`` (``python -m langgraph_resilience``). The folders, lowest
layer first: ``_util/`` (leaf helpers), ``telemetry/``, ``checkpoint/`` (the
savers and the store), ``cache/`` (node caches), ``limits/``, ``graph/``, ``worker/``, ``effects/``,
``history/``, ``agents/``, ``testing/``, ``server/``, ``cli/``.
"""

from __future__ import annotations

from langgraph_resilience.budget import Budget, report_usage
from langgraph_resilience.checkpoint.archive import Archive
from langgraph_resilience.classify import Classification, Classifier, FailureKind, classify
from langgraph_resilience.effects._settle import asettle_effect, settle_effect
from langgraph_resilience.effects._side_effect import side_effect
from langgraph_resilience.errors import (
    BudgetExhausted,
    CheckpointConflict,
    ConfigError,
    ContextOverflow,
    DegradableError,
    DeployBlocked,
    EffectOutcomeUnknown,
    LeaseLost,
    PermanentError,
    ResilienceError,
    TransientError,
    ValidationFailed,
)
from langgraph_resilience.graph._builder import ResilientStateGraph
from langgraph_resilience.graph._retry_failed import aretry_failed, retry_failed
from langgraph_resilience.graph._task import current_attempt
from langgraph_resilience.history._deploy import DeployReport, acheck_deploy, check_deploy
from langgraph_resilience.history._metrics import (
    RecoveryMetrics,
    arecovery_metrics,
    recovery_metrics,
)
from langgraph_resilience.history._report import RunReport, arun_report, run_report
from langgraph_resilience.policy import Attempt, Backoff, Limit, NodePolicy
from langgraph_resilience.state import FailedStep, ResilientState, RunOutcome
from langgraph_resilience.worker._worker import Worker

__version__ = "0.1.0"

__all__ = [
    "Archive",
    "Attempt",
    "Backoff",
    "Budget",
    "BudgetExhausted",
    "CheckpointConflict",
    "Classification",
    "Classifier",
    "ConfigError",
    "ContextOverflow",
    "DegradableError",
    "DeployBlocked",
    "DeployReport",
    "EffectOutcomeUnknown",
    "FailedStep",
    "FailureKind",
    "LeaseLost",
    "Limit",
    "NodePolicy",
    "PermanentError",
    "RecoveryMetrics",
    "ResilienceError",
    "ResilientState",
    "ResilientStateGraph",
    "RunOutcome",
    "RunReport",
    "TransientError",
    "ValidationFailed",
    "Worker",
    "acheck_deploy",
    "arecovery_metrics",
    "aretry_failed",
    "arun_report",
    "asettle_effect",
    "check_deploy",
    "classify",
    "current_attempt",
    "recovery_metrics",
    "report_usage",
    "retry_failed",
    "run_report",
    "settle_effect",
    "side_effect",
]
