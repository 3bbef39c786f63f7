"""The console's pages as HTML text (pure): every value from the store goes
through `esc`, so a thread id or step summary holding HTML shows as text."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any
from urllib.parse import urlencode

from langgraph_resilience.checkpoint.runlog._run_log_reads import RunLogRecord
from langgraph_resilience.graph._routes import PARTIAL_RESULT
from langgraph_resilience.history import RecoveryMetrics, RunReport
from langgraph_resilience.history._metrics import COUNTS, METRICS
from langgraph_resilience.history._render import clock, drawn, node_statuses, seen, top_node
from langgraph_resilience.server._facts import RunFacts

__all__ = ["esc", "metrics_page", "page", "run_page", "runs_page"]

#: The run statuses the runs page filters on.
RUN_STATUSES = ("running", "paused", "success", "partial_complete", "error", "cancelled")
PROBLEMS = ("partial_complete", "error")
_ENDS = ("__start__", "__end__")


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def status(value: str) -> str:
    return f'<span class="status st-{esc(value)}">{esc(value.replace("_", " "))}</span>'


def page(title: str, body: str, *, base: str, tab: str, actions: bool, flash: str = "") -> str:
    tabs = "".join(
        f'<a href="{base}/{href}" class="{"on" if tab == name else ""}">{name}</a>'
        for name, href in (("Runs", "runs"), ("Metrics", "metrics"))
    )
    mode = "actions allowed" if actions else "read-only"
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)} · resilience console</title>"
        f'<link rel="stylesheet" href="{base}/static/console.css">'
        f'<script src="{base}/static/console.js" defer></script></head><body>'
        f"<header><strong>langgraph-resilience</strong>{tabs}"
        f'<span class="mode">{mode}</span></header><main>{flash}<h1>{esc(title)}</h1>'
        f"{body}</main></body></html>"
    )


def flash_of(message: str | None, ok: bool) -> str:
    if not message:
        return ""
    return f'<div class="flash{"" if ok else " bad"}" id="flash">{esc(message)}</div>'


def _link(base: str, path: str, **params: Any) -> str:
    query = urlencode({k: v for k, v in params.items() if v not in (None, "")}, doseq=True)
    return f"{base}/{path}" + (f"?{query}" if query else "")


def runs_page(
    rows: Sequence[RunLogRecord],
    *,
    base: str,
    statuses: Sequence[str],
    thread: str,
    problems_first: bool,
    next_cursor: str | None,
    marks: Mapping[tuple[str, int], Sequence[str]] | None = None,
) -> str:
    """The runs table, newest first (partial and error runs first with ``problems_first``);
    each run's graph version and ``marks`` (recovered, degraded, stale, blocked)."""
    if problems_first:
        rows = sorted(rows, key=lambda r: r.status not in PROBLEMS)  # stable: newest first
    boxes = "".join(
        f'<label><input type="checkbox" name="status" value="{s}"'
        f"{' checked' if s in statuses else ''}> {status(s)}</label> "
        for s in RUN_STATUSES
    )
    form = (
        f'<form method="get" action="{base}/runs">{boxes}'
        f'<label>thread <input name="thread" value="{esc(thread)}"></label> '
        f'<label><input type="checkbox" name="problems" value="1"'
        f"{' checked' if problems_first else ''}> partial and errors first</label> "
        "<button>Filter</button></form>"
    )
    lines = []
    for r in rows:
        href = _link(base, "run", thread=r.thread_id, run=r.run)
        used = ", ".join(f"{k} {v:.4g}" for k, v in r.used().items())
        marked = tuple((marks or {}).get((r.thread_id, r.run), ()))
        badges = "".join(f' <span class="mark mk-{esc(m)}">{esc(m)}</span>' for m in marked)
        lines.append(
            f'<tr class="run" data-status="{esc(r.status)}" data-marks="{esc(" ".join(marked))}">'
            f'<td><a href="{esc(href)}">'
            f"{esc(r.thread_id)}</a></td><td>{r.run}</td><td>{status(r.status)}{badges}</td>"
            f"<td>{esc(clock(r.started_at))}</td><td>{esc(clock(r.ended_at))}</td>"
            f"<td>{esc(r.failed_step or '')}</td><td>{esc(used)}</td>"
            f"<td>{esc(r.worker or '')}</td><td>{esc(r.run_id or '')}</td>"
            f'<td class="version">{esc(r.graph_version or "")}</td></tr>'
        )
    table = (
        '<table id="runs"><tr><th>thread</th><th>run</th><th>status</th><th>started (UTC)</th>'
        "<th>ended</th><th>failed step</th><th>usage</th><th>worker</th><th>run id</th>"
        "<th>version</th></tr>"
        + ("".join(lines) or '<tr><td colspan="10" class="muted">no runs</td></tr>')
        + "</table>"
    )
    more = ""
    if next_cursor:
        href = _link(
            base,
            "runs",
            status=list(statuses),
            thread=thread,
            before=next_cursor,
            problems="1" if problems_first else "",
        )
        more = f'<a id="older" href="{esc(href)}">older runs →</a>'
    return form + table + more


def graph_svg(
    nodes: Sequence[str],
    edges: Sequence[tuple[str, str, str | None, bool]],
    statuses: Mapping[str, str],
    redone: set[str],
) -> str:
    """The graph drawn top to bottom: one box per node, coloured by how it ended,
    an edge to the next node straight, any other as an arc on the right."""
    w, h, gap = 220, 34, 22
    y = {name: 10 + i * (h + gap) for i, name in enumerate(nodes)}
    parts = []
    for i, (src, dst, label, conditional) in enumerate(edges):
        if src not in y or dst not in y:
            continue
        x0, y0, y1 = 10 + w // 2, y[src] + h, y[dst]
        dash = ' stroke-dasharray="4 3"' if conditional else ""
        if y1 == y0 + gap:
            d = f"M{x0},{y0} L{x0},{y1}"
        else:
            bend = w + 30 + (i % 4) * 14
            x1, mid = 10 + w, h // 2
            d = f"M{x1},{y[src] + mid} C{bend},{y[src]} {bend},{y1 + h} {x1},{y1 + mid}"
        title = f"<title>{esc(label)}</title>" if label else ""
        parts.append(f'<path d="{d}" fill="none" stroke="#888"{dash}>{title}</path>')
    for name in nodes:
        state = "end" if name in _ENDS else statuses.get(name, "not_reached")
        mark = " redone" if name in redone else ""
        text = name.strip("_") if name in _ENDS else name
        shown = f"{text} · {state.replace('_', ' ')}" if name not in _ENDS else text
        if name in redone:
            shown += " · redone"
        parts.append(
            f'<g class="node st-{esc(state)}{mark}" data-node="{esc(name)}" '
            f'data-status="{esc(state)}"><rect x="10" y="{y[name]}" width="{w}" height="{h}" '
            f'rx="6" class="st-{esc(state)}"/><text x="{10 + w // 2}" y="{y[name] + 21}" '
            f'text-anchor="middle">{esc(shown)}</text></g>'
        )
    height = 20 + len(nodes) * (h + gap)
    return (
        f'<svg id="graph" width="{w + 110}" height="{height}" role="img">'
        "<style>rect.st-completed{fill:#d4edda;stroke:#28a745}"
        "rect.st-retried{fill:#fff3cd;stroke:#d39e00}rect.st-fallback{fill:#cfe2ff;stroke:#0d6efd}"
        "rect.st-degraded{fill:#ffe5d0;stroke:#fd7e14}rect.st-failed{fill:#f8d7da;stroke:#dc3545}"
        "rect.st-not_reached{fill:#eee;stroke:#999;stroke-dasharray:4 3}"
        "rect.st-waiting{fill:#e0cffc;stroke:#6610f2}"
        "rect.st-end{fill:#fff;stroke:#555}g.redone rect{stroke:#6f42c1;stroke-width:3}</style>"
        + "".join(parts)
        + "</svg>"
    )


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], ident: str) -> str:
    if not rows:
        return '<p class="muted">none</p>'
    top = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table id="{ident}"><tr>{top}</tr>{body}</table>'


def _button(
    base: str,
    action: str,
    label: str,
    fields: Mapping[str, str],
    token: str,
    ask: str,
    extra: str = "",
) -> str:
    hidden = "".join(
        f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">' for k, v in fields.items()
    )
    return (
        f'<form class="inline" method="post" action="{base}/actions/{action}" '
        f'data-confirm="{esc(ask)}"><input type="hidden" name="csrf" value="{esc(token)}">'
        f'{hidden}{extra}<button id="{action}">{esc(label)}</button></form>'
    )


def _anchor(path: str) -> str:
    return "step-" + "".join(c if c.isalnum() else "-" for c in path)


def _nesting(path: str, paths: Sequence[str]) -> str:
    """Links from a nested step (``agent/model``) to its parent step, and from a
    parent to the steps run inside it."""
    links = []
    parent = path.rpartition("/")[0]
    if parent and parent in paths:
        links.append(f'<a class="parent" href="#{_anchor(parent)}">↑ in {esc(parent)}</a>')
    inner = [p for p in paths if p.rpartition("/")[0] == path]
    links += [f'<a class="nested" href="#{_anchor(p)}">↓ {esc(p)}</a>' for p in inner]
    return f'<a id="{_anchor(path)}"></a>' + (" " + " ".join(links) if links else "")


def _facts_html(facts: RunFacts) -> str:
    """The run's version, error, blocked reasons and question (the answer box follows)."""
    parts = [f'<p>graph version <code id="version">{esc(facts.graph_version or "none")}</code></p>']
    if facts.error:
        parts.append(f'<p class="flash bad" id="error">ended on {esc(facts.error)}</p>')
    if facts.blocked:
        why = "".join(f"<li>{esc(b)}</li>" for b in facts.blocked)
        parts.append(
            '<div class="flash bad" id="blocked">blocked: the console\'s graph cannot take '
            f"this thread<ul>{why}</ul></div>"
        )
    if facts.questions:
        asked = "".join(
            f"<pre>{esc(json.dumps(q, default=str, indent=1))}</pre>" for q in facts.questions
        )
        where = ", ".join(facts.waiting) or "?"
        parts.append(
            f'<div id="question"><strong>waiting in {esc(where)}, asks:</strong>{asked}</div>'
        )
    return "".join(parts)


def _input_html(facts: RunFacts) -> str:
    if facts.task_spec is None:
        return ""
    shown = json.dumps(facts.task_spec, default=repr, indent=1)
    return f'<h2>Input</h2><pre id="input">{esc(shown)}</pre>'


def run_page(
    report: RunReport,
    *,
    base: str,
    graph: Any,
    token: str | None,
    facts: RunFacts | None = None,
) -> str:
    """One run: its facts, graph, steps, timeline, effects, usage and budget,
    outcome, actions."""
    facts = facts or RunFacts()
    steps = [asdict(s) for s in report.steps]
    statuses = node_statuses(steps)
    if report.status == "partial_complete":  # the run ended in its partial result node
        statuses.setdefault(PARTIAL_RESULT, "completed")
    for node in facts.waiting:
        statuses[node] = "waiting"
    redone = {top_node(s.path) for s in report.steps if s.redone}
    last = [{"path": n, "started_at": float("inf")} for n in facts.waiting]  # drawn last
    nodes, edges = drawn(graph) if graph is not None else seen([*steps, *last])
    head = (
        f'<p>thread <code id="thread">{esc(report.thread_id)}</code> · run {report.run} of '
        f'{report.runs_on_thread} · <span id="run-status">{status(report.status)}</span>'
        f" · started {esc(clock(report.started_at))} · ended {esc(clock(report.ended_at))}</p>"
    )
    if report.runs_on_thread > 1:
        head += " ".join(
            f'<a href="{esc(_link(base, "run", thread=report.thread_id, run=n))}">run {n}</a>'
            for n in range(1, report.runs_on_thread + 1)
        )
    paths = [s.path for s in report.steps]
    step_rows = [
        [
            f'<span class="{"redone" if s.redone else ""}">{esc(s.path)}</span>'
            + _nesting(s.path, paths),
            status(s.status)
            + (' <span class="status badge-redone">redone</span>' if s.redone else ""),
            str(s.attempts),
            esc(", ".join(s.kinds)),
            esc(clock(s.started_at)),
            esc("-" if s.duration is None else f"{s.duration:.3f}s"),
            esc(s.summary),
        ]
        for s in report.steps
    ]
    tries = [
        [
            esc(clock(t.at)),
            esc(t.event),
            esc(t.path),
            esc(t.attempt),
            esc(t.kind),
            esc(t.error),
            esc(t.worker),
        ]
        for t in report.timeline
    ]
    actions = token is not None
    token = token or ""
    effects = []
    for e in report.effects:
        how = e.how if e.how and e.how != "called" else ""
        settle = ""
        if actions and e.status in ("pending", "unknown", "intent"):
            fields = {"thread": report.thread_id, "run": str(report.run), "key": e.key}
            settle = _button(
                base,
                "settle",
                "it happened",
                {**fields, "happened": "1"},
                token,
                f"Record that effect {e.key} happened?",
            ) + _button(
                base,
                "settle",
                "it did not",
                {**fields, "happened": "0"},
                token,
                f"Record that effect {e.key} did not happen?",
            )
        effects.append(
            [esc(e.key), esc(e.name), esc(e.path), status(e.status), esc(how), esc(e.error), settle]
        )
    names = sorted(set(report.usage or {}) | set(report.budget or {}))
    usage = [
        [esc(k), esc((report.usage or {}).get(k, "")), esc((report.budget or {}).get(k, ""))]
        for k in names
    ]
    outcome = ""
    if report.failed_steps or report.degraded_steps or report.suggestions:
        failed = "".join(f"<li>{esc(json.dumps(f, default=str))}</li>" for f in report.failed_steps)
        degraded = "".join(f"<li>{esc(d)} degraded</li>" for d in report.degraded_steps)
        tips = "".join(f"<li>{esc(t)}</li>" for t in report.suggestions)
        outcome = (
            f'<h2>Partial result</h2><ul id="failed">{failed}{degraded}</ul>'
            f'<h3>Suggestions</h3><ul id="suggestions">{tips}</ul>'
        )
    buttons = ""
    if actions:
        who = {"thread": report.thread_id, "run": str(report.run)}
        if report.status == "partial_complete":
            extra = (
                '<label> update (JSON, optional) <input name="update" id="update" '
                'size="30"></label> '
            )
            buttons += _button(
                base,
                "retry",
                "Retry failed step",
                who,
                token,
                "Re-run the failed step of this thread?",
                extra,
            )
        if report.status in ("running", "paused"):
            answer = (
                '<label> answer (JSON: what its question returns) <input name="answer" '
                'id="answer" size="20"></label> '
                if report.status == "paused"
                else ""
            )
            buttons += _button(base, "resume", "Resume", who, token, "Resume this thread?", answer)
        worker_run = report.claims > 0 or report.status == "queued"  # not a server's run
        if report.run_id and worker_run and report.status in ("running", "paused", "queued"):
            buttons += _button(
                base,
                "cancel",
                "Cancel",
                {**who, "run_id": report.run_id},
                token,
                "Cancel this run?",
            )
    buttons = f'<div id="actions">{buttons}</div>' if buttons else ""
    return (
        head
        + _facts_html(facts)
        + buttons
        + _input_html(facts)
        + "<h2>Graph</h2>"
        + graph_svg(nodes, edges, statuses, redone)
        + "<h2>Steps</h2>"
        + _table(
            ["step", "ended", "tries", "kinds", "started", "took", "summary"], step_rows, "steps"
        )
        + "<h2>Tries and recoveries</h2>"
        + _table(["at", "event", "step", "try", "kind", "error", "worker"], tries, "timeline")
        + "<h2>Effects</h2>"
        + _table(["key", "name", "step", "status", "how", "error", ""], effects, "effects")
        + "<h2>Usage and budget</h2>"
        + _table(["", "used", "budget"], usage, "usage")
        + outcome
    )


def _plot(title: str, points: Sequence[tuple[str, float | None, int, int]], ident: str) -> str:
    w, h, bar = 360, 120, max(4, 340 // max(1, len(points)) - 2)
    top = max([v for _, v, _, _ in points if v is not None] + [1.0])
    bars = []
    for i, (label, value, num, den) in enumerate(points):
        x = 10 + i * (bar + 2)
        tip = f"{label}: {'-' if value is None else f'{value:.3g}'} ({num}/{den})"
        if value is None:
            bars.append(
                f'<rect x="{x}" y="{h - 2}" width="{bar}" height="2" fill="#ccc">'
                f"<title>{esc(tip)}</title></rect>"
            )
            continue
        height = max(1.0, value / top * (h - 20))
        bars.append(
            f'<rect x="{x}" y="{h - height:.1f}" width="{bar}" height="{height:.1f}" '
            f'fill="#0d6efd"><title>{esc(tip)}</title></rect>'
        )
    return (
        f'<div class="plot"><strong>{esc(title)}</strong> <span class="muted">max '
        f'{top:.3g}</span><br><svg id="{ident}" width="{w}" height="{h}">{"".join(bars)}'
        f'<line x1="8" y1="{h}" x2="{w}" y2="{h}" stroke="#555"/></svg></div>'
    )


#: The counts of `COUNTS` the metrics page's table leaves out (to keep it narrow).
_NOT_IN_COUNTS_TABLE = frozenset(
    {"checkpoint_writes_failed", "runs_resumed_ended", "effects_replayed", "effects_reexecuted"}
)


def metrics_page(buckets: Sequence[tuple[str, RecoveryMetrics]], *, base: str, per: str) -> str:
    """The four metrics per bucket (oldest first) as bar plots, and their counts."""
    pick = " ".join(
        f'<a href="{_link(base, "metrics", per=p)}">{"<b>" + p + "</b>" if p == per else p}</a>'
        for p in ("hour", "day")
    )
    plots = []
    for metric in METRICS:
        num, den = metric.numerator, metric.denominator
        points = [
            (label, getattr(m, metric.name), getattr(m, num), getattr(m, den))
            for label, m in buckets
        ]
        plots.append(_plot(metric.title, points, f"plot-{metric.name}"))
    counts = [c for c in COUNTS if c not in _NOT_IN_COUNTS_TABLE]
    rows = [[esc(label), *(esc(getattr(m, c)) for c in counts)] for label, m in buckets]
    return (
        f"<p>per {pick} (UTC, oldest first)</p>"
        f'<div class="plots">{"".join(plots)}</div><h2>Counts</h2>'
        + _table(["from", *counts], rows, "counts")
    )
