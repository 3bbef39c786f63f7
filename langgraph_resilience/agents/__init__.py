"""Resilience for agents built with LangChain's ``create_agent``.

Needs the ``agents`` extra (``pip install 'langgraph-resilience[agents]'``,
which brings ``langchain``); the rest of the package works without it.

- `ResilienceMiddleware`: an ``AgentMiddleware`` with persisted, classified
  retries of model and tool calls, exactly-once tools, budgets that pause the
  agent, and the structured partial result;
- `CallPolicy`: how the model's calls or one tool's are retried and given up on;
- `ToolEffect`: a tool that acts on the world, recorded in the side-effect ledger;
- `tool_idempotency_key`: inside such a tool, its call's idempotency key.

The rooms: ``middleware`` (`ResilienceMiddleware`), ``_policy`` (`CallPolicy`,
`ToolEffect`), ``_calls`` (a model or tool call as tries of the one try loop),
``_tool_effects`` (a tool call recorded once in the side-effect ledger),
``_outcome`` (what a call that failed for good becomes in the agent's state),
``_resumes`` (a resume after a crash stored as a recovery).
"""

from __future__ import annotations

try:
    import langchain.agents  # noqa: F401  (the extra this subpackage needs)
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "langgraph_resilience.agents needs LangChain's create_agent: install the "
        "'agents' extra, pip install 'langgraph-resilience[agents]' (langchain>=1.0)"
    ) from exc

from langgraph_resilience.agents._policy import CallPolicy, ToolEffect
from langgraph_resilience.agents.middleware import (
    ResilienceMiddleware,
    ResilienceState,
    tool_idempotency_key,
)

__all__ = [
    "CallPolicy",
    "ResilienceMiddleware",
    "ResilienceState",
    "ToolEffect",
    "tool_idempotency_key",
]
