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
docs/agent-server.md.
"""

from __future__ import annotations

from langgraph_resilience.server._app import app
from langgraph_resilience.server._checkpointer import DB_ENV, checkpointer

__all__ = ["DB_ENV", "app", "checkpointer"]
