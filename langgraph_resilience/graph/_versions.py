"""Graph versions: what a thread stored by an older version needs to go on (pure, no I/O).

A `ResilientStateGraph(State, version=2, renames={"review": "approve"},
migrations={2: add_priority})` stamps its version on every checkpoint it writes
(the checkpoint's metadata, `VERSION_KEY`). A thread whose latest checkpoint
carries an older version (or none: a graph before versions) is planned here,
then upgraded once (`graph._upgrade`), before the run goes on:

- every node the stored checkpoint has pending (an edge's trigger, a ``Send``,
  an interrupted task) or names as its failed step must be a node of this graph,
  directly or through ``renames``; otherwise the thread is **blocked**;
- a thread stored by another version is blocked when its state lacks a field
  this version's state schema requires (`required_fields`) and no migration is
  due to add it
  (`required_fields`, `missing_fields`; with a migration due, the upgrade checks
  the migrated state), when a step its run degraded (its node was not critical)
  is of a node this version makes critical (the run would go on past a failure
  this version ends at), or when a task that would run again recorded a side
  effect no side effect of this version is named (its key would change, and the
  effect would be called again);
- the migrations of every version after the stored one, up to this one, run in
  version order on the state (each ``fn(state) -> state``);
- the rewritten checkpoint keeps its id, so its pending writes (an interrupt,
  the finished branches of its step) stay its own.

`plan` decides; `rewrite` applies a plan to a checkpoint's channels. Both take
plain data, so ``check_deploy`` runs the same decision over every stored thread
without running anything.
"""

from __future__ import annotations

import copy
import dataclasses
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, get_args, get_origin

from typing_extensions import Required, get_type_hints

from langgraph_resilience._keys import GRAPH_VERSION_META, MIGRATED_META
from langgraph_resilience._langgraph import BRANCH_PREFIX, TASKS_CHANNEL
from langgraph_resilience.errors import ConfigError

__all__ = [
    "MIGRATED_KEY",
    "VERSION_KEY",
    "Plan",
    "Versioning",
    "define_effect",
    "defined_effects",
    "missing_fields",
    "node_of",
    "pending_nodes",
    "plan",
    "required_fields",
    "rewrite",
]

#: The checkpoint metadata key holding the graph version that wrote it.
VERSION_KEY = GRAPH_VERSION_META
#: The metadata key of an upgraded checkpoint: from, to, the migrations that ran,
#: the nodes renamed. Written in the same write that stamps the new version, so
#: a migration runs once.
MIGRATED_KEY = MIGRATED_META

Version = int | str
Migration = Callable[[dict[str, Any]], Mapping[str, Any]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Versioning:
    """A graph's version, its renames of older nodes and its state migrations.

    Attributes:
        version: this graph's version (an int or a str), or None (no versions: as before).
        renames: old node name -> its name in this version (chains are followed).
        migrations: version -> ``fn(state) -> state``, run on a thread stored
            before that version, in version order.
    """

    version: Version | None = None
    renames: Mapping[str, str] = dataclasses.field(default_factory=dict)
    migrations: Mapping[Version, Migration] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        v = self.version
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | str)):
            raise ConfigError(f"version must be an int or a str (or None), got {v!r}")
        if (self.renames or self.migrations) and v is None:
            raise ConfigError(
                "renames= and migrations= describe what changed since an older version: "
                "give the graph a version too, e.g. ResilientStateGraph(State, version=2, ...)"
            )
        for old, new in self.renames.items():
            if not isinstance(old, str) or not isinstance(new, str) or not old or not new:
                raise ConfigError(
                    f"renames maps an old node name to its new one (str -> str), got {old!r}: "
                    f"{new!r}"
                )
            if old == new:
                raise ConfigError(f"renames maps {old!r} to itself; leave it out")
        seen: set[str] = set()
        for old in self.renames:
            name, hops = old, 0
            while name in self.renames:
                name, hops = self.renames[name], hops + 1
                if name in seen or hops > len(self.renames):
                    raise ConfigError(f"renames has a cycle through {old!r}: {dict(self.renames)}")
            seen.clear()
        for key, fn in self.migrations.items():
            if type(key) is not type(v):
                raise ConfigError(
                    f"migrations are keyed by the version they lead to, of the graph's "
                    f"version type ({type(v).__name__}): got {key!r}"
                )
            if not callable(fn):
                raise ConfigError(f"migrations[{key!r}] must be a function state -> state")
            if v is not None and _after(key, v):
                raise ConfigError(
                    f"migrations[{key!r}] leads past this graph's version {v!r}: a migration "
                    "is keyed by the version whose state it makes"
                )

    def name_of(self, node: str) -> str:
        """A stored node's name in this version (itself, or where renames lead)."""
        hops = 0
        while node in self.renames and hops <= len(self.renames):
            node, hops = self.renames[node], hops + 1
        return node

    def due(self, stored: Version | None) -> tuple[Version, ...]:
        """The migrations a thread stored at ``stored`` needs, in version order."""
        if self.version is None or stored == self.version:
            return ()
        keys = sorted(self.migrations, key=_order)
        return tuple(k for k in keys if stored is None or _after(k, stored))


def _order(v: Version) -> tuple[int, Any]:
    return (0, v) if isinstance(v, int) else (1, v)


def _after(a: Version, b: Version) -> bool:
    """Whether version ``a`` comes after ``b`` (ints by value, strs as written)."""
    if type(a) is not type(b):
        return False
    return a > b  # type: ignore[operator]  # same type: both int or both str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    """What a stored thread needs under this graph version.

    Attributes:
        stored: the version that stored it (None: unversioned).
        version: this graph's version.
        migrations: the migrations to run, in order.
        renamed: stored node name -> new name, for the nodes it has pending.
        blocked: why it cannot go on (empty: it can).
    """

    stored: Version | None
    version: Version | None
    migrations: tuple[Version, ...] = ()
    renamed: Mapping[str, str] = dataclasses.field(default_factory=dict)
    blocked: tuple[str, ...] = ()

    @property
    def changes(self) -> bool:
        """Whether the stored checkpoint is rewritten (a migration, a rename or a new version)."""
        return not self.blocked and (
            bool(self.migrations) or bool(self.renamed) or self.stored != self.version
        )


def pending_nodes(checkpoint: Mapping[str, Any]) -> frozenset[str]:
    """The nodes a stored checkpoint has due: triggered edges and pending ``Send``\\ s."""
    values = checkpoint.get("channel_values") or {}
    versions = checkpoint.get("channel_versions") or {}
    seen = checkpoint.get("versions_seen") or {}
    due: set[str] = set()
    cut = len(BRANCH_PREFIX)
    for channel in values:
        if not channel.startswith(BRANCH_PREFIX):
            continue
        node = channel[cut:]
        got = (seen.get(node) or {}).get(channel)
        if got is None or _newer(versions.get(channel), got):
            due.add(node)
    for send in values.get(TASKS_CHANNEL) or ():
        target = getattr(send, "node", None)
        if isinstance(target, str):
            due.add(target)
    return frozenset(due)


def _newer(a: Any, b: Any) -> bool:
    """Whether channel version ``a`` is past ``b`` (LangGraph's are strs or ints)."""
    if a is None:
        return False
    if type(a) is type(b):
        return bool(a > b)
    return str(a) > str(b)


def plan(
    versioning: Versioning,
    *,
    stored: Version | None,
    pending: Iterable[str],
    failed_node: str | None,
    nodes: Iterable[str],
    missing: Iterable[str] = (),
    degraded: Iterable[str] = (),
    critical: Iterable[str] = (),
    effects: Iterable[str] = (),
    effect_names: Iterable[str] | None = None,
) -> Plan:
    """The plan for a thread stored at ``stored`` with these nodes pending.

    Args:
        versioning: this graph's version, renames and migrations.
        stored: the version of the thread's latest checkpoint (None: unversioned).
        pending: the nodes it has due (`pending_nodes`), and any interrupted one.
        failed_node: the node of its failed step, when it ended with a partial result.
        nodes: the nodes of this graph.
        missing: the fields this graph's state requires that the stored state
            lacks (`missing_fields`).
        degraded: the paths of the steps its run degraded (a non-critical failure).
        critical: the nodes of this graph that are critical (`NodePolicy.critical`).
        effects: the names of the side effects the tasks that would run again
            recorded.
        effect_names: the names of this version's side effects (None: not checked).
    """
    known = set(nodes)
    renamed: dict[str, str] = {}
    blocked: list[str] = []
    named = sorted(set(pending) | ({failed_node} if failed_node else set()))
    for node in named:
        new = versioning.name_of(node)
        if new not in known:
            what = "failed step" if node == failed_node else "pending task"
            via = f" (renamed to {new!r})" if new != node else ""
            blocked.append(
                f"its {what} {node!r}{via} is not a node of this graph and no rename maps it"
            )
        elif new != node:
            renamed[node] = new
    if stored != versioning.version and not versioning.due(stored):
        lacks = sorted(set(missing))
        if lacks:
            fields = ", ".join(repr(f) for f in lacks)
            blocked.append(
                f"its state lacks {fields}, which this version's state requires, and no "
                f"migration adds it (add migrations={{{versioning.version!r}: fn}} that sets it)"
            )
    now_critical = set(critical)
    for path in sorted(set(degraded)):
        node = versioning.name_of(node_of(path))
        if node in now_critical:
            blocked.append(
                f"its step {path!r} was degraded (its node was not critical) and {node!r} is "
                "critical in this version: the run would go on past a failure this version "
                "ends at (finish it on the old version, or keep the node critical=False)"
            )
    if effect_names is not None:
        known = set(effect_names)
        for name in sorted(set(effects) - known):
            blocked.append(
                f"a task that would run again recorded the side effect {name!r}, which no side "
                "effect of this version is named: a renamed effect gets a new key and would be "
                f"called again (keep its key with @side_effect(name={name!r}))"
            )
    if (
        versioning.version is not None
        and stored is not None
        and type(stored) is type(versioning.version)
        and _after(stored, versioning.version)
    ):
        blocked.append(f"it was stored by a newer version ({stored!r})")
    return Plan(
        stored=stored,
        version=versioning.version,
        migrations=versioning.due(stored) if not blocked else (),
        renamed=renamed,
        blocked=tuple(blocked),
    )


def node_of(path: str) -> str:
    """The node of a step's path (``work[2]`` -> ``work``, ``research/fetch`` -> ``research``)."""
    return path.split("/", 1)[0].split("[", 1)[0].split("#", 1)[0]


#: Side effect name -> its decorated functions, while they live: the side effects
#: of the code this process imported (`side_effect` adds each). A recorded
#: effect's name that is none of them was renamed (or removed) by a deploy. A set
#: per name, not one function: two definitions may share a name (two versions of
#: a graph built side by side), and one of them dying must not forget the other.
_DEFINED: dict[str, weakref.WeakSet[Any]] = {}


def define_effect(name: str, fn: Any) -> None:
    """Note a side effect defined under ``name`` (`side_effect` calls it)."""
    _DEFINED.setdefault(name, weakref.WeakSet()).add(fn)


def defined_effects() -> frozenset[str]:
    """The names of the side effects defined by the code this process imported."""
    return frozenset(name for name, fns in list(_DEFINED.items()) if len(fns))


def required_fields(schema: Any) -> frozenset[str]:
    """The fields a state schema requires: a pydantic model's or a dataclass's
    fields without a default (LangGraph builds the model for every node, so it
    refuses a state without them), a TypedDict's keys marked ``Required[...]``.

    A TypedDict's keys required only by ``total=True`` are not counted: LangGraph
    takes partial states, and a graph's nodes commonly write such keys as they go.
    """
    fields = getattr(schema, "model_fields", None)
    if isinstance(fields, Mapping):  # pydantic
        return frozenset(k for k, f in fields.items() if f.is_required())
    if dataclasses.is_dataclass(schema):
        return frozenset(
            f.name
            for f in dataclasses.fields(schema)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
    if not hasattr(schema, "__required_keys__"):
        return frozenset()
    try:
        hints = get_type_hints(schema, include_extras=True)
    except Exception:  # a forward reference it cannot resolve: nothing known
        return frozenset()
    return frozenset(k for k, hint in hints.items() if _marked_required(hint))


def _marked_required(hint: Any) -> bool:
    if get_origin(hint) is Annotated:
        hint = get_args(hint)[0]
    return get_origin(hint) is Required


def missing_fields(checkpoint: Mapping[str, Any], required: Iterable[str]) -> frozenset[str]:
    """The ``required`` fields a stored checkpoint has no value for (a channel it
    never wrote: a value stored apart, as Postgres keeps blobs, still has its
    version in the checkpoint)."""
    values = checkpoint.get("channel_values") or {}
    versions = checkpoint.get("channel_versions") or {}
    return frozenset(f for f in required if f not in values and f not in versions)


def rewrite(
    checkpoint: Mapping[str, Any],
    the_plan: Plan,
    versioning: Versioning,
    *,
    state_keys: Iterable[str],
    next_version: Callable[[Any], Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The checkpoint under the plan, and the new versions of the channels it changed.

    Renames move the stored node's trigger channel, its versions seen and its
    pending ``Send``\\ s to the new name; migrations run on the state (the
    checkpoint's values of ``state_keys``) in order; a changed channel gets a new
    version (``next_version(old)``), so the saver stores its new value.

    Raises:
        ConfigError: a migration raised or returned something other than a mapping
            (its message names the version).
    """
    out = dict(checkpoint)
    values = dict(checkpoint.get("channel_values") or {})
    versions = dict(checkpoint.get("channel_versions") or {})
    seen = {k: dict(v) for k, v in (checkpoint.get("versions_seen") or {}).items()}
    updated = list(checkpoint.get("updated_channels") or [])
    changed: dict[str, Any] = {}
    for old, new in the_plan.renamed.items():
        was, now = f"{BRANCH_PREFIX}{old}", f"{BRANCH_PREFIX}{new}"
        if was in values:
            values[now] = values.pop(was)
        if was in versions:
            versions[now] = versions.pop(was)
            changed[now] = versions[now]
        if old in seen:
            seen[new] = {(now if c == was else c): v for c, v in seen.pop(old).items()}
        updated = [now if c == was else c for c in updated]
    sends = values.get(TASKS_CHANNEL)
    if sends and any(getattr(s, "node", None) in the_plan.renamed for s in sends):
        values[TASKS_CHANNEL] = [_renamed_send(s, the_plan.renamed) for s in sends]
        versions[TASKS_CHANNEL] = next_version(versions.get(TASKS_CHANNEL))
        changed[TASKS_CHANNEL] = versions[TASKS_CHANNEL]
    keys = [k for k in state_keys if not k.startswith(BRANCH_PREFIX)]
    state = {k: values[k] for k in keys if k in values}
    for key in the_plan.migrations:
        fn = versioning.migrations[key]
        try:
            got = fn(
                copy.deepcopy(state)
            )  # a migration that mutates in place changes nothing stored
        except Exception as exc:
            raise ConfigError(
                f"the migration to version {key!r} raised {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(got, Mapping):
            raise ConfigError(
                f"the migration to version {key!r} returned {type(got).__name__}; it must "
                "return the state (a dict)"
            )
        state = dict(got)
    for k in keys:
        if k in state and (k not in values or _differs(values[k], state[k])):
            values[k] = state[k]
            versions[k] = next_version(versions.get(k))
            changed[k] = versions[k]
            if k not in updated:
                updated.append(k)
        elif k not in state and k in values:
            del values[k]
    outcome = values.get("resilience")
    failed = outcome.get("failed_step") if isinstance(outcome, Mapping) else None
    if (
        isinstance(outcome, Mapping)
        and isinstance(failed, Mapping)
        and failed.get("node") in the_plan.renamed
    ):
        old = str(failed["node"])
        new = the_plan.renamed[old]
        path = str(failed.get("path") or old)
        moved = {
            **failed,
            "node": new,
            "path": new + path[len(old) :] if path.startswith(old) else path,
        }
        values["resilience"] = {**outcome, "failed_step": moved}
        versions["resilience"] = next_version(versions.get("resilience"))
        changed["resilience"] = versions["resilience"]
    out.update(channel_values=values, channel_versions=versions, versions_seen=seen)
    if "updated_channels" in checkpoint or updated:
        out["updated_channels"] = updated
    return out, changed


def _differs(a: Any, b: Any) -> bool:
    if a is b:
        return False
    try:
        return bool(a != b)
    except Exception:  # a value without a usable ==: store the migration's
        return True


def _renamed_send(send: Any, renamed: Mapping[str, str]) -> Any:
    node = getattr(send, "node", None)
    if not isinstance(node, str) or node not in renamed:
        return send
    return type(send)(renamed[node], send.arg)
