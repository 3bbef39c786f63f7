"""A `Worker` process for the partition tests (tests/test_partitions.py).

    python tests/partition_worker.py DSN SERVICE_DIR LEASE_TTL DRAIN_TIMEOUT

Runs a Worker (on the main thread, so that SIGTERM drains it) on a sync Postgres
saver with the short bounds of `partition_bounds` until no run is queued or
running, or it is drained, and prints what it left each run in (JSON). The graph
is the three-step pipeline of `partition_graph`; the first execution of step
``b`` anywhere sleeps 30 s (a long model call), and each step logs
``<thread> <step> start <pid> <time>`` to ``steps.log`` in SERVICE_DIR.
"""

from __future__ import annotations

import json
import operator
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/: conftest, helpers

from graphs import chain
from helpers import append
from langchain_core.runnables import RunnableConfig

from langgraph_resilience import NodePolicy, ResilientState, ResilientStateGraph, Worker
from langgraph_resilience.checkpoint.postgres import PgTimeouts, ResilientPostgresSaver
from langgraph_resilience.policy import Backoff

STEPS = ["a", "b", "c"]


class State(ResilientState, total=False):
    done: Annotated[list[str], operator.add]


def partition_bounds(read: float = 1.0) -> tuple[PgTimeouts, Backoff]:
    """Short bounds for a saver behind a faulty proxy: a try lasts at most
    ``connect + read`` (2 + ``read`` s), two tries, 0.1 s apart."""
    timeouts = PgTimeouts(
        connect=2, statement=read / 2, read=read, lock=0.4, idle_in_transaction=1.0
    )
    retry = Backoff(max_attempts=2, initial_interval=0.1, max_interval=0.1, jitter="none")
    return timeouts, retry


def call_bound(timeouts: PgTimeouts, retry: Backoff) -> float:
    """The longest one store call of a saver with these bounds may take."""
    connect = float(timeouts.connect or 0)  # type: ignore[arg-type]
    read = float(timeouts.read_timeout or 0)
    return retry.max_attempts * (connect + read) + (retry.max_attempts - 1) * 0.1


def partition_graph(service: Path, slow_b: float, in_b: Callable[[], Any] | None = None) -> Any:
    """a -> b -> c; the first execution of b anywhere sleeps ``slow_b`` seconds;
    every execution of b calls ``in_b()`` (the in-process tests' hook)."""

    def make(step: str) -> Any:
        def node(state: State, config: RunnableConfig) -> dict[str, Any]:
            thread = config["configurable"]["thread_id"]
            append(service / "steps.log", f"{thread} {step} start {os.getpid()} {time.time()}")
            if step == "b":
                try:
                    (service / "slow-b").touch(exist_ok=False)
                except FileExistsError:
                    pass
                else:
                    time.sleep(slow_b)
                if in_b is not None:
                    in_b()
            return {"done": [step]}

        return node

    policy = NodePolicy(retry=None, critical=True)
    return chain(ResilientStateGraph(State), STEPS, make, lambda _: {"policy": policy})


def main() -> int:
    dsn, service, lease_ttl, drain_timeout = sys.argv[1:5]
    timeouts, retry = partition_bounds()
    with ResilientPostgresSaver.from_conn_string(
        dsn, timeouts=timeouts, store_retry=retry
    ) as saver:
        worker = Worker(
            partition_graph(Path(service), 30.0),
            checkpointer=saver,
            lease_ttl=float(lease_ttl),
            drain_timeout=float(drain_timeout),
            poll_interval=0.05,
        )
        left = worker.run()
        print(json.dumps(left), flush=True)
        append(Path(service) / "exit.log", f"{os.getpid()} {time.time()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
