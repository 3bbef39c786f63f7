"""A ``create_agent`` research agent for the agent middleware tests, and a process
that runs it for the crash tests.

    python tests/agent_worker.py BACKEND TARGET SERVICE_DIR THREAD MODE

The agent: a scripted chat model (its answer depends only on the conversation,
so a resumed process answers as the killed one would) calls ``search`` and
``send_email``, then answers. Tools log every call to SERVICE_DIR
(``search.log``, ``email.log``: ``<key or query> <pid>`` per line); the email
service is asked ``reconcile`` questions in ``reconcile.log``.

MODE:
- ``backoff``: ``search`` fails transiently twice; the process SIGKILLs itself
  in the wait before the third try (the second failure is stored by then);
- ``email``: ``send_email`` SIGKILLs the process right after the email went
  out, before its outcome is stored;
- ``model``: the model SIGKILLs the process in its call after ``search``
  answered (the checkpoint after the search is stored: ``durability="sync"``);
- ``resume``: resumes THREAD (``invoke(None)``) and prints the last message;
- ``worker``: runs a `Worker` until idle (``--kill-after-email``: the first
  email sent anywhere SIGKILLs its process).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/: conftest, helpers

from conftest import open_saver
from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, tool
from pydantic import Field

from langgraph_resilience import Backoff, ConfigError, Worker, report_usage, side_effect
from langgraph_resilience.agents import (
    CallPolicy,
    ResilienceMiddleware,
    ToolEffect,
    tool_idempotency_key,
)

USAGE = {"input_tokens": 40, "output_tokens": 10, "total_tokens": 50}


def tool_calls(*calls: tuple[str, dict[str, Any], str]) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"name": n, "args": a, "id": i, "type": "tool_call"} for n, a, i in calls],
        usage_metadata=USAGE,  # type: ignore[arg-type]
    )


#: The research agent's plan: search, then email the finding, then answer.
PLAN = [
    tool_calls(("search", {"query": "resilience"}, "call-search")),
    tool_calls(("send_email", {"to": "boss@example.com"}, "call-email")),
    AIMessage(content="Report sent.", usage_metadata=USAGE),  # type: ignore[arg-type]
]


class ScriptedModel(BaseChatModel):
    """Answers with the step of ``plan`` after the last one whose tool calls have
    results in the conversation (so a shortened history answers the same);
    raises ``errors`` first, one per call (a flaky or rate-limited model)."""

    plan: list[AIMessage]
    errors: list[BaseException] = Field(default_factory=list)
    calls: list[int] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls.append(len(messages))
        if self.errors:
            raise self.errors.pop(0)
        answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
        turn = 1 + max(
            (
                i
                for i, step in enumerate(self.plan)
                if step.tool_calls and all(c["id"] in answered for c in step.tool_calls)
            ),
            default=-1,
        )
        answer = self.plan[min(turn, len(self.plan) - 1)].model_copy()
        return ChatResult(generations=[ChatGeneration(message=answer)])


class DyingModel(ScriptedModel):
    """`ScriptedModel` that SIGKILLs its process in the call after a tool answered."""

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if any(isinstance(m, ToolMessage) for m in messages):
            die()
        return super()._generate(messages, stop, run_manager, **kwargs)


def append(path: Path, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def research_tools(
    service: Path,
    *,
    search_failures: int = 0,
    on_email: Callable[[], None] = lambda: None,
    marked: bool = False,
    search_cost: float = 0.0,
) -> list[BaseTool]:
    """``search`` (fails transiently ``search_failures`` times in all, across
    processes) and ``send_email`` (its service dedupes nothing: a second call
    would be a second email; ``marked``: decorated with ``side_effect``)."""

    @tool
    def search(query: str) -> str:
        """Search the web."""
        append(service / "search.log", f"{query} {os.getpid()}")
        if len(lines(service / "search.log")) <= search_failures:
            raise ConnectionError("search backend reset the connection")
        if search_cost:
            report_usage(cost=search_cost)
        return f"3 papers on {query}"

    def send_email(to: str) -> str:
        """Send the report by email."""
        try:
            key = tool_idempotency_key()
        except ConfigError:  # not recorded (the unprotected agent)
            key = "-"
        append(service / "email.log", f"{key} {os.getpid()}")
        on_email()
        return f"sent to {to}"

    if marked:
        send_email = side_effect(reconcile=reconcile_with(service))(send_email)
    return [search, tool(send_email)]


def reconcile_with(service: Path) -> Callable[[str], Any]:
    def reconcile(key: str) -> str | None:
        append(service / "reconcile.log", f"{key} {os.getpid()}")
        sent = any(line.split(" ")[0] == key for line in lines(service / "email.log"))
        return "sent (found by reconcile)" if sent else None

    return reconcile


def research_agent(
    saver: Any,
    service: Path,
    *,
    chat_model: BaseChatModel | None = None,
    search_failures: int = 0,
    on_email: Callable[[], None] = lambda: None,
    sleep: Callable[[float], None] = lambda s: None,
    middleware: Sequence[Any] = (),
    marked: bool = False,
    search_cost: float = 0.0,
    effects_named: bool = True,
    **options: Any,
) -> Any:
    """The research agent on ``saver``, with the resilience middleware first
    (``marked``: the email tool is a ``side_effect``, not named in ``effects``)."""
    options.setdefault(
        "tools", {"search": CallPolicy(retry=Backoff(max_attempts=4, initial_interval=0.05))}
    )
    named = effects_named and not marked
    effects = {"send_email": ToolEffect(reconcile=reconcile_with(service))} if named else {}
    resilience = ResilienceMiddleware(
        effects=effects,
        sleep=sleep,
        **options,
    )
    return create_agent(
        chat_model or ScriptedModel(plan=PLAN),
        tools=research_tools(
            service,
            search_failures=search_failures,
            on_email=on_email,
            marked=marked,
            search_cost=search_cost,
        ),
        middleware=[resilience, *middleware],
        checkpointer=saver,
    )


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


async def main() -> int:
    from contextlib import AsyncExitStack

    parser = argparse.ArgumentParser()
    for name in ("backend", "target", "service", "thread", "mode"):
        parser.add_argument(name)
    parser.add_argument("--kill-after-email", action="store_true")
    parser.add_argument("--marked", action="store_true")
    parser.add_argument("--lease-ttl", type=float, default=1.0)
    args = parser.parse_args()
    service = Path(args.service)
    config = {"configurable": {"thread_id": args.thread}}
    question = {"messages": [("user", "Research resilience and email the boss.")]}
    async with AsyncExitStack() as stack:
        saver = await open_saver(args.backend, False, args.target, stack)
        if args.mode == "backoff":
            waits: list[float] = []

            def sleep(seconds: float) -> None:
                waits.append(seconds)
                if len(waits) == 2:  # the wait before the third try
                    die()

            agent = research_agent(saver, service, search_failures=2, sleep=sleep)
            await asyncio.to_thread(agent.invoke, question, config)
        elif args.mode == "email":
            agent = research_agent(saver, service, on_email=die, marked=args.marked)
            await asyncio.to_thread(agent.invoke, question, config)
        elif args.mode == "model":
            agent = research_agent(saver, service, chat_model=DyingModel(plan=PLAN))
            await asyncio.to_thread(agent.invoke, question, config, durability="sync")
        elif args.mode == "resume":
            agent = research_agent(saver, service, marked=args.marked)
            out = await asyncio.to_thread(agent.invoke, None, config)
            print(
                json.dumps(
                    {"answer": out["messages"][-1].content, "status": out["resilience"]["status"]}
                )
            )
        else:

            def first_email_kills() -> None:
                if args.kill_after_email and len(lines(service / "email.log")) == 1:
                    die()

            agent = research_agent(saver, service, on_email=first_email_kills, marked=args.marked)
            worker = Worker(agent, lease_ttl=args.lease_ttl, poll_interval=0.05)
            if args.thread != "-":
                run_id = await asyncio.to_thread(worker.submit, question, thread_id=args.thread)
                append(service / "submitted.log", run_id)
            print(json.dumps(await asyncio.to_thread(worker.run)))
            append(service / "worker.log", f"{os.getpid()} done {time.time()}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
