"""Writes a store with whatever langgraph_resilience is on PYTHONPATH (the
backfill test runs it with a release from before the run ledger), then prints
that release's metrics and report of the store as JSON (with ``--all``, also
every thread's ``step_history`` and report).

    python old_store_writer.py sqlite|postgres TARGET [--all]
"""

from __future__ import annotations

import contextlib
import json
import operator
import sys
from typing import Annotated, Any

from langgraph.types import Command, interrupt

from langgraph_resilience import (
    Budget,
    NodePolicy,
    PermanentError,
    ResilientState,
    ResilientStateGraph,
    recovery_metrics,
    retry_failed,
    run_report,
    side_effect,
)


class State(ResilientState, total=False):
    done: Annotated[list[str], operator.add]


now = {"broken": False, "ask": False, "die": False}


@side_effect(name="send")
def send(*, idempotency_key: str) -> str:
    return "sent"


def make(step: str) -> Any:
    def node(state: State) -> dict[str, Any]:
        if step == "b":
            if now["broken"]:
                send()
                raise PermanentError("b cannot be done yet")
            if now["ask"]:
                interrupt("approve?")
        if step == "c" and now["die"]:
            raise RuntimeError("the process died here")
        return {"done": [step]}

    return node


def build(saver: Any, policy: NodePolicy | None) -> Any:
    g = ResilientStateGraph(State)
    for a, b in zip(("__start__", "a", "b", "c"), ("a", "b", "c", "__end__"), strict=True):
        if b != "__end__":
            g.add_node(b, make(b), policy=policy)
        g.add_edge(a, b)
    return g.compile(checkpointer=saver)


THREADS = ("ok", "turns", "partial", "fixed", "human", "crash", "spent")


def main(backend: str, target: str, every: bool = False) -> None:
    if backend == "sqlite":
        from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver as Saver
    else:
        from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver as Saver
    with Saver.from_conn_string(target) as saver:
        saver.setup()
        graph = build(saver, NodePolicy(retry=None))
        plain = build(saver, None)

        def cfg(t: str) -> Any:
            return {"configurable": {"thread_id": t}}

        graph.invoke({"done": []}, cfg("ok"))
        graph.invoke({"done": []}, cfg("turns"))
        graph.invoke({"done": []}, cfg("turns"))
        now["broken"] = True
        graph.invoke({"done": []}, cfg("partial"))
        graph.invoke({"done": []}, cfg("fixed"))
        now["broken"] = False
        retry_failed(graph, cfg("fixed"))
        now["ask"] = True
        graph.invoke({"done": []}, cfg("human"))
        now["ask"] = False
        graph.invoke(Command(resume="yes"), cfg("human"))
        now["die"] = True
        with contextlib.suppress(RuntimeError):  # the "crash"
            plain.invoke({"done": []}, cfg("crash"))
        now["die"] = False
        plain.invoke(None, cfg("crash"))
        # Paused by its budget before c, and left so (the backfill keeps why).
        spent = {"configurable": {"thread_id": "spent", "budget": Budget(max_steps=2)}}
        graph.invoke({"done": []}, spent)
        m = recovery_metrics(saver).to_dict()
        report = run_report(saver, "fixed").to_dict()
        out: dict[str, Any] = {"metrics": m, "report": report}
        if every:
            out["steps"] = {t: list(saver.step_history(t)) for t in THREADS}
            out["reports"] = {t: run_report(saver, t).to_dict() for t in THREADS}
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], "--all" in sys.argv[3:])
