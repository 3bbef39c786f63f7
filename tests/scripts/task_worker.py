"""A worker for the functional API's crash test.

    python tests/scripts/task_worker.py BACKEND TARGET THREAD LEDGER [--kill] [--resume]

Runs (or resumes) the entrypoint ``pipeline``: tasks ``fetch``, ``enrich`` and
``publish`` in turn, each a `task` under a `NodePolicy`, each appending
``<task> <pid>`` to LEDGER as it runs. ``--kill`` makes this process SIGKILL
itself as ``enrich`` starts, once ``fetch``'s result is in the store
(LangGraph stores a task's result in the background, even under
``durability="sync"``: a kill the moment a task returned may find it unstored,
and the task runs again). Prints the entrypoint's result as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/: helpers

from helpers import append
from langgraph.func import entrypoint

from langgraph_resilience import Backoff, NodePolicy
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.graph import task


def stored(saver: Any, thread: str, results: int) -> None:
    """Wait (at most 10 s) until ``results`` task results are in the store."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = saver.get_tuple({"configurable": {"thread_id": thread}})
        writes = (found.pending_writes or []) if found is not None else []
        if sum(1 for _, channel, _ in writes if channel == "__return__") >= results:
            return
        time.sleep(0.01)


def main() -> None:
    backend, target, thread, ledger, *flags = sys.argv[1:]
    policy = NodePolicy(retry=Backoff(max_attempts=3, initial_interval=0.01))

    @task(policy=policy)
    def fetch(n: int) -> int:
        append(ledger, f"fetch {os.getpid()}")
        return n * 10

    @task(policy=policy)
    def enrich(n: int) -> int:
        if "--kill" in flags:
            stored(saver, thread, 1)
            os.kill(os.getpid(), signal.SIGKILL)
        append(ledger, f"enrich {os.getpid()}")
        return n + 1

    @task(policy=policy)
    def publish(n: int) -> str:
        append(ledger, f"publish {os.getpid()}")
        return f"published {n}"

    saver_cls = ResilientSqliteSaver if backend == "sqlite" else ResilientPostgresSaver
    with saver_cls.from_conn_string(target) as saver:
        if backend == "postgres":
            saver.setup()

        @entrypoint(checkpointer=saver)
        def pipeline(n: int) -> str:
            return publish(enrich(fetch(n).result()).result()).result()

        config = {"configurable": {"thread_id": thread}}
        value = None if "--resume" in flags else 4
        print(json.dumps({"out": pipeline.invoke(value, config, durability="sync")}))


main()
