"""``python -m langgraph_resilience.cli``: the ``langgraph-resilience`` command (``make demo``)."""

from __future__ import annotations

import sys

from langgraph_resilience.cli import main

if __name__ == "__main__":
    sys.exit(main())
