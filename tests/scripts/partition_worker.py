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
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/: conftest, helpers

from graphs import DoneState, chain
from helpers import append
from langchain_core.runnables import RunnableConfig

from langgraph_resilience import NodePolicy, ResilientStateGraph, Worker
from langgraph_resilience.checkpoint.postgres import PgTimeouts, ResilientPostgresSaver
from langgraph_resilience.policy import Backoff

STEPS = ["a", "b", "c"]


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
        def node(state: DoneState, config: RunnableConfig) -> dict[str, Any]:
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
    return chain(ResilientStateGraph(DoneState), STEPS, make, lambda _: {"policy": policy})


@contextmanager
def worker_behind_proxy(
    port: int, dsn: str, graph: Any, lease_ttl: float, poll: float, read: float = 1.0
) -> Iterator[tuple[Any, ResilientPostgresSaver, ResilientPostgresSaver, Worker]]:
    """``(proxy, direct, saver_a, worker_a)``: worker A (``drain_timeout`` 1 s) on
    ``saver_a``, bounded by `partition_bounds` and behind a fresh `faults.TcpProxy`
    to the server on ``port``; ``direct``, a saver on ``dsn`` itself (worker B's, and
    the checks'). The savers close as the block ends, A's first."""
    from faults import TcpProxy

    timeouts, retry = partition_bounds(read)
    with (
        TcpProxy(port) as proxy,
        ResilientPostgresSaver.from_conn_string(dsn) as direct,
        ResilientPostgresSaver.from_conn_string(
            proxy.dsn(dsn), timeouts=timeouts, store_retry=retry
        ) as saver_a,
    ):
        worker_a = Worker(
            graph, checkpointer=saver_a, lease_ttl=lease_ttl, poll_interval=poll,
            drain_timeout=1.0,
        )  # fmt: skip
        yield proxy, direct, saver_a, worker_a


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
