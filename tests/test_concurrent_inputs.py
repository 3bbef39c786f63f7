"""Two inputs to one thread at once, without a `Worker` (docs/savers.md, Known
limits): each caller either gets its run to the end or a `CheckpointConflict`;
never a run cut off part-way without a word to its caller."""

from __future__ import annotations

import itertools
import random
import threading
import time
import uuid
from typing import Any

import pytest
from graphs import DoneState

from langgraph_resilience import ResilientStateGraph
from langgraph_resilience.errors import CheckpointConflict

TRIALS = 6
STEPS = "abcd"


def slow_chain() -> ResilientStateGraph:
    def step(name: str) -> Any:
        def node(state: DoneState) -> dict[str, Any]:
            time.sleep(0.03)
            return {"done": [name]}

        return node

    g = ResilientStateGraph(DoneState)
    for name in STEPS:
        g.add_node(name, step(name))
    g.set_entry_point(STEPS[0])
    for a, b in itertools.pairwise(STEPS):
        g.add_edge(a, b)
    g.set_finish_point(STEPS[-1])
    return g


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_second_input_in_flight_ends_its_run_or_raises(backend: str, request: Any) -> None:
    target = request.getfixturevalue("pg_dsn" if backend == "postgres" else "tmp_path")
    if backend == "postgres":
        from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver as Saver
    else:
        from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver as Saver

        target = str(target / "inputs.db")
    silent: list[Any] = []
    with Saver.from_conn_string(target) as saver:
        saver.setup()
        graph = slow_chain().compile(checkpointer=saver)
        for _ in range(TRIALS):
            config = {"configurable": {"thread_id": f"inputs-{uuid.uuid4().hex[:8]}"}}
            said: dict[str, Any] = {}

            def call(who: str, config: Any = config, said: Any = said) -> None:
                try:
                    said[who] = graph.invoke({"done": [who]}, config)["done"]
                except CheckpointConflict as exc:
                    said[who] = exc

            first = threading.Thread(target=call, args=("first",))
            first.start()
            time.sleep(random.uniform(0.0, 0.1))
            second = threading.Thread(target=call, args=("second",))
            second.start()
            first.join(30)
            second.join(30)
            for who, what in said.items():
                if not isinstance(what, CheckpointConflict) and what[-4:] != list(STEPS):
                    silent.append((who, what))
            assert len(said) == 2, said  # nothing else was raised
    assert silent == [], f"runs cut off without an error: {silent}"
