"""The graph of the drain-exit tests (tests/test_drain_exit.py), for the command
line: ``--graph drain_graph:builder`` with ``tests/scripts`` on ``PYTHONPATH``.

``a -> b -> c``. The first execution of ``b`` anywhere sleeps ``LGR_DRAIN_SLOW``
seconds (default 30: a long model call, to catch a worker mid-run); then ``b``
calls the ``deliver`` side effect once per thread (its idempotency key), which
logs ``<key> <pid> <time>`` to ``calls.log``. Every step logs ``<thread> <step>
start <pid> <time>`` to ``steps.log``. Both files are in the directory
``LGR_DRAIN_DIR`` names.
"""

from __future__ import annotations

import operator
import os
import time
from pathlib import Path
from typing import Annotated, Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START

from langgraph_resilience import NodePolicy, ResilientState, ResilientStateGraph, side_effect

STEPS = ["a", "b", "c"]


class State(ResilientState, total=False):
    done: Annotated[list[str], operator.add]


def _service() -> Path:
    return Path(os.environ["LGR_DRAIN_DIR"])


def _append(name: str, line: str) -> None:
    with open(_service() / name, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def _lookup(key: str) -> str | None:
    path = _service() / "calls.log"
    known = path.exists() and any(
        line.split()[0] == key for line in path.read_text().splitlines() if line
    )
    return f"receipt:{key}" if known else None


@side_effect(name="deliver", reconcile=_lookup)
def deliver(*, idempotency_key: str) -> str:
    _append("calls.log", f"{idempotency_key} {os.getpid()} {time.time()}")
    return f"receipt:{idempotency_key}"


def _make(step: str) -> Any:
    def node(state: State, config: RunnableConfig) -> dict[str, Any]:
        thread = config["configurable"]["thread_id"]
        _append("steps.log", f"{thread} {step} start {os.getpid()} {time.time()}")
        if step == "b":
            try:
                (_service() / "slow-b").touch(exist_ok=False)
            except FileExistsError:
                pass
            else:
                time.sleep(float(os.environ.get("LGR_DRAIN_SLOW", "30")))
            deliver()
        return {"done": [step]}

    return node


builder: ResilientStateGraph[Any, Any, Any, Any] = ResilientStateGraph(State)
for _step in STEPS:
    builder.add_node(_step, _make(_step), policy=NodePolicy(retry=None, critical=True))
builder.add_edge(START, "a")
builder.add_edge("a", "b")
builder.add_edge("b", "c")
builder.add_edge("c", END)
