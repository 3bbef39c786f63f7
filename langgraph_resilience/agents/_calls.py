"""What a try is for an agent's model or tool call: a `_tries.Tries` run by the
one try loop (`graph._tries.try_loop`) and its drivers (`graph._drivers`), as a
graph node's tries are.

A call's tries end in a `Tried`: the call's result or a `GaveUp`, and where its
tries ended (the failed tries its step record counts, a budget it was resumed
with, what compression kept); the middleware turns it into the agent's state.
A call is metered by the middleware (around its tries) and has no callback run
per try; only the model call is a step boundary that checks the run's budget,
and only its context can be compressed (the request's messages, to a valid
shorter history).

Under a `Worker`, a ``Retry-After`` longer than the policy's ``Backoff.max_wait``
with tries left is a durable wait, as for a graph node (`_tries.durable_wait`):
the try is stored as ``waiting`` and the call interrupts; the worker releases
the run until the wait is over, and the next claim resumes it at the next try.

Failed tries are stored in the saver's attempt ledger (the same table a
`ResilientStateGraph` node's tries go to), keyed by the task the call runs in:
in an agent built by ``create_agent`` the model call is its ``model`` task and
every tool call its own ``tools`` task (one `Send` each), whose ids LangGraph
keeps across resumes. A process killed while it waits before a retry therefore
resumes at the next try, not the first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, cast

from langchain.agents.middleware import ModelRequest
from langchain_core.messages import AnyMessage

from langgraph_resilience.graph._compress import compress_messages
from langgraph_resilience.graph._tries import Tries

__all__ = ["CallTries", "ModelTries"]


@dataclass(frozen=True, kw_only=True, slots=True)
class CallTries(Tries):
    """A tool call's tries: no budget check, metered by the middleware, no run
    of their own per try."""

    gated: bool = False
    metered: bool = False
    watched: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelTries(CallTries):
    """A model call's tries: a step boundary (the run's budget is checked
    first), its request's messages compressed after a context overflow."""

    gated: bool = True

    def compress(self, arg: Any) -> tuple[Any, dict[str, Any]] | None:
        request = cast("ModelRequest[Any]", arg)
        messages, trimmed = compress_messages(request.messages)
        shorter = request.override(messages=cast("list[AnyMessage]", messages))
        return shorter, {"at": time.time(), "trimmed": trimmed}
