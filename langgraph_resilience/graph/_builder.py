"""`ResilientStateGraph`: LangGraph's `StateGraph` with per-node failure policies.

The builder wraps each node (`_node`: its tries under its `NodePolicy`), gives
each node with a policy an error handler that follows its routing signal
(`_routes`), adds the terminal ``partial_result`` node when a critical node may
give up, and compiles with ``durability="sync"`` by default. `retry_failed`
re-runs the step that ended a run with a partial result.

A node added without ``policy=`` runs under the graph's default policy: the
one ``set_node_defaults(policy=...)`` gave, else ``NodePolicy()`` (transient
failures retried, a failure for good ending in a partial result), unless it
carries LangGraph's own ``retry_policy`` or ``error_handler`` (its own or the
graph's ``set_node_defaults``): then, as with ``policy=None``, it keeps
LangGraph's behaviour, and its wrapper only records the step in the run log.

A run that stopped short (a critical step failed for good) runs nothing more:
a node due after it (a fan-in its siblings fed, a step beside the partial
result) is not run; its wrapper returns `_drivers.NOT_RUN`, and the compiled
graph holds that output's writes and edges (`_langgraph.hold_writes`), so the
task ends done with nothing written and nothing after it fires.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict, cast

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.graph import Graph
from langgraph.cache.base import BaseCache
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from langgraph.types import All, Checkpointer, StateSnapshot
from langgraph.typing import ContextT, InputT, OutputT, StateT
from typing_extensions import Self, Unpack

import langgraph_resilience.graph._closing as closing
import langgraph_resilience.graph._lifecycle as lifecycle
import langgraph_resilience.graph._tally as tally
import langgraph_resilience.graph._travel as travel
import langgraph_resilience.graph._upgrade as upgrade
import langgraph_resilience.state as run_log
from langgraph_resilience._engine import Action
from langgraph_resilience._keys import BUDGET_KEY, GRAPH_KEY
from langgraph_resilience._langgraph import (
    DURABILITY_KEY,
    ERROR_HANDLER_PREFIX,
    DefaultsHook,
    RunDefaults,
    coerce_to_runnable,
    default_cache_policy,
    hide_node,
    hold_writes,
)
from langgraph_resilience.budget import Budget
from langgraph_resilience.checkpoint import (
    AsyncRunLedger,
    RunLedger,
)
from langgraph_resilience.checkpoint.saver._base import thread_checked
from langgraph_resilience.classify import Classifier
from langgraph_resilience.errors import ConfigError, DeployBlocked
from langgraph_resilience.graph._by_hand import FixByHand
from langgraph_resilience.graph._cache import RunLogFreeCache, keyed_without_run_log
from langgraph_resilience.graph._drivers import NOT_RUN, is_async, wrap
from langgraph_resilience.graph._nested_stream import awatched, watched
from langgraph_resilience.graph._node import NodeAction, NodeContext
from langgraph_resilience.graph._routes import (
    PARTIAL_RESULT,
    ROUTES_NODE,
    give_up_of,
    partial_result,
    routes_node,
)
from langgraph_resilience.graph._slots import take_over
from langgraph_resilience.graph._versions import VERSION_KEY, Versioning
from langgraph_resilience.policy import NodePolicy

__all__ = ["ResilientCompiledStateGraph", "ResilientStateGraph"]

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


class ResilientCompiledStateGraph(FixByHand, DefaultsHook[StateT, ContextT, InputT, OutputT]):
    """A compiled `ResilientStateGraph`: draws its failure routes in `get_graph()`;
    each new input starts a new run, and a run with nothing left to do reads
    ``success`` (`_lifecycle`)."""

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config = thread_checked(config)  # a bad thread id: ConfigError, before any write
        config = upgrade.upgrade(self, config, input)  # a thread an older version stored: once
        config = travel.travel(self, input, config)  # from an older checkpoint: its keys
        lifecycle.note_resume(self, input, config)  # a resume after a crash: a recovery
        given, scope = tally.scoped(config, input)  # the run's tally, its steps' records
        run_config = take_over(given, self.config, is_async=False)  # a finished task's
        stream = super().stream(lifecycle.with_marker(input, config), run_config, **kwargs)
        # the run ledger: how it returned, or that it raised
        stream = closing.closing(self, input, config, stream, scope)
        return watched(stream)  # inside a step: a run that ended short fails it

    def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config = thread_checked(config)  # a bad thread id: ConfigError, before any write
        if upgrade.versioning_of(self).version is None and not travel.addressed(input, config):
            return self._astream(input, config, **kwargs)
        return self._upgraded_astream(input, config, **kwargs)

    async def _upgraded_astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Any:
        config = await upgrade.aupgrade(self, config, input)  # an older version's thread: once
        config = await travel.atravel(self, input, config)  # an older checkpoint: its keys
        async for chunk in self._astream(input, config, **kwargs):
            yield chunk

    def _astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        given, scope = tally.scoped(config, input)  # the run's tally, its steps' records
        run_config = take_over(given, self.config, is_async=True)  # writes wait for none
        stream = super().astream(lifecycle.with_marker(input, config), run_config, **kwargs)
        # the run ledger: how it returned, or that it raised
        stream = closing.aclosing(self, input, config, stream, scope)
        stream = lifecycle.anoted(self, input, config, stream)  # a resume after a crash
        return awatched(stream)  # inside a step: a run that ended short fails it

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config = thread_checked(config)  # a bad thread id: ConfigError, before any write
        given, scope = tally.scoped(config, input)  # shared with the stream it reads
        with closing.invoking(self, config):
            try:
                stored = tally.with_usage(super().invoke(input, given, **kwargs), scope)
            except DeployBlocked:
                raise  # nothing of the run was stored, nor is
            except Exception as exc:
                closing.failed(self, input, config, scope, exc)  # the run ledger: it raised
                raise
        lifecycle.ended(stored, config)  # nested in a step: a run that ended short fails it
        lifecycle.settle_by_hand(self, input, config)  # a Worker's paused run, resumed by hand
        found = None
        if self.checkpointer and lifecycle.to_settle(stored, config):
            found = self.get_state(config or {})
        out = lifecycle.settle_output(stored, config, found)
        closing.close_run(self, config, out, scope)
        return out

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config = thread_checked(config)  # a bad thread id: ConfigError, before any write
        given, scope = tally.scoped(config, input)  # shared with the stream it reads
        with closing.invoking(self, config):
            try:
                stored = tally.with_usage(await super().ainvoke(input, given, **kwargs), scope)
            except DeployBlocked:
                raise  # nothing of the run was stored, nor is
            except Exception as exc:
                await closing.afailed(self, input, config, scope, exc)  # the ledger: it raised
                raise
        lifecycle.ended(stored, config)  # nested in a step: a run that ended short fails it
        await lifecycle.asettle_by_hand(self, input, config)  # a Worker's paused run, by hand
        found = None
        if self.checkpointer and lifecycle.to_settle(stored, config):
            found = await self.aget_state(config or {})
        out = lifecycle.settle_output(stored, config, found)
        await closing.aclose_run(self, config, out, scope)
        return out

    def get_state(self, config: RunnableConfig, *, subgraphs: bool = False) -> StateSnapshot:
        snapshot = super().get_state(config, subgraphs=subgraphs)
        saver = self.checkpointer
        run = lifecycle.stored_run(snapshot, _head(config))
        if run is not None and isinstance(saver, RunLedger):  # its row says how it ended
            row = saver.history.run_row(*run)
            return lifecycle.with_stored(snapshot, None if row is None else row.status)
        listing = lifecycle.may_settle(snapshot)  # no ledger holds the run: its checkpoints
        if listing is None or not isinstance(saver, BaseCheckpointSaver):
            return lifecycle.settled(snapshot)  # nothing to look up
        where, before = listing
        return lifecycle.settled(snapshot, lifecycle.run_part(saver.list(where, before=before)))

    async def aget_state(self, config: RunnableConfig, *, subgraphs: bool = False) -> StateSnapshot:
        snapshot = await super().aget_state(config, subgraphs=subgraphs)
        saver = self.checkpointer
        run = lifecycle.stored_run(snapshot, _head(config))
        if run is not None and isinstance(saver, AsyncRunLedger):  # its row: how it ended
            row = await saver.history.arun_row(*run)
            return lifecycle.with_stored(snapshot, None if row is None else row.status)
        listing = lifecycle.may_settle(snapshot)  # no ledger holds the run: its checkpoints
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
            found = found._replace(cache=RunLogFreeCache(found.cache, policies))
        return found


def _head(config: RunnableConfig) -> bool:
    """Whether ``get_state`` reads the thread's latest checkpoint (no checkpoint
    asked for: not a time travel's look at an earlier one)."""
    return not (config.get("configurable") or {}).get("checkpoint_id")


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
        version: int | str | None = None,
        renames: Mapping[str, str] | None = None,
        migrations: Mapping[int | str, Callable[[dict[str, Any]], Mapping[str, Any]]] | None = None,
        **kwargs: Any,  # LangGraph's deprecated aliases (config_schema, input, output)
    ) -> None:
        """A `StateGraph` whose nodes take a `NodePolicy`.

        Args:
            version: this graph's version (an int or a str), stamped on every
                checkpoint it writes; a thread an older version stored is
                checked and upgraded once before it goes on (docs/deploying.md).
            renames: old node name -> new name, for threads an older version
                stored with that node pending (a task, an interrupt, a failed step).
            migrations: version -> ``fn(state) -> state``, run once, in version
                order, on a thread stored before that version.

        Raises:
            ConfigError: renames or migrations without a version, a migration
                keyed past the version, a rename cycle.
        """
        super().__init__(
            state_schema,
            context_schema,
            input_schema=input_schema,
            output_schema=output_schema,
            **kwargs,
        )
        self._policies: dict[str, NodePolicy | None] = {}
        self._default_policy: NodePolicy | None = NodePolicy()
        self._default_given = False  # set_node_defaults(policy=...) was called
        self._defaulted: set[str] = set()  # nodes whose policy is the graph's default
        self._langgraph_handles = False  # LangGraph's own retry_policy / error_handler default
        self._routes: dict[str, list[str]] = {}
        #: The nodes `ROUTES_NODE` handles the errors of, and where each gives up to.
        self._give_ups: dict[str, tuple[str, Action] | None] = {}
        self._actions: dict[str, NodeAction] = {}  # as given (a subgraph stays one)
        self._versioning = Versioning(
            version=version, renames=dict(renames or {}), migrations=dict(migrations or {})
        )

    def set_node_defaults(self, *, policy: NodePolicy | None = _UNSET, **kwargs: Any) -> Self:
        """LangGraph's node defaults, plus the default `NodePolicy` of nodes added after.

        Without it, a node added without ``policy=`` runs under ``NodePolicy()``;
        ``policy=None`` makes such nodes keep LangGraph's behaviour. A node that
        carries LangGraph's own ``retry_policy`` or ``error_handler`` (given to
        `add_node` or here, graph-wide) never gets the default policy: it keeps
        LangGraph's behaviour.

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
            self._default_given = True
        if kwargs.get("retry_policy") is not None or kwargs.get("error_handler") is not None:
            self._langgraph_handles = True  # applied at compile: `_keep_langgraph_defaults`
        return super().set_node_defaults(**kwargs) if kwargs else self

    def add_node(
        self,
        node: str | NodeAction,
        action: NodeAction | None = None,
        *,
        policy: NodePolicy | None = _UNSET,
        **kwargs: Any,
    ) -> Self:
        """LangGraph's `add_node`, plus ``policy=`` (default: the graph's default
        policy, ``NodePolicy()`` unless `set_node_defaults` gave another; none for
        a node given LangGraph's own ``retry_policy`` or ``error_handler``).

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
            own = any(kwargs.get(k) is not None for k in ("retry_policy", "error_handler"))
            policy = None if own else self._default_policy  # LangGraph's own: kept
            if policy is not None:
                self._defaulted.add(name)
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
        if policy is not None and "error_handler" not in kwargs:  # a handler of its own: kept
            self._give_ups[name] = give_up_of(policy.fallback, policy.critical)
        if kwargs.get("cache_policy") is not None:  # the run log differs in every run
            kwargs["cache_policy"] = keyed_without_run_log(kwargs["cache_policy"])
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

    def _keep_langgraph_defaults(self) -> None:
        """Nodes under the graph's default policy keep LangGraph's behaviour
        instead when `set_node_defaults` gave LangGraph's own ``retry_policy``
        or ``error_handler`` (applied by LangGraph at compile, after add_node):
        LangGraph's tries and the policy's would multiply, and its handler
        would never run."""
        if not self._langgraph_handles:
            return
        for name in sorted(self._defaulted):
            self._give_ups.pop(name, None)
            self._rewrap(name, None)
        self._defaulted.clear()

    def _rewrap(self, name: str, policy: NodePolicy | None) -> None:
        self._policies[name] = policy
        self.nodes[name].runnable = coerce_to_runnable(
            self._wrap(name, self._actions[name], policy), name=name, trace=False
        )

    def _guard_fallbacks(self) -> None:
        """A fallback node without a policy of its own (``policy=None``, or the
        implicit ``NodePolicy()``) gets a critical one of one try: if the
        fallback fails too, the run ends with a partial result instead of the
        raw error escaping (no retry: it runs because another failed)."""
        targets = {p.fallback for p in self._policies.values() if p is not None and p.fallback}
        implicit = set() if self._default_given else self._defaulted
        for name in sorted(targets):
            spec = self.nodes.get(name)
            if spec is None:
                continue
            if name in implicit:  # its handler already ends in a partial result
                self._rewrap(name, NodePolicy(retry=None))
                continue
            if self._policies.get(name) is not None or spec.error_handler_node:
                continue
            policy = NodePolicy(retry=None)
            self._rewrap(name, policy)
            self._give_ups[name] = give_up_of(None, policy.critical)

    def _add_routes_node(self, routes: Mapping[str, list[str]]) -> None:
        """The one error handler of every node with a policy (`error_handler`),
        its ends every target the failures route to (for LangGraph's drawing and
        `Command` checks). Compiling again replaces it."""
        self.nodes.pop(ROUTES_NODE, None)
        if not self._give_ups:
            return
        self.nodes[ROUTES_NODE] = routes_node(self._give_ups, routes, self.state_schema)
        for name in self._give_ups:
            self.nodes[name].error_handler_node = ROUTES_NODE

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
        self._keep_langgraph_defaults()
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
        for name, targets in routes.items():  # a handler of the node's own
            handler = self.nodes.get(f"{ERROR_HANDLER_PREFIX}{name}")
            if handler is not None:
                handler.ends = tuple(targets)
        self._add_routes_node(routes)
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
                    self.nodes[name].cache_policy = keyed_without_run_log(default_cache)
        compiled = super().compile(checkpointer, **kwargs)
        hold_writes(compiled, list(self._policies), NOT_RUN)  # a step not run writes nothing
        # Ours: not in the user's streamed updates. A parent streaming this
        # graph's "updates" learns its failed step from `partial_result`'s.
        hide_node(compiled, ROUTES_NODE)
        compiled.__class__ = ResilientCompiledStateGraph
        resilient = cast(ResilientCompiledStateGraph[StateT, ContextT, InputT, OutputT], compiled)
        defaults: dict[str, Any] = {
            DURABILITY_KEY: "sync",
            GRAPH_KEY: kwargs.get("name") or "LangGraph",
        }
        if default_budget is not None:  # config["configurable"]["budget"] overrides it
            defaults[BUDGET_KEY] = default_budget
        if self._versioning.version is None:
            return resilient.with_config(configurable=defaults)
        stamp = {VERSION_KEY: self._versioning.version}  # on every checkpoint it writes
        return resilient.with_config(configurable=defaults, metadata=stamp)


def _name_of(action: NodeAction) -> str:
    # A runnable is named by its name; a function or a callable object by __name__.
    name = getattr(action, "name", None) or getattr(action, "__name__", None)
    if not isinstance(name, str):
        raise ConfigError(
            f"cannot name the node {action!r}: give it a name, add_node('name', action)"
        )
    return name
