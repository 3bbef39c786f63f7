"""The default context compression keeps a valid, shorter history."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    trim_messages,
)
from langgraph.graph.message import add_messages

from langgraph_resilience.errors import ConfigError
from langgraph_resilience.graph._compress import (
    compress_messages,
    compress_with_summary,
    default_compress,
)


def assert_valid_history(messages: Sequence[BaseMessage]) -> None:
    """System messages first, then no tool result without its call and no call without results."""
    body = [m for m in messages if not isinstance(m, SystemMessage)]
    assert all(isinstance(m, SystemMessage) for m in messages[: len(messages) - len(body)])
    assert body, "nothing after the system message(s)"
    assert not isinstance(body[0], ToolMessage), "history starts on a tool result"
    pending: dict[str, str] = {}  # tool call id -> tool name, not yet answered
    answered: set[str] = set()
    for m in body:
        if isinstance(m, ToolMessage):
            assert m.tool_call_id in pending or m.tool_call_id in answered, (
                f"orphan tool result {m.tool_call_id!r}"
            )
            pending.pop(m.tool_call_id, None)
            answered.add(m.tool_call_id)
        elif isinstance(m, AIMessage):
            assert not pending, f"tool calls without results: {sorted(pending)}"
            pending = {str(c["id"]): c["name"] for c in m.tool_calls}
        else:
            assert not pending, f"tool calls without results: {sorted(pending)}"
    assert not pending, f"tool calls without results: {sorted(pending)}"


def call(i: int, name: str = "search") -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": {"q": i}, "id": f"call{i}"}])


def result(i: int) -> ToolMessage:
    return ToolMessage(f"result {i}", tool_call_id=f"call{i}")


def rounds(first: int, last: int, name: str = "search") -> list[BaseMessage]:
    return [m for i in range(first, last) for m in (call(i, name), result(i))]


SYSTEM = SystemMessage("you are terse")
QUESTION = HumanMessage("what is the capital of Peru?")


def test_the_helper_rejects_what_providers_reject() -> None:
    assert_valid_history([SYSTEM, QUESTION, call(1), result(1)])
    with pytest.raises(AssertionError, match="orphan"):
        assert_valid_history([SYSTEM, QUESTION, result(1)])
    with pytest.raises(AssertionError, match="without results"):
        assert_valid_history([SYSTEM, QUESTION, call(1), AIMessage("done")])
    with pytest.raises(AssertionError, match="starts on a tool result"):
        assert_valid_history([SYSTEM, result(1)])


def test_the_old_trim_orphans_the_tool_result() -> None:
    # The bug this module fixes: a plain halving keeps [system, tool result].
    history = [SYSTEM, QUESTION, call(1), result(1)]
    old = trim_messages(
        history, max_tokens=2, token_counter=len, strategy="last", include_system=True
    )
    assert old == [SYSTEM, result(1)]
    with pytest.raises(AssertionError):
        assert_valid_history(old)


def test_one_tool_round_cannot_shrink_and_is_returned_unchanged() -> None:
    history = [SYSTEM, QUESTION, call(1), result(1)]
    kept, summary = compress_messages(history)
    assert kept == history
    assert_valid_history(kept)
    assert summary["unchanged"] is True and summary["reason"]
    assert (summary["kept"], summary["dropped"], summary["dropped_types"]) == (4, 0, {})


@pytest.mark.parametrize(
    "history",
    [
        [SYSTEM, QUESTION],
        [QUESTION],
        [SYSTEM],
        [SYSTEM, SystemMessage("and polite")],
        [SYSTEM, QUESTION, AIMessage("Lima")],
    ],
    ids=["system+question", "question", "system", "two-systems", "one-turn"],
)
def test_histories_that_cannot_shrink_are_unchanged(history: list[BaseMessage]) -> None:
    kept, summary = compress_messages(history)
    assert kept == history
    assert summary["unchanged"] is True
    assert summary["kept"] == len(history) and summary["dropped"] == 0


def test_six_message_tool_conversation_keeps_the_question() -> None:
    history = [SYSTEM, QUESTION, *rounds(1, 3)]
    kept, summary = compress_messages(history)
    assert kept == [SYSTEM, QUESTION, call(2), result(2)]
    assert_valid_history(kept)
    assert summary == {
        "kept": 4,
        "dropped": 2,
        "dropped_types": {"ai": 1, "tool": 1},
        "dropped_tool_calls": ["search"],
        "question_reinserted": True,
        "unchanged": False,
    }


def test_six_message_chat_keeps_the_question_and_the_latest_message() -> None:
    history: list[BaseMessage] = [
        SYSTEM,
        QUESTION,
        AIMessage("Lima"),
        HumanMessage("and of Chile?"),
        AIMessage("Santiago"),
        HumanMessage("and of Bolivia?"),
    ]
    kept, summary = compress_messages(history)
    assert kept[:2] == [SYSTEM, QUESTION]
    assert kept[-1] == history[-1]
    assert len(kept) == 3
    assert_valid_history(kept)
    assert summary["dropped_types"] == {"ai": 2, "human": 1}
    assert summary["dropped_tool_calls"] == []


def test_long_agent_loop_shrinks_to_about_half() -> None:
    history = [SYSTEM, QUESTION, *rounds(0, 6, "search"), *rounds(6, 9, "fetch")]
    assert len(history) == 20
    kept, summary = compress_messages(history)
    assert_valid_history(kept)
    assert kept[:2] == [SYSTEM, QUESTION]
    assert kept[-2:] == [call(8, "fetch"), result(8)]
    assert 6 <= len(kept) <= 10
    dropped = [m for m in history if m not in kept]
    assert summary["kept"] == len(kept) and summary["dropped"] == len(dropped) == 20 - len(kept)
    assert summary["dropped_types"] == {
        "ai": sum(isinstance(m, AIMessage) for m in dropped),
        "tool": sum(isinstance(m, ToolMessage) for m in dropped),
    }
    assert summary["dropped_tool_calls"] == [
        c["name"] for m in dropped if isinstance(m, AIMessage) for c in m.tool_calls
    ]
    assert summary["dropped_types"]["ai"] == summary["dropped_types"]["tool"]
    json.dumps(summary)  # plain data for the run log


def test_chat_with_several_tool_rounds_and_turns_shrinks() -> None:
    history: list[BaseMessage] = [
        SYSTEM,
        QUESTION,
        *rounds(0, 3),
        AIMessage("Lima"),
        HumanMessage("and its population?"),
        *rounds(3, 5, "census"),
        AIMessage("about 10 million"),
        HumanMessage("and its altitude?"),
        *rounds(5, 7, "geo"),
    ]
    kept, summary = compress_messages(history)
    assert_valid_history(kept)
    assert kept[:2] == [SYSTEM, QUESTION]
    assert kept[-1] == history[-1]
    assert len(kept) < len(history)
    assert summary["kept"] + summary["dropped"] == len(history)
    assert summary["question_reinserted"] is True


def test_a_window_of_only_tool_results_is_widened_to_its_call() -> None:
    parallel = AIMessage(
        "",
        tool_calls=[{"name": n, "args": {}, "id": n} for n in ("a", "b", "c", "d", "e")],
    )
    results = [ToolMessage(n, tool_call_id=n) for n in ("a", "b", "c", "d", "e")]
    history = [SYSTEM, QUESTION, AIMessage("checking"), HumanMessage("go"), parallel, *results]
    kept, summary = compress_messages(history)
    assert kept == [SYSTEM, QUESTION, parallel, *results]
    assert_valid_history(kept)
    assert summary["dropped_types"] == {"ai": 1, "human": 1}


def test_parallel_tool_results_are_kept_or_dropped_together() -> None:
    parallel = AIMessage(
        "",
        tool_calls=[
            {"name": "weather", "args": {}, "id": "w"},
            {"name": "time", "args": {}, "id": "t"},
        ],
    )
    history: list[BaseMessage] = [
        SYSTEM,
        QUESTION,
        parallel,
        ToolMessage("sunny", tool_call_id="w"),
        ToolMessage("noon", tool_call_id="t"),
        AIMessage("sunny at noon"),
        HumanMessage("thanks, and tomorrow?"),
        AIMessage("rain"),
    ]
    kept, summary = compress_messages(history)
    assert_valid_history(kept)
    assert kept == [SYSTEM, QUESTION, history[6], history[7]]
    assert summary["dropped_tool_calls"] == ["weather", "time"]
    assert summary["dropped_types"] == {"ai": 2, "tool": 2}


def test_question_already_in_the_window_is_not_duplicated() -> None:
    history: list[BaseMessage] = [
        SYSTEM,
        AIMessage("hello, how can I help?"),
        QUESTION,
        AIMessage("Lima"),
    ]
    kept, summary = compress_messages(history)
    assert kept == [SYSTEM, QUESTION, AIMessage("Lima")]  # moved up, once
    assert summary["question_reinserted"] is True
    assert summary["dropped_types"] == {"ai": 1}

    greetings = [AIMessage(t) for t in ("hello", "I can search", "or compute", "ask away")]
    history = [SYSTEM, *greetings, QUESTION, AIMessage("Lima"), HumanMessage("thanks")]
    kept, summary = compress_messages(history)
    assert kept == [SYSTEM, QUESTION, AIMessage("Lima"), HumanMessage("thanks")]
    assert summary["question_reinserted"] is False
    assert summary["dropped_types"] == {"ai": 4}


def test_several_system_messages_stay_in_front() -> None:
    rules = SystemMessage("cite sources")
    history = [SYSTEM, rules, QUESTION, *rounds(0, 4)]
    kept, _ = compress_messages(history)
    assert kept[:3] == [SYSTEM, rules, QUESTION]
    assert kept[-2:] == [call(3), result(3)]
    assert len(kept) < len(history)
    assert_valid_history(kept)


def test_no_system_message() -> None:
    history = [QUESTION, *rounds(0, 4)]
    kept, _ = compress_messages(history)
    assert kept[0] == QUESTION
    assert len(kept) < len(history)
    assert_valid_history(kept)


def test_a_call_still_waiting_for_its_results_is_kept() -> None:
    # Compression did not orphan this call: its results never existed.
    history = [SYSTEM, QUESTION, *rounds(0, 3), call(9)]
    kept, _ = compress_messages(history)
    assert kept[:2] == [SYSTEM, QUESTION]
    assert kept[-1] == call(9)
    assert not any(isinstance(m, ToolMessage) and m.tool_call_id == "call0" for m in kept)


def test_messages_with_ids_from_add_messages() -> None:
    new: list[Any] = [SYSTEM, QUESTION, *rounds(0, 5)]
    history = cast("list[BaseMessage]", add_messages([], new))
    assert all(m.id for m in history)
    kept, summary = compress_messages(history)
    assert_valid_history(kept)
    assert all(any(k is m for m in history) for k in kept)  # the same objects
    assert [m.id for m in kept[:2]] == [history[0].id, history[1].id]
    assert summary["kept"] == len(kept) < len(history)


def test_default_compress_returns_the_messages_update() -> None:
    history = [SYSTEM, QUESTION, *rounds(1, 3)]
    state: dict[str, Any] = {"messages": history, "draft": "x"}
    update = default_compress(state)
    assert update == {"messages": [SYSTEM, QUESTION, call(2), result(2)]}
    assert state["messages"] is history and len(history) == 6  # input untouched
    same, summary = compress_with_summary(state)
    assert same == update
    assert summary["dropped"] == 2


def test_default_compress_accepts_message_like_values() -> None:
    update = default_compress({"messages": [("system", "be brief"), ("human", "hi")] * 3})
    assert [m.type for m in update["messages"]] == ["system", "human", "human"]


def test_plain_chat_keeps_the_latest_message_as_before() -> None:
    # Same shape as tests/test_graph.py's overflow test: 8 messages -> 4.
    history = [SYSTEM, *(HumanMessage(f"m{i}") for i in range(7))]
    trimmed = default_compress({"messages": history})["messages"]
    assert [m.content for m in trimmed] == ["you are terse", "m0", "m5", "m6"]


@pytest.mark.parametrize("state", [{}, {"messages": []}, {"other": 1}, None, ["not", "a", "map"]])
def test_no_messages_is_a_config_error(state: Any) -> None:
    with pytest.raises(ConfigError, match=r"NodePolicy\(compress=\.\.\.\)"):
        default_compress(state)
    with pytest.raises(ConfigError):
        compress_with_summary(state)
