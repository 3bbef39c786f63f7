"""Default context compression: shrink a node's ``messages`` to a valid shorter history.

After a CONTEXT_OVERFLOW failure the node is retried with roughly the most recent
half of its conversation. A cut that is merely *shorter* is not enough: chat
providers reject a history with a tool result whose tool call is gone (HTTP 400),
and a history without the user's question answers nothing. The rules, in order:

1. The leading system message(s) are always kept, at the front.
2. The most recent message is always kept: it is what the model answers next.
3. The window is the most recent messages that, with the system message(s) and
   the question, make about ``n // 2``. It is cut by langchain-core's
   ``trim_messages`` (``strategy="last"``, ``include_system=True``,
   ``allow_partial=False``, one token per message) to start on a human message
   (``start_on``). In an agent loop the only human message is often far back, or
   starting on the last one keeps less than half the window; then the window
   starts on its first AI or human message instead (after the question an AI
   turn is a valid continuation). If it holds neither (only tool results) it is
   widened back to the nearest human or AI message. ``end_on`` is not used: it
   would drop the trailing tool result or message the node is about to answer.
4. The first human message (the user's question) is kept; if the window does not
   hold it, it is re-inserted right after the system message(s). The window never
   starts on a tool result, so the re-inserted question separates no tool call
   from its result.
5. Tool-call pairing holds afterwards: a `ToolMessage` whose `AIMessage` tool call
   was dropped is dropped too, and an `AIMessage` whose tool results were dropped
   is dropped with them (a call without a result in the *input* is left alone:
   the compression did not orphan it).
6. If no valid history is shorter than the input (e.g. system, question, one tool
   round), the messages are returned unchanged, and the summary says so.

Messages are matched by position, never by ``id``, so histories reduced by
LangGraph's ``add_messages`` (every message has an id) and plain lists (no ids)
behave alike. The result is a plain list for the next try's input; it is not a
state write, so no `RemoveMessage` is needed.

The summary (second return value of `compress_messages`) is JSON-friendly data
for the run log's ``context_summary``::

    {"kept": 4, "dropped": 4, "dropped_types": {"ai": 2, "tool": 2},
     "dropped_tool_calls": ["search", "search"], "question_reinserted": True,
     "unchanged": False}

(an unchanged history adds ``"reason"``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    trim_messages,
)

from langgraph_resilience.errors import ConfigError

__all__ = ["compress_messages", "compress_with_summary", "default_compress"]

# Classes, not type names: a chunk's ``type`` is e.g. "AIMessageChunk", not "ai".
_HUMAN_START: list[type[BaseMessage]] = [HumanMessage]
_TURN_START: list[type[BaseMessage]] = [HumanMessage, AIMessage]

_NO_MESSAGES = (
    "context overflow, but the state has no `messages` to trim; give the node "
    "NodePolicy(compress=...) that shrinks its context"
)


def compress_messages(
    messages: Sequence[BaseMessage],
) -> tuple[list[BaseMessage], dict[str, Any]]:
    """Keep roughly the most recent half of a conversation as a valid history.

    Returns the kept messages (the same objects, in their order) and a summary of
    what was dropped; see the module docstring for the rules. A history that
    cannot shrink validly comes back unchanged, with ``"unchanged": True``.
    """
    msgs = list(messages)
    n = len(msgs)
    head = _leading_systems(msgs)
    question = next((i for i, m in enumerate(msgs) if isinstance(m, HumanMessage)), None)
    start = _window_start(msgs, head, question)
    if start is None:
        return msgs, _unchanged(n, "no message after the system message(s) can start a history")
    keep = set(range(head)) | set(range(start, n))
    if question is not None:
        keep.add(question)
    keep = _paired(msgs, keep)
    if len(keep) == n:
        return msgs, _unchanged(n, "no valid shorter history keeps the question and latest turn")
    dropped = [m for i, m in enumerate(msgs) if i not in keep]
    summary: dict[str, Any] = {
        "kept": len(keep),
        "dropped": len(dropped),
        "dropped_types": dict(Counter(m.type for m in dropped)),
        "dropped_tool_calls": [
            str(call["name"]) for m in dropped if isinstance(m, AIMessage) for call in m.tool_calls
        ],
        "question_reinserted": question is not None and question < start,
        "unchanged": False,
    }
    return [msgs[i] for i in sorted(keep)], summary


def compress_with_summary(state: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """`default_compress` and the summary of what it dropped (for ``context_summary``).

    Raises:
        ConfigError: the state has no ``messages`` to trim.
    """
    raw = state.get("messages") if isinstance(state, Mapping) else None
    if not raw:
        raise ConfigError(_NO_MESSAGES)
    trimmed, summary = compress_messages(convert_to_messages(raw))
    return {"messages": trimmed}, summary


def default_compress(state: Any) -> dict[str, Any]:
    """Halve the ``messages`` key into a valid history; keep system message and question.

    Raises:
        ConfigError: the state has no ``messages`` to trim.
    """
    update, _ = compress_with_summary(state)
    return update


def _leading_systems(msgs: Sequence[BaseMessage]) -> int:
    """How many system messages open the conversation."""
    count = 0
    while count < len(msgs) and isinstance(msgs[count], SystemMessage):
        count += 1
    return count


def _window_start(msgs: Sequence[BaseMessage], head: int, question: int | None) -> int | None:
    """Index of the first message of the kept recent window; None if nothing can start one."""
    n = len(msgs)
    if n == head:
        return None
    budget = max(1, n // 2 - head)
    if question is not None and question < n - budget:
        budget = max(1, budget - 1)  # leave room for the re-inserted question
    system = 1 if isinstance(msgs[0], SystemMessage) else 0  # what include_system keeps
    for start_on, least in ((_HUMAN_START, max(1, budget // 2)), (_TURN_START, 1)):
        kept = trim_messages(
            msgs,
            max_tokens=budget + system,
            token_counter=len,
            strategy="last",
            start_on=start_on,
            include_system=True,
            allow_partial=False,
        )
        # A suffix of msgs (after the system message), never inside the head:
        # leading system messages are neither human nor AI messages.
        if len(kept) - system >= least:
            return n - (len(kept) - system)
    # Only tool results in the window: widen it back to the nearest turn start.
    for i in range(n - budget - 1, head - 1, -1):
        if isinstance(msgs[i], (HumanMessage, AIMessage)):
            return i
    return None


def _call_ids(message: AIMessage) -> set[str]:
    """The ids of an AI message's tool calls (valid or not) that a tool result may answer."""
    ids = [call["id"] for call in message.tool_calls]
    ids += [call["id"] for call in message.invalid_tool_calls]
    return {i for i in ids if i}


def _paired(msgs: Sequence[BaseMessage], keep: set[int]) -> set[int]:
    """Drop kept tool results without their call, and kept calls without their results."""
    results: dict[str, list[int]] = {}
    for i, m in enumerate(msgs):
        if isinstance(m, ToolMessage):
            results.setdefault(m.tool_call_id, []).append(i)
    keep = set(keep)
    changed = True
    while changed:
        changed = False
        called: set[str] = set()
        for i in sorted(keep):
            m = msgs[i]
            if isinstance(m, AIMessage):
                ids = _call_ids(m)
                if any(j not in keep for c in ids for j in results.get(c, ())):
                    keep.discard(i)
                    changed = True
                else:
                    called |= ids
            elif isinstance(m, ToolMessage) and m.tool_call_id not in called:
                keep.discard(i)
                changed = True
    return keep


def _unchanged(n: int, reason: str) -> dict[str, Any]:
    return {
        "kept": n,
        "dropped": 0,
        "dropped_types": {},
        "dropped_tool_calls": [],
        "question_reinserted": False,
        "unchanged": True,
        "reason": reason,
    }
