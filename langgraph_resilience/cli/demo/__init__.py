"""The ``langgraph-resilience demo``: a seven-step research pipeline that fails
every way a real one does, on SQLite, and recovers (see `demo.story`).

Shipped inside the package, so it runs from an installed wheel:
``langgraph-resilience demo`` (or ``make demo`` in a clone).

The rooms: ``pipeline`` (the graph), ``story`` (what it tells, step by step),
``evidence`` (what it proves, read from what it kept).
"""

from __future__ import annotations

from langgraph_resilience.cli.demo.story import run_demo

__all__ = ["run_demo"]
