"""The test graphs and states, shared by the tests and their scripts: a file
uses these instead of declaring its own ``State`` or chaining nodes by hand.

- `DoneState`: a resilient pipeline's state, the steps done in order (``done``);
  `PipelineState` the same for a plain ``StateGraph``;
- `OutState`: a state of one list, ``out``, replaced by each step;
- `ReceiptsState`: steps that each collect a side effect's receipt;
- `CountState`: a counter ``n`` (loops, resumes);
- `quick`: a retry of quick tries, ``FAST`` its three;
- `BranchState` (resilient) and `PlainBranchState` (a plain ``TypedDict``): a
  fan-out's branches, each sent its index ``i``, collecting the indexes done;
- `chain`: nodes chained START -> ... -> END (`one_node`: a graph of one);
  `appending`: a node maker whose nodes append their name to ``done``
  (`failing`: one of them raises first); `linear_graph`: a plain chain of them;
  `pipeline`: a resilient a -> b -> c of one try each, for the workers' tests.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypedDict, TypeVar

from langgraph.graph import END, START, StateGraph

from langgraph_resilience import Backoff, NodePolicy, ResilientState, ResilientStateGraph

G = TypeVar("G", bound=StateGraph)


def quick(tries: int = 3) -> Backoff:
    """A `Backoff` of ``tries`` tries a millisecond or so apart (at most 10 ms)."""
    return Backoff(max_attempts=tries, initial_interval=0.001, max_interval=0.01)


FAST = quick()


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


class BranchState(ResilientState, total=False):
    """A fan-out's state: each branch is sent its index ``i`` and adds it to ``done``."""

    done: Annotated[list[int], operator.add]
    i: int


class PlainBranchState(TypedDict, total=False):
    """`BranchState` for a plain ``StateGraph``."""

    done: Annotated[list[int], operator.add]
    i: int


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


def one_node(graph: G, name: str, node: Any, **options: Any) -> G:
    """Add ``node`` as ``name``, START -> name -> END; ``options`` are ``add_node``'s."""
    graph.add_node(name, node, **options)
    graph.add_edge(START, name)
    graph.add_edge(name, END)
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


def failing(step: str, error: Callable[[], BaseException]) -> Callable[..., None]:
    """A behaviour (for `appending` or `pipeline`): node ``step`` raises ``error()``
    each time it runs; the other nodes do nothing."""

    def behaviour(name: str, *state: Any) -> None:
        if name == step:
            raise error()

    return behaviour


def linear_graph(names: list[str], behaviour: Any = None) -> StateGraph:
    """A plain `StateGraph` START -> names[0] -> ... -> END (see `appending`)."""
    return chain(StateGraph(PipelineState), names, appending(behaviour))


def pipeline(
    behaviour: Callable[[str, Any], Any] | None = None,
    *,
    critical: bool = True,
    schema: type = DoneState,
) -> ResilientStateGraph:
    """A resilient ``a -> b -> c`` of ``schema`` whose nodes each run once
    (``NodePolicy(retry=None, critical=critical)``): ``behaviour(name, state)``
    first, then append the node's name to ``done``."""

    def make(name: str) -> Any:
        def node(state: Any) -> dict[str, Any]:
            if behaviour is not None:
                behaviour(name, state)
            return {"done": [name]}

        return node

    policy = NodePolicy(retry=None, critical=critical)
    return chain(ResilientStateGraph(schema), ["a", "b", "c"], make, lambda _: {"policy": policy})
