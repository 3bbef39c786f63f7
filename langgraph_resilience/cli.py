"""The ``langgraph-resilience`` command line.

Available subcommands:

- ``demo``: run the crash-and-resume demo (``examples/crash_resume_demo.py``). The
  demo ships with the source repository, not with the installed package.

Not yet available: ``runs``, ``show``, ``metrics``, ``resume``, ``worker``.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

__all__ = ["main"]

DEMO_MODULE = "examples.crash_resume_demo"


def _demo_root() -> Path | None:
    """The directory holding the ``examples`` package, if the demo is importable."""
    try:
        spec = importlib.util.find_spec(DEMO_MODULE)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).resolve().parents[1]


def _run_demo() -> int:
    root = _demo_root()
    if root is None:
        print(
            "the demo ships with the source repository (examples/crash_resume_demo.py); "
            "run this command from a clone of it, or use `make demo` there",
            file=sys.stderr,
        )
        return 2
    return subprocess.call([sys.executable, "-m", DEMO_MODULE], cwd=root)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = argparse.ArgumentParser(
        prog="langgraph-resilience",
        description="Resilient checkpointers for LangGraph.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("demo", help="kill a pipeline mid-step, resume it, verify nothing re-ran")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _run_demo()
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
