"""`ResilienceMiddleware` on agents built with LangChain's ``create_agent``.

A research agent (tests/scripts/agent_worker.py: a scripted tool-calling model, a
``search`` tool and a ``send_email`` tool with a fake outside service) on every
backend: classified, persisted retries of tools and the model, exactly-once
email across SIGKILLs and takeovers, Retry-After, the partial result, budget
pauses, context compression, and LangChain's own middleware alongside.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from agent_worker import PLAN, ScriptedModel, lines, research_agent
from conftest import Harness
from langchain.agents.middleware import HumanInTheLoopMiddleware, SummarizationMiddleware
from langchain_core.exceptions import OutputParserException
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from spawn import spawn

from langgraph_resilience import Backoff, Budget, ConfigError, Worker, arun_report, run_report
from langgraph_resilience.agents import CallPolicy, ResilienceMiddleware, ToolEffect
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

WORKER = str(Path(__file__).parent / "scripts" / "agent_worker.py")
QUESTION = {"messages": [("user", "Research resilience and email the boss.")]}


def cfg() -> dict[str, Any]:
    """A new thread (the Postgres database is shared by the module's tests)."""
    return {"configurable": {"thread_id": uuid.uuid4().hex}}


class Clock:
    """The middleware's sleep: records the waits, waits for none of them."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)

    async def asleep(self, seconds: float) -> None:
        self.waits.append(seconds)


class RateLimited(Exception):
    """What a provider SDK raises on HTTP 429, with its response's headers."""

    def __init__(self, retry_after: str) -> None:
        super().__init__("429 Too Many Requests")
        self.response = SimpleNamespace(status_code=429, headers={"retry-after": retry_after})


def kinds(out: dict[str, Any]) -> list[str]:
    return [type(m).__name__ for m in out["messages"]]


# -- in one process, on every backend ---------------------------------------------------


async def test_a_tool_failing_twice_transiently_is_called_three_times(
    checkpointer: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = cfg()
    clock = Clock()
    agent = research_agent(
        checkpointer.saver, tmp_path, search_failures=2, sleep=clock.sleep, asleep=clock.asleep
    )
    with caplog.at_level(logging.WARNING, logger="langgraph_resilience"):
        out = await checkpointer.invoke(agent, QUESTION, config)
    assert len(lines(tmp_path / "search.log")) == 3
    tries = [r for r in caplog.records if getattr(r, "event", None) == "try_failed"]
    assert [(r.node, r.attempt, r.kind, r.action) for r in tries] == [  # type: ignore[attr-defined]
        ("tool:search", 1, "transient", "retry"),
        ("tool:search", 2, "transient", "retry"),
    ]
    assert all(r.thread_id == config["configurable"]["thread_id"] for r in tries)  # type: ignore[attr-defined]
    # the step is named by its path, as step_history and run_report name it
    assert [r.path for r in tries] == ["tools/search[0]", "tools/search[0]"]  # type: ignore[attr-defined]
    assert tries[0].getMessage().startswith("step tools/search[0] try 1 failed")
    assert len(clock.waits) == 2  # one backoff before each retry
    assert out["messages"][-1].content == "Report sent."
    search_result = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    assert search_result.content == "3 papers on resilience"
    assert out["resilience"]["status"] == "success"
    assert out["resilience"]["usage"]["tokens"] == 150  # three model calls of 50


async def test_each_call_is_a_step_the_report_maps_tries_and_effects_to(
    checkpointer: Harness, tmp_path: Path
) -> None:
    config = cfg()
    thread = config["configurable"]["thread_id"]
    clock = Clock()
    agent = research_agent(
        checkpointer.saver, tmp_path, search_failures=2, sleep=clock.sleep, asleep=clock.asleep
    )
    await checkpointer.invoke(agent, QUESTION, config)
    steps = await checkpointer.call("step_history", thread)
    assert [(s["path"], s["node"], s["status"], s["attempts"], s["kinds"]) for s in steps] == [
        ("model", "model", "completed", 1, []),
        ("tools/search[0]", "tool:search", "completed", 3, ["transient", "transient"]),
        ("model#2", "model", "completed", 1, []),
        ("tools/send_email[0]", "tool:send_email", "completed", 1, []),
        ("model#3", "model", "completed", 1, []),
    ]
    assert [s["summary"] for s in steps] == [
        "calls='search'",
        "result='3 papers on resilience'",
        "calls='send_email'",
        "result='sent to boss@example.com'",
        "reply='Report sent.'",
    ]
    if checkpointer.is_async:
        report = await arun_report(checkpointer.saver, thread)
    else:
        report = await asyncio.to_thread(run_report, checkpointer.saver, thread)
    assert [s.path for s in report.steps] == [s["path"] for s in steps]
    failed = [(e.path, e.attempt) for e in report.timeline if e.event == "failed"]
    assert failed == [("tools/search[0]", 1), ("tools/search[0]", 2)]
    assert [(e.name, e.path, e.status) for e in report.effects] == [
        ("tool:send_email", "tools/send_email[0]", "done")
    ]
    assert report.node_statuses() == {"model": "completed", "tools": "retried"}


async def test_a_429_waits_what_retry_after_asks(checkpointer: Harness, tmp_path: Path) -> None:
    config = cfg()
    clock = Clock()
    model = ScriptedModel(plan=PLAN, errors=[RateLimited("7")], calls=[])
    agent = research_agent(
        checkpointer.saver,
        tmp_path,
        chat_model=model,
        sleep=clock.sleep,
        asleep=clock.asleep,
    )
    out = await checkpointer.invoke(agent, QUESTION, config)
    assert out["messages"][-1].content == "Report sent."
    assert len(model.calls) == 4  # the 429, then the three calls of the plan
    assert len(clock.waits) == 1 and clock.waits[0] >= 7.0  # backoff alone: <= 0.05 s


async def test_a_permanent_tool_failure_ends_with_the_partial_result(
    checkpointer: Harness, tmp_path: Path
) -> None:
    config = cfg()

    def bounce() -> None:
        raise ValueError("mailbox boss@example.com does not exist")

    model = ScriptedModel(plan=PLAN, calls=[])
    agent = research_agent(
        checkpointer.saver,
        tmp_path,
        chat_model=model,
        on_email=bounce,
        tools={"send_email": CallPolicy(on_failure="end"), "*": CallPolicy()},
    )
    out = await checkpointer.invoke(agent, QUESTION, config)
    log = out["resilience"]
    assert log["status"] == "partial_complete"
    failed = log["failed_step"]
    assert failed["path"] == "tools/send_email" and failed["tool_call_id"] == "call-email"
    assert failed["kind"] == "permanent" and failed["attempts"] == 1
    assert "does not exist" in failed["message"]
    assert [s["path"] for s in log["completed_steps"]] == ["tools/search"]
    assert log["partial_output"]["tool_results"] == 1
    assert "fix the cause" in log["recovery_suggestions"][0]
    assert len(model.calls) == 2  # the model is not asked again after the failure
    assert isinstance(out["messages"][-1], ToolMessage)
    assert out["messages"][-1].status == "error"


async def test_a_failed_tool_by_default_is_an_error_message_the_model_reads(
    checkpointer: Harness, tmp_path: Path
) -> None:
    config = cfg()

    def bounce() -> None:
        raise ValueError("mailbox does not exist")

    agent = research_agent(checkpointer.saver, tmp_path, on_email=bounce)
    out = await checkpointer.invoke(agent, QUESTION, config)
    errors = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.status == "error"]
    assert len(errors) == 1 and "failed after 1 attempt" in str(errors[0].content)
    assert out["messages"][-1].content == "Report sent."
    assert out["resilience"]["status"] == "success"
    # The email step went on without its result: degraded, and said so.
    assert out["resilience"]["degraded_steps"] == ["tools/send_email[0]"]
    steps = await checkpointer.call("step_history", config["configurable"]["thread_id"])
    email = next(s for s in steps if s["node"] == "tool:send_email")
    assert (email["status"], email["attempts"], email["kinds"]) == ("degraded", 1, ["permanent"])


async def test_a_token_budget_pauses_the_agent_and_a_top_up_resumes_it(
    checkpointer: Harness, tmp_path: Path
) -> None:
    config = cfg()
    model = ScriptedModel(plan=PLAN, calls=[])
    agent = research_agent(
        checkpointer.saver, tmp_path, chat_model=model, budget=Budget(max_tokens=100)
    )
    out = await checkpointer.invoke(agent, QUESTION, config)
    (pause,) = out["__interrupt__"]
    assert pause.value["reason"] == "budget_exhausted"
    assert pause.value["exhausted"] == ["max_tokens"] and pause.value["used"]["tokens"] == 100
    assert len(model.calls) == 2 and len(lines(tmp_path / "email.log")) == 1
    out = await checkpointer.invoke(agent, Command(resume=Budget(max_tokens=1_000)), config)
    assert out["messages"][-1].content == "Report sent."
    assert len(model.calls) == 3
    assert out["resilience"]["usage"]["tokens"] == 150
    assert out["resilience"]["budget"] == {"max_tokens": 1_000}
    assert len(lines(tmp_path / "email.log")) == 1


async def test_cost_a_tool_reports_counts_against_the_budget(
    checkpointer: Harness, tmp_path: Path
) -> None:
    config = cfg()
    agent = research_agent(
        checkpointer.saver, tmp_path, search_cost=1.5, budget=Budget(max_cost=1.0)
    )
    out = await checkpointer.invoke(agent, QUESTION, config)
    (pause,) = out["__interrupt__"]
    assert pause.value["exhausted"] == ["max_cost"] and pause.value["used"]["cost"] == 1.5
    assert lines(tmp_path / "email.log") == []  # paused before the model asked for it
    out = await checkpointer.invoke(agent, Command(resume={"max_cost": 10.0}), config)
    assert out["messages"][-1].content == "Report sent."
    assert out["resilience"]["usage"]["cost"] == 1.5


async def test_a_context_overflow_retries_with_a_shorter_valid_history(
    checkpointer: Harness, tmp_path: Path
) -> None:
    config = cfg()

    class SmallWindow(ScriptedModel):
        def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            if len(messages) > 4:
                self.calls.append(-len(messages))
                raise RuntimeError("This model's maximum context length is 4 messages")
            return super()._generate(messages, *args, **kwargs)

    model = SmallWindow(plan=PLAN, calls=[])
    agent = research_agent(checkpointer.saver, tmp_path, chat_model=model)
    out = await checkpointer.invoke(agent, QUESTION, config)
    assert model.calls == [1, 3, -5, 3]  # the last call: 5 messages, then 3
    assert out["messages"][-1].content == "Report sent."
    (summary,) = out["resilience"]["context_summary"]
    assert summary["trimmed"]["kept"] == 3 and summary["trimmed"]["dropped"] == 2
    assert len(out["messages"]) == 6  # the state keeps the whole conversation


async def test_with_summarization_and_human_approval(checkpointer: Harness, tmp_path: Path) -> None:
    config = cfg()
    clock = Clock()
    summarizer = GenericFakeChatModel(messages=iter([AIMessage(content="summary")] * 5))
    agent = research_agent(
        checkpointer.saver,
        tmp_path,
        search_failures=1,
        sleep=clock.sleep,
        asleep=clock.asleep,
        middleware=[
            SummarizationMiddleware(summarizer, trigger=("messages", 4), keep=("messages", 2)),
            HumanInTheLoopMiddleware(interrupt_on={"send_email": True}),
        ],
    )
    out = await checkpointer.invoke(agent, QUESTION, config)
    (approval,) = out["__interrupt__"]
    assert approval.value["action_requests"][0]["name"] == "send_email"
    assert lines(tmp_path / "email.log") == []
    assert len(lines(tmp_path / "search.log")) == 2 and len(clock.waits) == 1
    out = await checkpointer.invoke(
        agent, Command(resume={"decisions": [{"type": "approve"}]}), config
    )
    assert out["messages"][-1].content == "Report sent."
    assert out["resilience"]["status"] == "success"
    assert len(lines(tmp_path / "email.log")) == 1
    assert any("summary" in str(m.content) for m in out["messages"])


async def test_a_model_that_fails_for_good_ends_with_the_partial_result(
    checkpointer: Harness, tmp_path: Path
) -> None:
    class Unauthorized(Exception):
        status_code = 401

    config = cfg()
    model = ScriptedModel(plan=PLAN, errors=[Unauthorized("invalid API key")])
    agent = research_agent(
        checkpointer.saver, tmp_path, chat_model=model, model=CallPolicy(on_failure="end")
    )
    out = await checkpointer.invoke(agent, QUESTION, config)
    log = out["resilience"]
    assert log["status"] == "partial_complete"
    assert log["failed_step"]["path"] == "model" and log["failed_step"]["kind"] == "permanent"
    assert log["failed_step"]["attempts"] == 1 and log["completed_steps"] == []
    assert out["messages"][-1].content.startswith("Stopped: model failed")
    assert lines(tmp_path / "search.log") == []


async def test_a_model_output_failing_validation_is_asked_again(
    checkpointer: Harness, tmp_path: Path
) -> None:
    config = cfg()
    clock = Clock()
    model = ScriptedModel(plan=PLAN, errors=[OutputParserException("not JSON")])
    agent = research_agent(
        checkpointer.saver, tmp_path, chat_model=model, sleep=clock.sleep, asleep=clock.asleep
    )
    out = await checkpointer.invoke(agent, QUESTION, config)
    assert out["messages"][-1].content == "Report sent." and len(model.calls) == 4
    assert clock.waits == []  # a validation retry does not back off


def test_with_another_saver_retries_work_in_memory_and_effects_say_what_to_use(
    tmp_path: Path,
) -> None:
    agent = research_agent(InMemorySaver(), tmp_path, search_failures=2, effects_named=False)
    out = agent.invoke(QUESTION, cfg())
    assert out["messages"][-1].content == "Report sent."
    assert len(lines(tmp_path / "search.log")) == 3
    (tmp_path / "x").mkdir()
    agent = research_agent(InMemorySaver(), tmp_path / "x")
    with pytest.raises(ConfigError, match="ResilientSqliteSaver"):
        agent.invoke(QUESTION, cfg())


def test_a_budget_pause_under_a_worker_resumes_with_worker_resume(
    sqlite_path: str, tmp_path: Path
) -> None:
    with ResilientSqliteSaver.from_conn_string(sqlite_path) as saver:
        agent = research_agent(saver, tmp_path)
        worker = Worker(agent, lease_ttl=5, poll_interval=0.05)
        run_id = worker.submit(QUESTION, thread_id="w1", budget=Budget(max_tokens=100))
        assert worker.run() == {run_id: "paused"}
        assert len(lines(tmp_path / "email.log")) == 1
        worker.resume(run_id, budget=Budget(max_tokens=1_000))
        assert worker.run() == {run_id: "success"}
        values = agent.get_state({"configurable": {"thread_id": "w1"}}).values
        assert values["messages"][-1].content == "Report sent."
        assert len(lines(tmp_path / "email.log")) == 1


def test_settings_are_checked_with_messages_that_say_what_is_right() -> None:
    with pytest.raises(ConfigError, match='"raise" or "end"'):
        ResilienceMiddleware(model=CallPolicy(on_failure="continue"))
    with pytest.raises(ConfigError, match="on_failure"):
        CallPolicy(on_failure="ignore")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="Backoff"):
        CallPolicy(retry=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="list of tool names"):
        ResilienceMiddleware(effects="send_email")
    with pytest.raises(ConfigError, match="on_unknown"):
        ToolEffect(on_unknown="ignore")  # type: ignore[arg-type]


def test_a_policy_left_to_its_default_gives_up_as_its_call_can() -> None:
    # The same CallPolicy for the model and the tools: the model raises, a tool
    # continues with an error ToolMessage (docs/agents.md's example).
    policy = CallPolicy(retry=Backoff(max_attempts=4))
    middleware = ResilienceMiddleware(model=policy, tools={"search": policy, "*": policy})
    assert middleware.model_policy.on_failure == "raise"
    assert middleware.tool_policies["search"].on_failure == "continue"
    assert middleware.default_tool_policy.on_failure == "continue"


def test_the_package_imports_without_langchain() -> None:
    code = (
        "import sys; sys.modules['langchain'] = None\n"
        "import langgraph_resilience, langgraph_resilience.checkpoint.sqlite\n"
        "try:\n"
        "    import langgraph_resilience.agents\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'langgraph-resilience[agents]'" in done.stdout


# -- killed processes, on SQLite and Postgres ----------------------------------------------


def _run(store: tuple[str, str], service: Path, thread: str, mode: str, *extra: str) -> Any:
    proc = spawn(WORKER, store[0], store[1], str(service), thread, mode, *extra)
    return proc


@pytest.mark.crash
def test_a_sigkill_during_the_backoff_resumes_at_the_third_try(
    store: tuple[str, str], tmp_path: Path
) -> None:
    first = _run(store, tmp_path, "backoff", "backoff")
    assert first.wait(30) == -9
    tries = lines(tmp_path / "search.log")
    assert len(tries) == 2  # both failures stored; killed in the wait before the third
    second = _run(store, tmp_path, "backoff", "resume")
    out, err = second.communicate(30)
    assert second.returncode == 0, err
    assert json.loads(out) == {"answer": "Report sent.", "status": "success"}
    tries = lines(tmp_path / "search.log")
    assert len(tries) == 3 and tries[2].endswith(str(second.pid))  # exactly one more try


@pytest.mark.crash
@pytest.mark.parametrize("how", ["named", "marked"])
def test_an_email_sent_right_before_a_sigkill_is_not_sent_again(
    store: tuple[str, str], tmp_path: Path, how: str
) -> None:
    """The email tool named in ``effects``, or decorated with ``side_effect``."""
    marked = ("--marked",) if how == "marked" else ()
    first = _run(store, tmp_path, f"email-{how}", "email", *marked)
    assert first.wait(30) == -9
    assert len(lines(tmp_path / "email.log")) == 1  # sent; its outcome not stored
    second = _run(store, tmp_path, f"email-{how}", "resume", *marked)
    out, err = second.communicate(30)
    assert second.returncode == 0, err
    assert json.loads(out)["answer"] == "Report sent."
    assert len(lines(tmp_path / "email.log")) == 1  # reconcile found it: not sent twice
    (question,) = lines(tmp_path / "reconcile.log")
    assert question.split(" ")[0] == lines(tmp_path / "email.log")[0].split(" ")[0]


@pytest.mark.crash
@pytest.mark.parametrize("how", ["named", "marked"])
def test_under_two_workers_a_killed_ones_agent_is_taken_over_and_emails_once(
    store: tuple[str, str], tmp_path: Path, how: str
) -> None:
    marked = ("--marked",) if how == "marked" else ()
    first = _run(store, tmp_path, f"job-{how}", "worker", "--kill-after-email", *marked)
    deadline = time.monotonic() + 30
    while not lines(tmp_path / "submitted.log") and time.monotonic() < deadline:
        time.sleep(0.02)
    second = _run(store, tmp_path, "-", "worker", "--kill-after-email", *marked)
    assert first.wait(30) == -9 or second.wait(30) == -9
    for proc in (first, second):
        proc.wait(30)
    survivor = second if first.returncode == -9 else first
    out, err = survivor.communicate(30)
    assert survivor.returncode == 0, err
    (run_id,) = lines(tmp_path / "submitted.log")
    assert json.loads(out) == {run_id: "success"}
    assert len(lines(tmp_path / "email.log")) == 1
    # A read-only step may run again: the killed worker's last checkpoints may not
    # have been stored yet (durability="async"); the email, keyed by its tool call
    # id, is not sent again even then.
    assert 1 <= len(lines(tmp_path / "search.log")) <= 2
