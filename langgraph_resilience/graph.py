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
from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from langgraph_resilience import state as run_log
from langgraph_resilience._node import NodeContext, is_async, wrap
from langgraph_resilience._routes import PARTIAL_RESULT, error_handler, partial_result
from langgraph_resilience._task import BUDGET_KEY, DURABILITY_KEY, EFFECT_SCOPE_KEY, current_attempt
from langgraph_resilience.budget import Budget
from langgraph_resilience.classify import Classifier
from langgraph_resilience.errors import ConfigError
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


class ResilientCompiledStateGraph(CompiledStateGraph):  # type: ignore[type-arg]
    """A compiled `ResilientStateGraph`: draws its failure routes in `get_graph()`."""

    def get_graph(self, config: RunnableConfig | None = None, *, xray: int | bool = False) -> Any:
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


class ResilientStateGraph(StateGraph):  # type: ignore[type-arg]
    """A `StateGraph` whose nodes answer failures by their `NodePolicy`.

    The state schema must extend `ResilientState`. Compiled graphs default to
    ``durability="sync"``, so task identities survive a crash.

    Example:
        >>> g = ResilientStateGraph(State)  # doctest: +SKIP
        >>> g.set_node_defaults(policy=NodePolicy(retry=Backoff(max_attempts=4)))
        >>> g.add_node("search", search, policy=NodePolicy(fallback="cache", critical=False))
    """

    def __init__(self, state_schema: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(state_schema, *args, **kwargs)
        self._policies: dict[str, NodePolicy | None] = {}
        self._default_policy: NodePolicy | None = None
        self._routes: dict[str, list[str]] = {}

    def set_node_defaults(self, *, policy: NodePolicy | None = _UNSET, **kwargs: Any) -> Any:
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
        self, node: Any, action: Any = None, *, policy: NodePolicy | None = _UNSET, **kwargs: Any
    ) -> Any:
        """LangGraph's `add_node`, plus ``policy=`` (default: the graph's default policy).

        Raises:
            ConfigError: ``policy`` is not a NodePolicy, or ``timeout`` on a sync node.
        """
        if action is None and not isinstance(node, str):
            node, action = getattr(node, "name", None) or node.__name__, node
        if policy is _UNSET:
            policy = self._default_policy
        elif policy is not None and not isinstance(policy, NodePolicy):
            raise ConfigError(f"policy for node {node!r} must be a NodePolicy, got {policy!r}")
        if policy is not None and policy.timeout is not None and not is_async(action):
            raise ConfigError(
                f"NodePolicy(timeout=...) on node {node!r} needs an async node: LangGraph "
                "cannot stop a running sync function. Make it `async def`, or drop the timeout."
            )
        self._policies[node] = policy
        if policy is not None:
            kwargs.setdefault("error_handler", error_handler(node))
        return super().add_node(node, self._wrap(node, action, policy), **kwargs)

    def _wrap(self, name: str, action: Any, policy: NodePolicy | None) -> Any:
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

    def compile(self, checkpointer: Any = None, *, budget: Any = None, **kwargs: Any) -> Any:
        """Compile; routes fallbacks and critical failures; defaults to ``durability="sync"``.

        ``budget``: the default `Budget` of every run (a run's
        ``config["configurable"]["budget"]`` overrides it).

        Raises:
            ConfigError: the state schema does not extend ResilientState, a
                fallback names a node that does not exist, or the budget is bad.
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
        defaults: dict[str, Any] = {DURABILITY_KEY: "sync"}
        if default_budget is not None:  # config["configurable"]["budget"] overrides it
            defaults[BUDGET_KEY] = default_budget
        return compiled.with_config(configurable=defaults)


# ---------------------------------------------------------------------------
# retry_failed
# ---------------------------------------------------------------------------


def _retry_command(
    values: Mapping[str, Any], thread: str, update: Mapping[str, Any] | None
) -> Command[Any]:
    log = values.get("resilience") or {}
    failed = log.get("failed_step")
    if log.get("status") != "partial_complete" or not failed:
        raise ConfigError(
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
    graph: Any, config: RunnableConfig, *, update: Mapping[str, Any] | None = None
) -> Any:
    """Re-run the step that ended a run with a partial result, and go on from there.

    Completed steps are not run again: their results are in the state. Pass
    ``update`` to correct the state first (the fix for a PERMANENT failure).

    Raises:
        ConfigError: the thread did not end with a partial result.

    Example:
        >>> out = retry_failed(graph, config, update={"query": "fixed"})  # doctest: +SKIP
    """
    values = graph.get_state(config).values
    command = _retry_command(values, config["configurable"]["thread_id"], update)
    return graph.invoke(command, _with_effect_scope(config, values))


async def aretry_failed(
    graph: Any, config: RunnableConfig, *, update: Mapping[str, Any] | None = None
) -> Any:
    """Async twin of `retry_failed`."""
    values = (await graph.aget_state(config)).values
    command = _retry_command(values, config["configurable"]["thread_id"], update)
    return await graph.ainvoke(command, _with_effect_scope(config, values))
