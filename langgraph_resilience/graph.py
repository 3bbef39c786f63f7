"""`ResilientStateGraph`: LangGraph's `StateGraph` with per-node failure policies.

The builder wraps each node (`_node`: its tries under its `NodePolicy`), gives
each node with a policy an error handler that follows its routing signal
(`_routes`), adds the terminal ``partial_result`` node when a critical node may
give up, and compiles with ``durability="sync"`` by default. `retry_failed`
re-runs the step that ended a run with a partial result.

Nodes added without a policy (and with no default) keep LangGraph's behaviour;
their wrapper only records the step in the run log.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict, cast

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.graph import Graph
from langgraph.cache.base import BaseCache
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore
from langgraph.types import All, Checkpointer, Command
from langgraph.typing import ContextT, InputT, OutputT, StateT
from typing_extensions import Self, Unpack

import langgraph_resilience.state as run_log
from langgraph_resilience._node import NodeAction, NodeContext, is_async, wrap
from langgraph_resilience._routes import PARTIAL_RESULT, error_handler, partial_result
from langgraph_resilience._task import BUDGET_KEY, DURABILITY_KEY, EFFECT_SCOPE_KEY, current_attempt
from langgraph_resilience.budget import Budget
from langgraph_resilience.classify import Classifier
from langgraph_resilience.errors import ConfigError, RunStateError
from langgraph_resilience.policy import NodePolicy

__all__ = [
    "PARTIAL_RESULT",
    "ResilientCompiledStateGraph",
    "ResilientStateGraph",
    "aretry_failed",
    "current_attempt",
    "retry_failed",
]

_UNSET: Any = object()
_DEFAULTS = Classifier()


class CompileOptions(TypedDict, total=False):
    """The keyword arguments of LangGraph's `StateGraph.compile`, passed on as given."""

    cache: BaseCache[Any] | None
    store: BaseStore | None
    interrupt_before: All | list[str] | None
    interrupt_after: All | list[str] | None
    debug: bool
    name: str | None
    transformers: Sequence[Callable[[tuple[str, ...]], Any]] | None


class ResilientCompiledStateGraph(CompiledStateGraph[StateT, ContextT, InputT, OutputT]):
    """A compiled `ResilientStateGraph`: draws its failure routes in `get_graph()`."""

    def get_graph(self, config: RunnableConfig | None = None, *, xray: int | bool = False) -> Graph:
        drawing = super().get_graph(config, xray=xray)
        routes: dict[str, list[str]] = getattr(self.builder, "_routes", {})
        for name in [n for n in drawing.nodes if n.startswith("__error_handler__")]:
            drawing.remove_node(drawing.nodes[name])
        for source, targets in routes.items():
            for target in targets:
                if source in drawing.nodes and target in drawing.nodes:
                    label = "on failure" if target != PARTIAL_RESULT else "gives up"
                    drawing.add_edge(drawing.nodes[source], drawing.nodes[target], label, True)
        if PARTIAL_RESULT in drawing.nodes and END in drawing.nodes:
            ends = {(e.source, e.target) for e in drawing.edges}
            if (PARTIAL_RESULT, END) not in ends:
                drawing.add_edge(drawing.nodes[PARTIAL_RESULT], drawing.nodes[END])
        return drawing


class ResilientStateGraph(StateGraph[StateT, ContextT, InputT, OutputT]):
    """A `StateGraph` whose nodes answer failures by their `NodePolicy`.

    The state schema must extend `ResilientState`. Compiled graphs default to
    ``durability="sync"``, so task identities survive a crash.

    Example:
        >>> g = ResilientStateGraph(State)  # doctest: +SKIP
        >>> g.set_node_defaults(policy=NodePolicy(retry=Backoff(max_attempts=4)))
        >>> g.add_node("search", search, policy=NodePolicy(fallback="cache", critical=False))
    """

    def __init__(
        self,
        state_schema: type[StateT],
        context_schema: type[ContextT] | None = None,
        *,
        input_schema: type[InputT] | None = None,
        output_schema: type[OutputT] | None = None,
        **kwargs: Any,  # LangGraph's deprecated aliases (config_schema, input, output)
    ) -> None:
        super().__init__(
            state_schema,
            context_schema,
            input_schema=input_schema,
            output_schema=output_schema,
            **kwargs,
        )
        self._policies: dict[str, NodePolicy | None] = {}
        self._default_policy: NodePolicy | None = None
        self._routes: dict[str, list[str]] = {}

    def set_node_defaults(self, *, policy: NodePolicy | None = _UNSET, **kwargs: Any) -> Self:
        """LangGraph's node defaults, plus a default `NodePolicy` for nodes added after.

        Raises:
            ConfigError: ``policy`` is not a NodePolicy, or nodes were already added.
        """
        if policy is not _UNSET:
            if policy is not None and not isinstance(policy, NodePolicy):
                raise ConfigError(f"policy must be a NodePolicy or None, got {policy!r}")
            if self._policies:
                raise ConfigError(
                    "set_node_defaults(policy=...) must come before add_node; nodes already "
                    f"added: {', '.join(sorted(self._policies))}"
                )
            self._default_policy = policy
        return super().set_node_defaults(**kwargs) if kwargs else self

    def add_node(
        self,
        node: str | NodeAction,
        action: NodeAction | None = None,
        *,
        policy: NodePolicy | None = _UNSET,
        **kwargs: Any,
    ) -> Self:
        """LangGraph's `add_node`, plus ``policy=`` (default: the graph's default policy).

        Raises:
            ConfigError: ``policy`` is not a NodePolicy, ``timeout`` on a sync node,
                or no action to run.
        """
        if isinstance(node, str):
            name = node
        else:  # as in LangGraph: the node is its own action, named after it
            name, action = _name_of(node), node
        if action is None:
            raise ConfigError(
                f"node {name!r} has nothing to run: add_node({name!r}, function_or_runnable)"
            )
        if policy is _UNSET:
            policy = self._default_policy
        elif policy is not None and not isinstance(policy, NodePolicy):
            raise ConfigError(f"policy for node {name!r} must be a NodePolicy, got {policy!r}")
        if policy is not None and policy.timeout is not None and not is_async(action):
            raise ConfigError(
                f"NodePolicy(timeout=...) on node {name!r} needs an async node: LangGraph "
                "cannot stop a running sync function. Make it `async def`, or drop the timeout."
            )
        self._policies[name] = policy
        if policy is not None:
            kwargs.setdefault("error_handler", error_handler(name))
        return super().add_node(name, self._wrap(name, action, policy), **kwargs)

    def _wrap(self, name: str, action: NodeAction, policy: NodePolicy | None) -> NodeAction:
        ctx = NodeContext(
            name=name,
            policy=policy,
            classifier=(policy.classifier if policy and policy.classifier else _DEFAULTS),
            is_terminal=lambda node: node in self._terminal,
            rand=random.random,
        )
        return wrap(ctx, action)

    @property
    def _terminal(self) -> frozenset[str]:
        return getattr(self, "_terminal_nodes", frozenset())

    def compile(
        self,
        checkpointer: Checkpointer = None,
        *,
        budget: Budget | Mapping[str, Any] | None = None,
        **kwargs: Unpack[CompileOptions],
    ) -> ResilientCompiledStateGraph[StateT, ContextT, InputT, OutputT]:
        """Compile; routes fallbacks and critical failures; defaults to ``durability="sync"``.

        ``budget``: the default `Budget` of every run (a run's
        ``config["configurable"]["budget"]`` overrides it).

        Raises:
            ConfigError: the state schema does not extend ResilientState, a
                fallback names a node that does not exist, or the budget is bad.

        Example:
            >>> graph = g.compile(checkpointer=saver, budget=Budget(max_cost=2.0))  # doctest: +SKIP
        """
        run_log.require_resilient_schema(self.state_schema)
        routes: dict[str, list[str]] = {}
        for name, policy in self._policies.items():
            if policy is None:
                continue
            if policy.fallback is not None:
                if policy.fallback not in self.nodes or policy.fallback == name:
                    known = ", ".join(sorted(n for n in self._policies if n != name)) or "none"
                    raise ConfigError(
                        f"node {name!r} falls back to {policy.fallback!r}, which is "
                        f"{'itself' if policy.fallback == name else 'not a node of this graph'}. "
                        f"Add it with add_node first, or pick one of: {known}."
                    )
                routes[name] = [policy.fallback]
            if policy.critical:
                routes.setdefault(name, []).append(PARTIAL_RESULT)
        if any(PARTIAL_RESULT in t for t in routes.values()) and PARTIAL_RESULT not in self.nodes:
            StateGraph.add_node(self, PARTIAL_RESULT, partial_result)
            StateGraph.add_edge(self, PARTIAL_RESULT, END)
        for name, targets in routes.items():
            handler = self.nodes.get(f"__error_handler__{name}")
            if handler is not None:
                handler.ends = tuple(targets)
        self._routes = routes
        out_edges: dict[str, set[str]] = {}
        for source, target in self.edges:
            out_edges.setdefault(source, set()).add(target)
        self._terminal_nodes = frozenset(
            n
            for n, targets in out_edges.items()
            if targets == {END} and n not in self.branches and n != START
        )
        default_budget = Budget.coerce(budget, where="compile(budget=...)")
        compiled = super().compile(checkpointer, **kwargs)
        compiled.__class__ = ResilientCompiledStateGraph
        resilient = cast(ResilientCompiledStateGraph[StateT, ContextT, InputT, OutputT], compiled)
        defaults: dict[str, Any] = {DURABILITY_KEY: "sync"}
        if default_budget is not None:  # config["configurable"]["budget"] overrides it
            defaults[BUDGET_KEY] = default_budget
        return resilient.with_config(configurable=defaults)


def _name_of(action: NodeAction) -> str:
    # A runnable is named by its name; a function or a callable object by __name__.
    name = getattr(action, "name", None) or getattr(action, "__name__", None)
    if not isinstance(name, str):
        raise ConfigError(
            f"cannot name the node {action!r}: give it a name, add_node('name', action)"
        )
    return name


# ---------------------------------------------------------------------------
# retry_failed
# ---------------------------------------------------------------------------


def _retry_command(
    values: Mapping[str, Any], thread: str, update: Mapping[str, Any] | None
) -> Command[Any]:
    log = values.get("resilience") or {}
    failed = log.get("failed_step")
    if log.get("status") != "partial_complete" or not failed:
        raise RunStateError(
            f"thread {thread!r} has no failed step to retry (status: "
            f"{log.get('status', 'unknown')!r}); retry_failed is for runs that ended with "
            "a partial result"
        )
    reset: dict[str, Any] = {
        "status": "running",
        "failed_step": None,
        "partial_output": None,
        "recovery_suggestions": [],
    }
    return Command(goto=failed["node"], update={**(update or {}), "resilience": reset})


def _with_effect_scope(config: RunnableConfig, values: Mapping[str, Any]) -> RunnableConfig:
    """The config for re-running a failed step: its side effects keep their keys."""
    failed = (values.get("resilience") or {}).get("failed_step") or {}
    if not failed.get("task"):
        return config
    scope = {"node": failed["node"], "task": failed["task"]}
    return {**config, "configurable": {**config.get("configurable", {}), EFFECT_SCOPE_KEY: scope}}


def retry_failed(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    config: RunnableConfig,
    *,
    update: Mapping[str, Any] | None = None,
) -> dict[str, Any] | Any:
    """Re-run the step that ended a run with a partial result, and go on from there.

    Completed steps are not run again: their results are in the state. Pass
    ``update`` to correct the state first (the fix for a PERMANENT failure).

    Raises:
        RunStateError: the thread did not end with a partial result.

    Example:
        >>> out = retry_failed(graph, config, update={"query": "fixed"})  # doctest: +SKIP
    """
    values = graph.get_state(config).values
    command = _retry_command(values, config["configurable"]["thread_id"], update)
    return graph.invoke(command, _with_effect_scope(config, values))


async def aretry_failed(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    config: RunnableConfig,
    *,
    update: Mapping[str, Any] | None = None,
) -> dict[str, Any] | Any:
    """Async twin of `retry_failed`."""
    values = (await graph.aget_state(config)).values
    command = _retry_command(values, config["configurable"]["thread_id"], update)
    return await graph.ainvoke(command, _with_effect_scope(config, values))
