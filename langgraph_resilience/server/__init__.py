"""LangGraph Agent Server: our savers as its checkpointer, our views as its routes.

``langgraph.json``::

    {
      "graphs": {"agent": "./graph.py:graph"},
      "checkpointer": {"path": "langgraph_resilience.server.checkpointer"},
      "http": {"app": "langgraph_resilience.server:app", "enable_custom_route_auth": true},
      "env": ".env"
    }

`checkpointer` builds a new async resilient saver on ``LGR_DB`` each time the
server enters it; `app` serves ``/resilience/...`` (see `_app`). The guide is
docs/agent-server.md. `console_app` is the web console's pages (docs/console.md),
mounted by `app` at ``/resilience/console/`` and served by ``langgraph-resilience ui``.

The rooms: ``_checkpointer`` (`checkpointer`), ``_app`` (`app`), ``_console``
(`console_app`), ``_pages`` (its pages as HTML text, pure), ``_facts`` (what
they show beside a report, read from the store), ``_guard`` (the ``Host`` and
``Origin`` each request must have), ``_params`` (its query parameters, a 400 with
the reason for a bad one), ``static/`` (their CSS and JS).
"""

from __future__ import annotations

from langgraph_resilience.server._app import app
from langgraph_resilience.server._checkpointer import DB_ENV, checkpointer
from langgraph_resilience.server._console import ConsoleActions, console_app

__all__ = ["DB_ENV", "ConsoleActions", "app", "checkpointer", "console_app"]
