"""A process for the Redis crash tests: runs (or resumes) a seven-step
resilient pipeline on a Redis saver.

    python tests/scripts/redis_pipeline.py URL THREAD LEDGER [--resume]

Each node appends ``<node> <pid>`` to LEDGER (fsynced) when it starts, then
sleeps 0.05 s. Prints one JSON line: the run's status and the steps done.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/: graphs, helpers

from graphs import DoneState, chain
from helpers import append

from langgraph_resilience import Backoff, ResilientStateGraph
from langgraph_resilience.checkpoint.redis import ResilientRedisSaver

STEPS = [f"s{i}" for i in range(1, 8)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("thread")
    parser.add_argument("ledger")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()

    def make(name: str) -> object:
        def node(state: DoneState) -> dict[str, list[str]]:
            append(args.ledger, f"{name} {os.getpid()}")
            time.sleep(0.05)
            return {"done": [name]}

        return node

    graph_builder = chain(ResilientStateGraph(DoneState), STEPS, make)
    retry = Backoff(max_attempts=60, initial_interval=0.1, max_interval=0.3, jitter="none")
    with ResilientRedisSaver.from_conn_string(args.url, store_retry=retry) as saver:
        graph = graph_builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": args.thread}}
        out = graph.invoke(None if args.resume else {"done": []}, config)
    print(json.dumps({"status": out["resilience"]["status"], "done": out["done"]}))


if __name__ == "__main__":
    main()
