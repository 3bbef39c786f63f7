"""The one door to LangGraph's private internals.

Every name the package needs from LangGraph that LangGraph does not publish (the
``__pregel_*`` config keys, the reserved write channels, the ``branch:to:``
prefix, private classes and functions) is read here, and nowhere else. Each is
taken from LangGraph's own module where it has one, so an upgrade that renames
or moves it fails at import, naming this module, instead of silently changing
what a node reads or what the store counts; the few LangGraph spells inline
(the task metadata keys, the error handler's node name) are spelled here once.
``tests/test_langgraph_door.py`` pins every name against the installed LangGraph
and fails if any other module names one.

What each is for:

- config keys of a task's ``configurable`` (read by `graph._task.TaskContext`,
  set by the graph builder): the graph's saver (`CHECKPOINTER_KEY`), whether the
  run goes on from a checkpoint (`RESUMING_KEY`), the `Runtime` with its
  ``execution_info`` (`RUNTIME_KEY`), the durability mode (`DURABILITY_KEY`),
  the two keys that say a graph runs inside a parent's task
  (`TASK_ID_KEY`, `SCRATCHPAD_KEY`), and how a node's function calls a
  functional ``@task`` (`CALL_KEY`: the test kit taps the tasks it calls);
- a task's metadata keys (`NODE_KEY`, `STEP_KEY`, `PATH_KEY`) and the head of
  a `Send` task's path (`SEND_PATH`);
- the write channels a run's history is read from: `INTERRUPT_CHANNEL`,
  `RESUME_CHANNEL`, `ERROR_CHANNEL`, `ERROR_SOURCE_CHANNEL` (an error that goes
  to the node's error handler), `TASKS_CHANNEL` (a `Send`), `BRANCH_PREFIX`
  (the channels of the edges a step routes on), and `NULL_TASK_ID` (the task
  id of writes no task made: the input's);
- a task's namespace (``checkpoint_ns``): `NS_SEP` between its levels
  (``graph|subgraph``), `NS_END` between a level's node and task id
  (``node:<task id>``);
- the node LangGraph adds for ``add_node(..., error_handler=...)``: named
  `ERROR_HANDLER_PREFIX` and the node's name;
- private callables: `coerce_to_runnable` and `RunnableCallable` (how LangGraph
  wraps a node, so a wrapped node behaves as LangGraph's own), `StateNodeSpec`
  (a node's entry in ``StateGraph.nodes``), `DeltaSnapshot` (a channel
  value that `PostgresSaver.put` stores as a blob), and `langgraph_config`
  (LangGraph's ``ensure_config``: the config a run sees, with the configurable's
  ``run_id`` copied into its metadata, which LangGraph's re-entry rule reads);
- a compiled node's writers (the writes of its output and of the edges out of
  it): `hold_writes` makes a node whose output is a given marker write nothing;
  a compiled node's tags: `hide_node` tags it ``langsmith:hidden``, which keeps
  its output out of ``stream_mode="updates"`` (as LangGraph's own ``__start__``)
  and fire none of its edges (a step that did not run: `graph._drivers.NOT_RUN`);
- private attributes and hooks of LangGraph's classes: `default_cache_policy`
  (a builder's ``set_node_defaults(cache_policy=...)``), `DefaultsHook` (a
  compiled graph that changes what a run starts with: ``Pregel._defaults``),
  `route_cursor` (a Postgres saver's cursor: its ``_cursor``, `CURSOR_HOOK`),
  `check_pg_rows` (each row a Postgres saver reads: its ``_load_checkpoint_tuple``),
  `dump_pg_blobs` and `dump_pg_writes` (the rows `PostgresSaver` stores);
- `pull_task_id`: the id LangGraph gives a node's task of a checkpoint's next
  step (how a renamed node keeps the effect keys of its old name's task);
- `handed_writes`: in a checkpoint save LangGraph's loop runs in the background
  (``_checkpointer_put_after_previous``), the tasks whose writes the loop has
  handed to its saver so far (``PregelLoop._written_task_ids``): the test kit
  holds the save until those writes are stored, as LangGraph does not.

A hook LangGraph calls by a private name is overridden here, once, and handed on
under a name of ours (`DefaultsHook._run_defaults`, a saver's ``_open_cursor``),
so the subclasses elsewhere never spell LangGraph's.
"""

from __future__ import annotations

import binascii
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph._internal import _constants
from langgraph._internal._config import ensure_config as langgraph_config
from langgraph._internal._runnable import RunnableCallable, coerce_to_runnable
from langgraph.cache.base import BaseCache
from langgraph.checkpoint.base import BaseCheckpointSaver, ChannelVersions
from langgraph.checkpoint.serde.types import _DeltaSnapshot as DeltaSnapshot
from langgraph.constants import TAG_HIDDEN
from langgraph.graph import StateGraph
from langgraph.graph._node import StateNodeSpec
from langgraph.graph.state import _CHANNEL_BRANCH_TO, CompiledStateGraph
from langgraph.pregel import _algo as lg_algo
from langgraph.pregel import _write as lg_write
from langgraph.pregel._loop import PregelLoop
from langgraph.store.base import BaseStore
from langgraph.types import CachePolicy, Durability
from langgraph.typing import ContextT, InputT, OutputT, StateT

if TYPE_CHECKING:  # the postgres extra: the door is typed against it, never imports it
    from langgraph.checkpoint.postgres.base import BasePostgresSaver

__all__ = [
    "BRANCH_PREFIX",
    "CALL_KEY",
    "triggers_none",
    "CHECKPOINTER_KEY",
    "CURSOR_HOOK",
    "DURABILITIES",
    "DURABILITY_KEY",
    "DefaultsHook",
    "DeltaSnapshot",
    "ERROR_CHANNEL",
    "ERROR_HANDLER_PREFIX",
    "ERROR_SOURCE_CHANNEL",
    "INTERRUPT_CHANNEL",
    "NODE_KEY",
    "NS_END",
    "NS_SEP",
    "NULL_TASK_ID",
    "PATH_KEY",
    "RESUME_CHANNEL",
    "RESUMING_KEY",
    "RUNTIME_KEY",
    "RunDefaults",
    "RunnableCallable",
    "SCRATCHPAD_KEY",
    "SEND_PATH",
    "STEP_KEY",
    "StateNodeSpec",
    "TASKS_CHANNEL",
    "TASK_ID_KEY",
    "coerce_to_runnable",
    "default_cache_policy",
    "langgraph_config",
    "dump_pg_blobs",
    "dump_pg_writes",
    "hide_node",
    "handed_writes",
    "hold_writes",
    "pull_task_id",
    "route_cursor",
    "check_pg_rows",
]

# -- config keys (config["configurable"]) ----------------------------------------------
CHECKPOINTER_KEY = _constants.CONFIG_KEY_CHECKPOINTER  # the saver (a subgraph gets its parent's)
RESUMING_KEY = _constants.CONFIG_KEY_RESUMING  # the run goes on from a checkpoint
RUNTIME_KEY = _constants.CONFIG_KEY_RUNTIME  # a langgraph.runtime.Runtime, with execution_info
DURABILITY_KEY = _constants.CONFIG_KEY_DURABILITY  # "sync" | "async" | "exit"
#: LangGraph's durability modes (`langgraph.types.Durability`'s values).
DURABILITIES: tuple[Durability, ...] = ("sync", "async", "exit")
# Set in the config of a task: a graph called with either runs inside a parent's task.
TASK_ID_KEY = _constants.CONFIG_KEY_TASK_ID
SCRATCHPAD_KEY = _constants.CONFIG_KEY_SCRATCHPAD
# How a running task calls a functional ``@task``: call(func, (args, kwargs), **options).
CALL_KEY = _constants.CONFIG_KEY_CALL

# -- a task's metadata (config["metadata"]) ----------------------------------------------
# LangGraph spells these inline (pregel's task preparation); its savers list them
# among the metadata keys they do not store, which the door's test pins.
NODE_KEY = "langgraph_node"
STEP_KEY = "langgraph_step"
PATH_KEY = "langgraph_path"  # (SEND_PATH, index, ...) for a Send branch
SEND_PATH = _constants.PUSH

# -- write channels ------------------------------------------------------------------------
INTERRUPT_CHANNEL = _constants.INTERRUPT
RESUME_CHANNEL = _constants.RESUME
ERROR_CHANNEL = _constants.ERROR
ERROR_SOURCE_CHANNEL = _constants.ERROR_SOURCE_NODE
TASKS_CHANNEL = _constants.TASKS
BRANCH_PREFIX = _CHANNEL_BRANCH_TO.format("")
NULL_TASK_ID = _constants.NULL_TASK_ID

# The channels that trigger a node when updated: a StateGraph's edges and
# ``Command(goto=)`` (``branch:to:<node>``), a waiting edge's barrier
# (``join:<starts>:<node>``), a ``Send`` (the tasks channel), and the input
# (``__start__``: a StateGraph's first node, an ``@entrypoint``).
_TRIGGERS = (BRANCH_PREFIX, "join:", TASKS_CHANNEL, "__start__")


def triggers_none(checkpoint: Mapping[str, Any]) -> bool:
    """Whether a checkpoint leaves no task to run: the channels its step updated
    (LangGraph's ``updated_channels``) trigger no node (so its run's ``next``
    is empty). False when the checkpoint does not say (an older one)."""
    updated = checkpoint.get("updated_channels")
    if updated is None:
        return False
    return not any(str(c).startswith(_TRIGGERS) for c in updated)


# -- a task's namespace (checkpoint_ns) ------------------------------------------------------
NS_SEP = _constants.NS_SEP  # between levels: "graph|subgraph"
NS_END = _constants.NS_END  # between a level's node and its task id: "node:<task id>"

# -- nodes -------------------------------------------------------------------------------
# LangGraph spells it inline (StateGraph.add_node); the door's test pins it.
ERROR_HANDLER_PREFIX = "__error_handler__"

# -- private attributes and hooks of LangGraph's classes ---------------------------------

C = TypeVar("C", bound=type)
#: The method through which LangGraph's Postgres savers open every cursor.
CURSOR_HOOK = "_cursor"


def default_cache_policy(graph: StateGraph[Any, Any, Any, Any]) -> CachePolicy[Any] | None:
    """The cache policy ``graph.set_node_defaults`` gave every node (None if none)."""
    policy: CachePolicy[Any] | None = graph._node_defaults.cache_policy
    return policy


class RunDefaults(NamedTuple):
    """What a run of a compiled graph starts with, as LangGraph resolved it from
    the graph, the call's arguments and the config."""

    checkpointer: BaseCheckpointSaver[Any] | None
    store: BaseStore | None
    cache: BaseCache[Any] | None
    durability: Durability


class DefaultsHook(CompiledStateGraph[StateT, ContextT, InputT, OutputT]):
    """A compiled graph that may change what a run starts with.

    LangGraph resolves a run's saver, store, cache and durability in the private
    ``Pregel._defaults``, and has no public hook for it: this class overrides it
    once and asks `_run_defaults` (``kwargs``: the call's own arguments).
    """

    def _run_defaults(
        self, config: RunnableConfig, kwargs: Mapping[str, Any], found: RunDefaults
    ) -> RunDefaults:
        return found

    def _defaults(self, config: RunnableConfig, **kwargs: Any) -> Any:
        *head, checkpointer, store, cache, durability = super()._defaults(config, **kwargs)
        found = RunDefaults(checkpointer, store, cache, durability)
        return (*head, *self._run_defaults(config, kwargs, found))


class _HeldChannelWrite(lg_write.ChannelWrite):
    """LangGraph's `ChannelWrite` (how a node's output and its edges are
    written), writing nothing for an output that is ``held``."""

    held: object = None

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return input if input is self.held else super().invoke(input, config, **kwargs)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        if input is self.held:
            return input
        return await super().ainvoke(input, config, **kwargs)


#: The attribute by which LangGraph marks a runnable as a writer (a conditional
#: edge's), holding the writes it declares for drawings (`register_writer`).
WRITER_MARK = "_is_channel_writer"


def _held(writer: Any, held: object) -> Any:
    if isinstance(writer, lg_write.ChannelWrite):
        gated = _HeldChannelWrite(writer.writes, tags=writer.tags)
        gated.held = held
        return gated
    static: Any = getattr(writer, WRITER_MARK, _NOT_A_WRITER)
    if static is _NOT_A_WRITER:
        return writer  # not one of LangGraph's writers: left as it is

    def route(input: Any, config: RunnableConfig) -> Any:
        return input if input is held else writer.invoke(input, config)

    async def aroute(input: Any, config: RunnableConfig) -> Any:
        return input if input is held else await writer.ainvoke(input, config)

    gated_branch = RunnableCallable(route, aroute, name=None, trace=False)
    return lg_write.ChannelWrite.register_writer(gated_branch, static)


_NOT_A_WRITER = object()


def hide_node(graph: CompiledStateGraph[Any, Any, Any, Any], name: str) -> None:
    """Keep node ``name`` of the compiled ``graph`` out of the streamed updates
    and interrupts of ``"*"`` (LangGraph's hidden tag); its writes are stored as
    any node's."""
    node = graph.nodes.get(name)
    if node is not None:
        node.tags = [*(node.tags or ()), TAG_HIDDEN]
        for cached in ("node",):  # LangGraph's cached property of it
            node.__dict__.pop(cached, None)


def hold_writes(
    graph: CompiledStateGraph[Any, Any, Any, Any], nodes: Sequence[str], held: object
) -> None:
    """Each of ``nodes`` of the compiled ``graph``, when its output is ``held``,
    writes nothing and fires none of its edges (static, joined or conditional):
    the task ends as done with no writes, as a node that returned nothing and had
    no edges. Any other output is written as LangGraph writes it."""
    for name in nodes:
        node = graph.nodes.get(name)
        if node is None:
            continue
        writers = list(node.writers)
        # Merged as LangGraph's `flat_writers` merges them (consecutive writes at
        # the end: the output's and the static edges'), so its merge, which makes
        # a plain ChannelWrite, finds nothing left to merge.
        while (
            len(writers) > 1
            and isinstance(writers[-1], lg_write.ChannelWrite)
            and isinstance(writers[-2], lg_write.ChannelWrite)
        ):
            writers[-2] = lg_write.ChannelWrite(writes=writers[-2].writes + writers[-1].writes)
            writers.pop()
        node.writers = [_held(w, held) for w in writers]
        for cached in ("flat_writers", "node"):  # LangGraph's cached properties of them
            node.__dict__.pop(cached, None)


def route_cursor(cls: C) -> C:
    """A class decorator: ``cls._open_cursor`` becomes the cursor that every query
    of the LangGraph Postgres saver ``cls`` subclasses opens (its `CURSOR_HOOK`)."""
    setattr(cls, CURSOR_HOOK, cls.__dict__["_open_cursor"])
    return cls


LOAD_HOOK = "_load_checkpoint_tuple"


def check_pg_rows(check: Callable[[Any], Any]) -> Callable[[C], C]:
    """A class decorator: each row of ``SELECT_SQL`` that the LangGraph Postgres saver
    ``cls`` subclasses reads (``get_tuple``, ``list``, sync or async) passes through
    ``check`` before LangGraph decodes it (its `LOAD_HOOK`)."""

    def decorate(cls: C) -> C:
        load = getattr(cls, LOAD_HOOK)
        if inspect.iscoroutinefunction(load):

            async def aload(self: Any, value: Any) -> Any:
                return await load(self, check(value))

            setattr(cls, LOAD_HOOK, aload)
        else:
            setattr(cls, LOAD_HOOK, lambda self, value: load(self, check(value)))
        return cls

    return decorate


def dump_pg_blobs(
    saver: BasePostgresSaver,
    thread_id: str,
    checkpoint_ns: str,
    values: dict[str, Any],
    versions: ChannelVersions,
) -> list[tuple[str, str, str, str, str, bytes | None]]:
    """The ``checkpoint_blobs`` rows `PostgresSaver` stores for a checkpoint's values."""
    return saver._dump_blobs(thread_id, checkpoint_ns, values, versions)


def dump_pg_writes(
    saver: BasePostgresSaver,
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    task_id: str,
    task_path: str,
    writes: Sequence[tuple[str, Any]],
) -> list[tuple[str, str, str, str, str, int, str, str, bytes]]:
    """The ``checkpoint_writes`` rows `PostgresSaver` stores for a task's writes."""
    return saver._dump_writes(thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, writes)


def pull_task_id(
    checkpoint: Mapping[str, Any], *, ns: str, step: int, name: str, triggers: Sequence[str]
) -> str:
    """The id LangGraph gives the task of node ``name`` run at ``step`` from this
    checkpoint (``prepare_single_task``: a PULL task, keyed by its sorted triggers)."""
    func = lg_algo._xxhash_str if checkpoint["v"] > 1 else lg_algo._uuid5_str
    task_ns = f"{ns}{NS_SEP}{name}" if ns else name
    raw = binascii.unhexlify(str(checkpoint["id"]).replace("-", ""))
    return func(raw, task_ns, str(step), name, _constants.PULL, *sorted(triggers))


#: The loop's method that saves a checkpoint in the background (after the previous one).
_PUT_AFTER_PREVIOUS = "_checkpointer_put_after_previous"


def handed_writes() -> frozenset[str] | None:
    """Called inside a saver's ``put``/``aput``: when LangGraph's loop makes the
    call (its background save), the ids of the tasks whose writes it has handed
    to the saver's ``put_writes`` so far in this run (each handed to a
    background thread or task, not necessarily stored yet); None for a put made
    another way, or under durability ``"exit"`` (its writes go with the last save)."""
    frame = sys._getframe(1)
    for _ in range(16):  # the save's frame is a few calls up (the saver's own wrappers)
        if frame.f_code.co_name == _PUT_AFTER_PREVIOUS:
            loop = frame.f_locals.get("self")
            if isinstance(loop, PregelLoop) and loop.durability != "exit":
                return frozenset(loop._written_task_ids)
            return None
        if frame.f_back is None:
            return None
        frame = frame.f_back
    return None
