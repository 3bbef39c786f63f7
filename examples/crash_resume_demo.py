"""The demo, run from a clone: ``make demo`` or ``python -m examples.crash_resume_demo``.

It lives in the package (`langgraph_resilience.cli.demo`) so that
``langgraph-resilience demo`` runs it from an installed wheel too; see there for
the story it tells.
"""

from __future__ import annotations

import sys

from langgraph_resilience.cli.demo import run_demo

if __name__ == "__main__":
    sys.exit(run_demo(sys.argv[1] if len(sys.argv) > 1 else None))
