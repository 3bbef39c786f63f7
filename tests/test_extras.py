"""The base install runs on SQLite alone: the Postgres drivers are the `postgres` extra.

A notebook user installs ``langgraph-resilience`` without psycopg; the package, its
SQLite savers (sync and async), a graph with a policy and the command line must work
there, and a Postgres DSN given to the command must say which extra is missing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent

_WITHOUT_POSTGRES = """
import sys
for name in [m for m in sys.modules if m.startswith(("psycopg", "langgraph.checkpoint.postgres"))]:
    del sys.modules[name]
for name in ("psycopg", "psycopg_pool", "psycopg_binary", "langgraph.checkpoint.postgres"):
    sys.modules[name] = None  # import psycopg -> ImportError, as without the extra
import asyncio, contextlib, io, os, tempfile
from langgraph.graph import END, START
from langgraph_resilience import Backoff, NodePolicy, ResilientState, ResilientStateGraph
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver
from langgraph_resilience.cli import main

class S(ResilientState, total=False):
    n: int

tries = []
def flaky(state):
    tries.append(1)
    if len(tries) < 2:
        raise ConnectionError("blip")
    return {"n": state["n"] + 1}

g = ResilientStateGraph(S)
g.add_node("flaky", flaky, policy=NodePolicy(retry=Backoff(initial_interval=0.001)))
g.add_edge(START, "flaky")
g.add_edge("flaky", END)
db = os.path.join(tempfile.mkdtemp(), "runs.db")
with ResilientSqliteSaver.from_conn_string(db) as saver:
    out = g.compile(checkpointer=saver).invoke({"n": 1}, {"configurable": {"thread_id": "t"}})
assert out["n"] == 2 and out["resilience"]["status"] == "success", out

async def main_async():
    async with AsyncResilientSqliteSaver.from_conn_string(db) as saver:
        graph = g.compile(checkpointer=saver)
        return await graph.ainvoke({"n": 5}, {"configurable": {"thread_id": "a"}})
assert asyncio.run(main_async())["n"] == 6

err = io.StringIO()
with contextlib.redirect_stderr(err):
    code = main(["runs", "--db", "postgresql://app@127.0.0.1:5432/app"])
assert code == 2, code
assert "pip install 'langgraph-resilience[postgres]'" in err.getvalue(), err.getvalue()
assert main(["runs", "--db", db, "--json"]) == 0
try:
    import langgraph_resilience.checkpoint.postgres.aio
except ImportError as exc:
    assert "pip install 'langgraph-resilience[postgres]'" in str(exc), exc
else:
    raise AssertionError("the Postgres savers imported without psycopg")
assert not any(m and m.startswith("psycopg") for m in sys.modules if sys.modules[m]), [
    m for m in sys.modules if m.startswith("psycopg") and sys.modules[m]
]
print("ok")
"""


def test_the_package_runs_on_sqlite_without_the_postgres_drivers() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_POSTGRES],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok"), done.stdout


def test_the_postgres_drivers_are_an_extra_that_dev_includes() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"])
    assert "psycopg" not in base and "checkpoint-postgres" not in base
    postgres = " ".join(project["optional-dependencies"]["postgres"])
    assert "psycopg[binary,pool]" in postgres and "langgraph-checkpoint-postgres" in postgres
    dev_self = [d for d in project["optional-dependencies"]["dev"] if d.startswith(project["name"])]
    assert dev_self and "postgres" in dev_self[0], "make test needs the Postgres savers"
