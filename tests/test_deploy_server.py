"""A deploy under LangGraph Agent Server (``langgraph dev``): a thread paused
before the deploy, resumed by a version that renamed its paused node.

One server serves three versions of the graph side by side
(`scripts/deploy_server_graph.py`), as the same store sees them across a
deploy: ``v1`` pauses the thread at ``review``; ``v2_bare`` (renamed, nothing
said) refuses the resume with the error naming ``review`` and the versions, and
stores nothing; ``v2`` (``renames`` and a migration) finishes it, with the
migrated field, the reviewer notified once.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import require_postgres
from langgraph_sdk import get_client
from test_agent_server import Server, _require_server

pytestmark = pytest.mark.crash

GRAPH = Path(__file__).parent / "scripts" / "deploy_server_graph.py"


async def _deploy_story(tmp_path: Path, db: str) -> None:
    home = tmp_path / "app"
    home.mkdir()
    shutil.copy(GRAPH, home / "graph.py")
    graphs = {name: f"./graph.py:{name}" for name in ("v1", "v2_bare", "v2")}
    config = {
        "dependencies": ["."],
        "graphs": graphs,
        "checkpointer": {"path": "langgraph_resilience.server.checkpointer"},
        "http": {"app": "langgraph_resilience.server:app", "enable_custom_route_auth": True},
    }
    (home / "langgraph.json").write_text(json.dumps(config))
    server = Server(home, db)
    try:
        server.start()
        client = get_client(url=server.url, api_key=None)
        thread = (await client.threads.create())["thread_id"]
        await client.runs.wait(thread, "v1", input={"doc": "incident", "done": []})
        assert (await client.threads.get_state(thread))["next"] == ["review"]
        storage = server.get(f"/resilience/threads/{thread}/storage").json()

        blocked = await client.runs.create(thread, "v2_bare", command={"resume": "yes"})
        await client.runs.join(thread, blocked["run_id"])
        run = await client.runs.get(thread, blocked["run_id"])
        assert run["status"] == "error"
        log = server.tail()
        assert "DeployBlocked" in log and "'review'" in log and "version 1" in log
        again = server.get(f"/resilience/threads/{thread}/storage").json()
        assert again["checkpoints"] == storage["checkpoints"]  # nothing stored

        out = await client.runs.wait(thread, "v2", command={"resume": "yes"})
        assert out["done"] == ["review:yes", "publish:high"], out
        assert out["resilience"]["status"] == "success"
        sent = server.outbox.read_text().splitlines()
        assert len(sent) == 1  # notified before the deploy, not again after it
    except BaseException:
        print(server.tail())
        raise
    finally:
        server.stop()


@pytest.mark.timeout(300)
async def test_a_paused_thread_across_a_deploy_under_langgraph_dev(tmp_path: Path) -> None:
    _require_server()
    await _deploy_story(tmp_path, str(tmp_path / "runs.db"))


@pytest.mark.timeout(300)
async def test_a_paused_thread_across_a_deploy_under_langgraph_dev_postgres(
    tmp_path: Path, pg_dsn: str
) -> None:
    _require_server()
    require_postgres()
    await _deploy_story(tmp_path, pg_dsn)
