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
from dataclasses import replace
from typing import Any, TypedDict, cast

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.graph import Graph
from langgraph.cache.base import BaseCache, FullKey, Namespace
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from langgraph.types import All, CachePolicy, Checkpointer, StateSnapshot
from langgraph.typing import ContextT, InputT, OutputT, StateT
from typing_extensions import Self, Unpack

import langgraph_resilience.graph._lifecycle as lifecycle
import langgraph_resilience.state as run_log
from langgraph_resilience._langgraph import (
    DURABILITY_KEY,
    ERROR_HANDLER_PREFIX,
    DefaultsHook,
    RunDefaults,
    StateNodeSpec,
    coerce_to_runnable,
    default_cache_policy,
)
from langgraph_resilience.budget import Budget
from langgraph_resilience.classify import Classifier
from langgraph_resilience.errors import ConfigError
from langgraph_resilience.graph._drivers import is_async, wrap
from langgraph_resilience.graph._node import NodeAction, NodeContext
from langgraph_resilience.graph._retry_failed import aretry_failed, retry_failed
from langgraph_resilience.graph._routes import (
    PARTIAL_RESULT,
    error_handler,
    give_up_of,
    partial_result,
)
from langgraph_resilience.graph._task import BUDGET_KEY, current_attempt
from langgraph_resilience.policy import NodePolicy
from langgraph_resilience.telemetry._emit import GRAPH_KEY

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


class ResilientCompiledStateGraph(DefaultsHook[StateT, ContextT, InputT, OutputT]):
    """A compiled `ResilientStateGraph`: draws its failure routes in `get_graph()`;
    each new input starts a new run, and a run with nothing left to do reads
    ``success`` (`_lifecycle`)."""

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        lifecycle.note_resume(self, input, config)  # a resume after a crash: a recovery
        return super().stream(lifecycle.with_marker(input, config), config, **kwargs)

    def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        stream = super().astream(lifecycle.with_marker(input, config), config, **kwargs)
        return lifecycle.anoted(self, input, config, stream)  # a resume after a crash

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        out = super().invoke(input, config, **kwargs)
        read = lambda: self.get_state(config or {}) if self.checkpointer else None  # noqa: E731
        return lifecycle.settle_output(out, config, read)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        out = await super().ainvoke(input, config, **kwargs)
        found = None
        if self.checkpointer and lifecycle.settle_output(out, config, lambda: None) is not out:
            found = await self.aget_state(config or {})
        return lifecycle.settle_output(out, config, lambda: found)

    def get_state(self, config: RunnableConfig, *, subgraphs: bool = False) -> StateSnapshot:
        snapshot = super().get_state(config, subgraphs=subgraphs)
        listing, saver = lifecycle.may_settle(snapshot), self.checkpointer
        if listing is None or not isinstance(saver, BaseCheckpointSaver):
            return lifecycle.settled(snapshot)  # nothing to look up
        where, before = listing
        return lifecycle.settled(snapshot, lifecycle.run_part(saver.list(where, before=before)))

    async def aget_state(self, config: RunnableConfig, *, subgraphs: bool = False) -> StateSnapshot:
        snapshot = await super().aget_state(config, subgraphs=subgraphs)
        listing, saver = lifecycle.may_settle(snapshot), self.checkpointer
        if listing is None or not isinstance(saver, BaseCheckpointSaver):
            return lifecycle.settled(snapshot)
        earlier = await lifecycle.arun_part(saver.alist(listing[0], before=listing[1]))
        return lifecycle.settled(snapshot, earlier)

    def get_graph(self, config: RunnableConfig | None = None, *, xray: int | bool = False) -> Graph:
        return self._with_routes(super().get_graph(config, xray=xray))

    async def aget_graph(
        self, config: RunnableConfig | None = None, *, xray: int | bool = False
    ) -> Graph:
        return self._with_routes(await super().aget_graph(config, xray=xray))

    def _with_routes(self, drawing: Graph) -> Graph:
        """LangGraph's drawing, with the failure routes in place of the error handlers.

        An xray drawing draws a subgraph node as the subgraph's nodes
        (``sub:fetch``; a resilient subgraph drew its own routes): the node's
        routes leave from the subgraph's last nodes and enter at its first
        ones, as LangGraph draws the node's own edges.
        """
        handlers = [
            n for n in drawing.nodes if n.rpartition(":")[2].startswith(ERROR_HANDLER_PREFIX)
        ]
        for name in handlers:
            drawing.remove_node(drawing.nodes[name])
        firsts: dict[str, list[str]] = {}
        lasts: dict[str, list[str]] = {}
        for name in self.nodes:
            prefix = f"{name}:"
            if name in drawing.nodes or not any(n.startswith(prefix) for n in drawing.nodes):
                continue  # drawn as one node
            for end in (START, END):  # left when LangGraph cannot trim them (a subgraph
                if prefix + end in drawing.nodes:  # with a partial_result has two last nodes)
                    _bypass(drawing, prefix + end)
            inner = [n for n in drawing.nodes if n.startswith(prefix)]
            entered, left = set(), set()  # inner nodes with an edge in / out
            entered_from_outside, left_to_outside = set(), set()
            for e in drawing.edges:
                source_in, target_in = e.source.startswith(prefix), e.target.startswith(prefix)
                if source_in and target_in:
                    entered.add(e.target)
                    left.add(e.source)
                elif target_in:
                    entered_from_outside.add(e.target)
                elif source_in:
                    left_to_outside.add(e.source)
            firsts[name] = [n for n in inner if n not in entered or n in entered_from_outside]
            lasts[name] = [n for n in inner if n not in left or n in left_to_outside]
        drawn = {(e.source, e.target) for e in drawing.edges}

        def connect(source: str, target: str, label: str | None, conditional: bool) -> None:
            for s in [source] if source in drawing.nodes else lasts.get(source, []):
                for t in [target] if target in drawing.nodes else firsts.get(target, []):
                    if (s, t) not in drawn:
                        drawn.add((s, t))
                        drawing.add_edge(drawing.nodes[s], drawing.nodes[t], label, conditional)

        routes: dict[str, list[str]] = getattr(self.builder, "_routes", {})
        for source, targets in routes.items():
            for target in targets:
                label = "on failure" if target != PARTIAL_RESULT else "gives up"
                connect(source, target, label, True)
        # LangGraph draws the edges of the nodes a run reaches through edges; a
        # node only a failure route reaches (a fallback, partial_result) has
        # none drawn: draw its own.
        for source, target in sorted(self.builder.edges):
            if source != START:
                connect(source, target, None, False)
        for source, branches in self.builder.branches.items():
            for branch in branches.values():
                for key, target in (branch.ends or {}).items():
                    connect(source, target, None if key == target else str(key), True)
        return drawing

    def _run_defaults(
        self, config: RunnableConfig, kwargs: Mapping[str, Any], found: RunDefaults
    ) -> RunDefaults:
        # LangGraph has no public per-graph durability default (no compile
        # parameter or attribute; `with_config` takes none), so `compile` sets
        # the private config key. A "sync" run waits after each step for a
        # checkpoint write that a run without a saver never makes (AttributeError
        # `_put_checkpoint_fut`): such a run, and its subgraphs, drop the
        # default. A durability passed to invoke/stream, or in the config, wins.
        configurable = config.get("configurable") or {}
        if (
            found.checkpointer is None
            and kwargs.get("durability") is None
            and configurable.get(DURABILITY_KEY) == "sync"
        ):
            del configurable[DURABILITY_KEY]
            found = found._replace(durability="async")  # LangGraph's default
        if found.cache is not None:
            policies = frozenset(getattr(self.builder, "_policies", ()))
            found = found._replace(cache=_RunLogFreeCache(found.cache, policies))
        return found


_RUN_LOG = "resilience"


def _bypass(drawing: Graph, node: str) -> None:
    """Remove ``node`` from the drawing, joining each edge into it to each edge out."""
    ins = [e for e in drawing.edges if e.target == node and e.source != node]
    outs = [e for e in drawing.edges if e.source == node and e.target != node]
    drawing.remove_node(drawing.nodes[node])
    drawn = {(e.source, e.target) for e in drawing.edges}
    for i in ins:
        for o in outs:
            if (i.source, o.target) not in drawn:
                drawn.add((i.source, o.target))
                data = o.data if o.data is not None else i.data
                conditional = i.conditional or o.conditional
                drawing.add_edge(
                    drawing.nodes[i.source], drawing.nodes[o.target], data, conditional
                )


def _keyed_without_run_log(policy: CachePolicy[Any]) -> CachePolicy[Any]:
    """``policy``, its cache key taken on the node's input without the run log
    (``resilience``: times and counts that differ in every run)."""
    key: Callable[..., str | bytes] = policy.key_func
    if getattr(key, "_lgr_without_run_log", False):
        return policy

    def key_func(*args: Any, **kwargs: Any) -> str | bytes:
        if args and isinstance(args[0], Mapping) and _RUN_LOG in args[0]:
            args = ({k: v for k, v in args[0].items() if k != _RUN_LOG}, *args[1:])
        return key(*args, **kwargs)

    key_func._lgr_without_run_log = True  # type: ignore[attr-defined]
    return replace(policy, key_func=key_func)


class _RunLogFreeCache(BaseCache[Any]):
    """A run's node cache, holding no run log.

    A node's writes carry its run-log update (``resilience``: its step record,
    times, usage, budget). Cached with them, a hit would write another run's
    log into this one; cached without, a hit writes the node's output only, as
    on a plain `StateGraph` (and the run log does not record the hit). A
    degraded step (a failure skipped) is not cached: the next run tries again.
    """

    def __init__(self, cache: BaseCache[Any], nodes: frozenset[str]) -> None:
        super().__init__(serde=cache.serde)
        self.cache = cache
        self.nodes = nodes  # the wrapped nodes, whose writes carry a run log

    def _ours(self, key: FullKey) -> bool:
        ns = key[0]  # (the writes namespace, the node's identifier, its name)
        return len(ns) == 3 and ns[2] in self.nodes

    def _stored(
        self, pairs: Mapping[FullKey, tuple[Any, int | None]]
    ) -> dict[FullKey, tuple[Any, int | None]]:
        kept: dict[FullKey, tuple[Any, int | None]] = {}
        for key, (writes, ttl) in pairs.items():
            if not self._ours(key):
                kept[key] = (writes, ttl)
            elif not any(
                c == _RUN_LOG and isinstance(v, Mapping) and v.get("degraded_steps")
                for c, v in writes
            ):
                kept[key] = ([(c, v) for c, v in writes if c != _RUN_LOG], ttl)
        return kept

    def _found(self, found: dict[FullKey, Any]) -> dict[FullKey, Any]:
        return {
            k: [(c, v) for c, v in w if c != _RUN_LOG] if self._ours(k) else w
            for k, w in found.items()
        }

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        return self._found(self.cache.get(keys))

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        return self._found(await self.cache.aget(keys))

    def set(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        if kept := self._stored(pairs):
            self.cache.set(kept)

    async def aset(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        if kept := self._stored(pairs):
            await self.cache.aset(kept)

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        self.cache.clear(namespaces)

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        await self.cache.aclear(namespaces)


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
        self._actions: dict[str, NodeAction] = {}  # as given (a subgraph stays one)

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
        if policy is not None and kwargs.get("retry_policy") is not None:
            raise ConfigError(
                f"node {name!r} has both a NodePolicy and LangGraph's retry_policy=: their "
                "tries would multiply (each of LangGraph's retries runs the policy's). Give "
                "the retries in NodePolicy(retry=Backoff(...)) and drop retry_policy=, or "
                "add the node with policy=None to keep LangGraph's own."
            )
        if policy is not None and policy.timeout is not None and not is_async(action):
            raise ConfigError(
                f"NodePolicy(timeout=...) on node {name!r} needs an async node: LangGraph "
                "cannot stop a running sync function. Make it `async def`, or drop the timeout."
            )
        self._policies[name] = policy
        self._actions[name] = action
        if policy is not None:
            give_up = give_up_of(policy.fallback, policy.critical)
            kwargs.setdefault("error_handler", error_handler(name, give_up))
        if kwargs.get("cache_policy") is not None:  # the run log differs in every run
            kwargs["cache_policy"] = _keyed_without_run_log(kwargs["cache_policy"])
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

    def _guard_fallbacks(self) -> None:
        """A fallback node added without a policy gets a critical one: if the
        fallback fails too, the run ends with a partial result instead of the
        raw error escaping (one try, no retry: it runs because another failed)."""
        targets = {p.fallback for p in self._policies.values() if p is not None and p.fallback}
        for name in sorted(targets):
            spec = self.nodes.get(name)
            if spec is None or self._policies.get(name) is not None or spec.error_handler_node:
                continue
            policy = NodePolicy(retry=None)
            self._policies[name] = policy
            spec.runnable = coerce_to_runnable(
                self._wrap(name, self._actions[name], policy), name=name, trace=False
            )
            handler = f"{ERROR_HANDLER_PREFIX}{name}"
            self.nodes[handler] = StateNodeSpec(
                coerce_to_runnable(
                    error_handler(name, give_up_of(None, policy.critical)),
                    name=handler,
                    trace=False,
                ),
                metadata=None,
                input_schema=spec.input_schema,
                retry_policy=None,
                cache_policy=None,
                is_error_handler=True,
            )
            spec.error_handler_node = handler

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
        self._guard_fallbacks()
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
            handler = self.nodes.get(f"{ERROR_HANDLER_PREFIX}{name}")
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
        default_cache = default_cache_policy(self)
        if default_cache is not None:  # our nodes key it without the run log, as in add_node
            for name in self._policies:
                if self.nodes[name].cache_policy is None:
                    self.nodes[name].cache_policy = _keyed_without_run_log(default_cache)
        compiled = super().compile(checkpointer, **kwargs)
        compiled.__class__ = ResilientCompiledStateGraph
        resilient = cast(ResilientCompiledStateGraph[StateT, ContextT, InputT, OutputT], compiled)
        defaults: dict[str, Any] = {
            DURABILITY_KEY: "sync",
            GRAPH_KEY: kwargs.get("name") or "LangGraph",
        }
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
