"""A process for the host-crash trial (tests/test_host_crash.py).

    python tests/scripts/outcome_worker.py DSN CALLS THREAD first|again

``first`` runs one node that calls one side effect (a line in CALLS, fsynced,
per call), prints ``returned`` once the effect has returned to the node, and
then waits there for the test to SIGKILL this process and the Postgres server
together. ``again`` runs the thread on to its end (a fresh start of a process
after the host came back), calling the effect again only if its outcome was lost.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/: graphs, helpers

from graphs import ReceiptsState
from helpers import append

from langgraph_resilience import ResilientStateGraph, side_effect
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver


def main() -> int:
    dsn, calls, thread, mode = sys.argv[1:5]

    @side_effect(name="charge")
    def charge(*, idempotency_key: str) -> str:
        append(calls, idempotency_key)
        return f"receipt:{idempotency_key}"

    def node(state: ReceiptsState) -> dict[str, Any]:
        receipt = charge()
        if mode == "first":
            print("returned", flush=True)
            time.sleep(600)  # the test kills this process and the server now
        return {"receipts": [receipt]}

    builder = ResilientStateGraph(ReceiptsState)
    builder.add_node("charge", node)
    builder.set_entry_point("charge")
    builder.set_finish_point("charge")
    config = {"configurable": {"thread_id": thread}}
    with ResilientPostgresSaver.from_conn_string(dsn) as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"receipts": []} if mode == "first" else None, config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
