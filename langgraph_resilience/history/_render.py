"""How a `RunReport` is drawn: the graph in Mermaid, coloured by what happened
to each node, and the text form for terminals (pure)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

__all__ = ["NODE_STATUSES", "clock", "mermaid", "node_statuses", "seconds"]

#: What can have happened to a node in a run, and its colours (fill, stroke).
NODE_STATUSES: dict[str, tuple[str, str]] = {
    "completed": ("#d4edda", "#28a745"),
    "retried": ("#fff3cd", "#d39e00"),
    "fallback": ("#cfe2ff", "#0d6efd"),
    "degraded": ("#ffe5d0", "#fd7e14"),
    "failed": ("#f8d7da", "#dc3545"),
    "not_reached": ("#eeeeee", "#999999"),
}
_ENDS = ("__start__", "__end__")


def top_node(path: str) -> str:
    """The top-level node of a step path (``research/fetch#2`` -> ``research``)."""
    return re.split(r"[/\[#]", path, maxsplit=1)[0]


def node_statuses(steps: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """What happened to each top-level node: the last record of a node decides
    failed, degraded or fallback; a node that needed more than one try (or ran
    again after a recovery) is retried; otherwise completed."""
    found: dict[str, list[Mapping[str, Any]]] = {}
    for step in steps:
        found.setdefault(top_node(str(step.get("path") or "")), []).append(step)
    statuses = {}
    for node, records in found.items():
        last = str(records[-1].get("status") or "completed")
        if last in ("failed", "degraded", "fallback"):
            statuses[node] = last
        elif any(int(r.get("attempts") or 1) > 1 or r.get("kinds") for r in records) or (
            len({str(r.get("path")) for r in records}) < len(records)
        ):
            statuses[node] = "retried"
        else:
            statuses[node] = "completed" if last == "completed" else last
    return statuses


def _id(name: str) -> str:
    return "n_" + re.sub(r"\W", "_", name)


def _label(name: str, status: str | None, tries: int) -> str:
    text = name.replace('"', "#quot;")
    if status is None:
        return text
    more = f" ({tries} tries)" if tries > 1 else ""
    return f"{text}<br/><small>{status.replace('_', ' ')}{more}</small>"


def mermaid(
    nodes: Sequence[str],
    edges: Sequence[tuple[str, str, str | None, bool]],
    statuses: Mapping[str, str],
    tries: Mapping[str, int],
) -> str:
    """A Mermaid flowchart: ``nodes`` in order, ``edges`` (source, target, label,
    conditional), each node classed by its status (`NODE_STATUSES`)."""
    lines = ["flowchart TD"]
    for name in nodes:
        if name in _ENDS:
            lines.append(f'    {_id(name)}(["{name.strip("_")}"])')
            continue
        status = statuses.get(name, "not_reached")
        lines.append(f'    {_id(name)}["{_label(name, status, tries.get(name, 0))}"]:::{status}')
    for source, target, label, conditional in edges:
        arrow = "-.->" if conditional else "-->"
        text = f"|{label.replace('|', '/')}|" if label else ""
        lines.append(f"    {_id(source)} {arrow}{text} {_id(target)}")
    for status, (fill, stroke) in NODE_STATUSES.items():
        dash = ",stroke-dasharray:4 3" if status == "not_reached" else ""
        lines.append(f"    classDef {status} fill:{fill},stroke:{stroke}{dash}")
    return "\n".join(lines) + "\n"


def drawn(graph: Any) -> tuple[list[str], list[tuple[str, str, str | None, bool]]]:
    """The nodes and edges of a compiled graph (``get_graph()``) or of its drawing."""
    drawing = graph.get_graph() if hasattr(graph, "get_graph") else graph
    nodes = [str(n) for n in drawing.nodes]
    edges = [
        (
            str(e.source),
            str(e.target),
            None if e.data is None else str(e.data),
            bool(e.conditional),
        )
        for e in drawing.edges
    ]
    return nodes, edges


def seen(steps: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[tuple[str, str, None, bool]]]:
    """Without a graph: the nodes the run reached, in order, one after another."""
    order = sorted(steps, key=lambda s: float(s.get("started_at") or 0.0))
    nodes: list[str] = []
    for step in order:
        name = top_node(str(step.get("path") or ""))
        if name not in nodes:
            nodes.append(name)
    chain = ["__start__", *nodes, "__end__"] if nodes else []
    return chain, [(a, b, None, False) for a, b in itertools.pairwise(chain)]


def clock(at: float | None) -> str:
    """An epoch time as UTC clock time with milliseconds ("-" if unknown)."""
    if at is None:
        return "-"
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S.%f")[:-3]


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"
