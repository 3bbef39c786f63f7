"""``python -m langgraph_resilience``: the ``langgraph-resilience`` command.

Runs `cli.main` with the process's arguments and exits with its exit code, for
an environment whose scripts directory is not on ``PATH``.

Example:
    $ python -m langgraph_resilience runs --db runs.db --json
"""

from __future__ import annotations

import sys

from langgraph_resilience.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
