"""The test graphs and states, shared by the tests and their scripts: a file
uses these instead of declaring its own ``State`` or chaining nodes by hand.

- `DoneState`: a resilient pipeline's state, the steps done in order (``done``);
  `PipelineState` the same for a plain ``StateGraph``;
- `OutState`: a state of one list, ``out``, replaced by each step;
- `ReceiptsState`: steps that each collect a side effect's receipt;
- `CountState`: a counter ``n`` (loops, resumes);
- `chain`: nodes chained START -> ... -> END; `appending`: a node maker whose
  nodes append their name to ``done``; `linear_graph`: a plain chain of them.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypedDict, TypeVar

from langgraph.graph import END, START, StateGraph

from langgraph_resilience import ResilientState

G = TypeVar("G", bound=StateGraph)


class PipelineState(TypedDict):
    done: Annotated[list[str], operator.add]


class DoneState(ResilientState, total=False):
    """A resilient pipeline's state: the steps done, in order."""

    done: Annotated[list[str], operator.add]


class OutState(ResilientState, total=False):
    """A state of one list, replaced by each step that writes it."""

    out: list[str]


class CountState(ResilientState, total=False):
    """A counter, ``n``, and the steps done."""

    n: int
    done: Annotated[list[str], operator.add]


class ReceiptsState(ResilientState, total=False):
    """A pipeline whose steps each collect a side effect's receipt."""

    receipts: list[str]


def chain(
    graph: G,
    names: Sequence[str],
    make: Callable[[str], Any],
    options: Callable[[str], dict[str, Any]] = lambda name: {},
) -> G:
    """Add ``make(name)`` for each name, chained START -> names[0] -> ... -> END;
    ``options(name)`` are extra ``add_node`` arguments (a policy, say)."""
    for name in names:
        graph.add_node(name, make(name), **options(name))
    graph.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        graph.add_edge(a, b)
    graph.add_edge(names[-1], END)
    return graph


def appending(behaviour: Callable[[str], Any] | None = None) -> Callable[[str], Any]:
    """A node maker: each node runs ``behaviour(name)`` first (count calls, raise,
    sleep), then appends its name to ``done``."""

    def make(name: str) -> Any:
        def node(state: Any) -> dict[str, Any]:
            if behaviour is not None:
                behaviour(name)
            return {"done": [name]}

        return node

    return make


def linear_graph(names: list[str], behaviour: Any = None) -> StateGraph:
    """A plain `StateGraph` START -> names[0] -> ... -> END (see `appending`)."""
    return chain(StateGraph(PipelineState), names, appending(behaviour))
