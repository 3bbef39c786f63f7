"""`check_deploy` on Redis (`checkpoint.redis.runlog._runlog_parts.RedisHistory.heads`),
compared side by side with the same threads on SQLite.

- threads in flight (one paused at an interrupt, one paused after a degraded
  step) and one finished: the same report on Redis as on SQLite under a graph
  that renames the paused node, one that maps the rename with a migration and
  one that makes the degraded node critical (sync and async);
- a head whose record was changed raises `CheckpointCorrupt`, as on SQL;
- ``langgraph-resilience check-deploy --db redis://...#prefix`` exits 1 on a
  blocked thread, 0 once the rename is mapped;
- the upgrade a resume runs (migrations, version) replaces the head under its
  own id on Redis, its writes kept (``replace_checkpoint``), and the thread
  resumes migrated, the migration run once, while an ordinary second ``put`` of
  that id stays a no-op (sync and async).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from langgraph.types import Command
from redis_servers import REDIS_DOWN, REDIS_URL, flush_prefix
from test_deploy import SENT, build, build_enriched
from test_redis_runlog import two_async_savers, two_savers

from langgraph_resilience import acheck_deploy, check_deploy
from langgraph_resilience.checkpoint.redis import ResilientRedisSaver
from langgraph_resilience.checkpoint.redis.store._keys import thread_keys
from langgraph_resilience.errors import CheckpointCorrupt
from langgraph_resilience.graph import _upgrade
from langgraph_resilience.graph._versions import MIGRATED_KEY, VERSION_KEY

pytestmark = pytest.mark.skipif(REDIS_DOWN is not None, reason=REDIS_DOWN or "")


def _prefix() -> str:
    return f"dp{uuid.uuid4().hex[:10]}"


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


#: The new versions checked: a bare rename (blocks the paused thread), the rename
#: mapped with a migration (migrates it), the degraded node made critical.
NEW = {
    "bare": lambda: build("approve", version=2),
    "mapped": lambda: build(
        "approve",
        version=2,
        renames={"review": "approve"},
        migrations={2: lambda s: {**s, "priority": "p"}},
    ),
    "critical": lambda: build_enriched(critical=True, version=2),
}


def _reports(found: dict[str, Any]) -> dict[str, Any]:
    return {name: report.to_dict() for name, report in found.items()}


def _checked(reports: dict[str, Any]) -> None:
    """What the threads must show (on either store), not only that they agree."""
    verdicts = {n: {t["thread_id"]: t["verdict"] for t in r["threads"]} for n, r in reports.items()}
    assert verdicts["bare"] == {"degraded": "blocked", "paused": "blocked"}  # 'done' is not
    assert verdicts["mapped"]["paused"] == "migrates"
    assert verdicts["critical"]["degraded"] == "blocked"
    [paused] = [t for t in reports["mapped"]["threads"] if t["thread_id"] == "paused"]
    assert tuple(paused["migrations"]) == (2,) and paused["renamed"] == {"review": "approve"}


def test_check_deploy_reads_the_same_on_redis_as_on_sqlite(tmp_path: Path) -> None:
    with two_savers(tmp_path) as (sql, red):
        seen = []
        for saver in (sql, red):
            build(version=1).compile(checkpointer=saver).invoke({"done": []}, _config("paused"))
            v1 = build_enriched(critical=False, version=1).compile(checkpointer=saver)
            out = v1.invoke({"done": []}, _config("degraded"))
            assert out["resilience"]["degraded_steps"] == ["enrich"]
            done = build(version=1).compile(checkpointer=saver)
            done.invoke({"done": []}, _config("done"))
            assert done.invoke(Command(resume="y"), _config("done"))["resilience"]["status"] == (
                "success"
            )
            seen.append(_reports({n: check_deploy(saver, make()) for n, make in NEW.items()}))
    on_sqlite, on_redis = seen
    _checked(on_redis)
    assert on_redis == on_sqlite


async def test_check_deploy_reads_the_same_on_async_redis(tmp_path: Path) -> None:
    async with two_async_savers(tmp_path) as (sql, red):
        seen = []
        for saver in (sql, red):
            await (
                build(version=1)
                .compile(checkpointer=saver)
                .ainvoke({"done": []}, _config("paused"))
            )
            v1 = build_enriched(critical=False, version=1).compile(checkpointer=saver)
            await v1.ainvoke({"done": []}, _config("degraded"))
            seen.append(
                _reports({n: await acheck_deploy(saver, make()) for n, make in NEW.items()})
            )
    on_sqlite, on_redis = seen
    _checked(on_redis)
    assert on_redis == on_sqlite


def test_a_changed_head_is_corrupt_on_redis(tmp_path: Path) -> None:
    with two_savers(tmp_path) as (_, red):
        build(version=1).compile(checkpointer=red).invoke({"done": []}, _config("paused"))
        keys = thread_keys(red.place.prefix, "paused")
        client = redis.Redis.from_url(REDIS_URL)
        [head] = client.zrevrangebylex(keys.ix, b"(\x01", b"[\x00", start=0, num=1)
        record = client.hget(keys.cp, head)
        assert record is not None
        client.hset(keys.cp, head, record[:-1] + bytes([record[-1] ^ 1]))
        client.close()
        with pytest.raises(CheckpointCorrupt):
            check_deploy(red, NEW["bare"]())


def test_check_deploy_command_on_a_redis_url(tmp_path: Path) -> None:
    prefix = _prefix()
    module = tmp_path / "deploy_graphs.py"
    module.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(Path(__file__).parent)!r})
            from test_deploy import build
            bare = build("approve", version=2)
            mapped = build("approve", version=2, renames={{"review": "approve"}})
            """
        )
    )
    try:
        with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix) as saver:
            build(version=1).compile(checkpointer=saver).invoke({"done": []}, _config("paused-1"))

        def run(attr: str) -> subprocess.CompletedProcess[str]:
            db = f"{REDIS_URL}#{prefix}"
            command = ["check-deploy", "--db", db, "--json", "--graph", f"deploy_graphs:{attr}"]
            return subprocess.run(
                [sys.executable, "-m", "langgraph_resilience", *command],
                capture_output=True,
                text=True,
                cwd=tmp_path,
                timeout=120,
                env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
            )

        blocked = run("bare")
        assert blocked.returncode == 1, blocked.stderr
        found = json.loads(blocked.stdout)["threads"]
        assert [(t["thread_id"], t["verdict"]) for t in found] == [("paused-1", "blocked")]
        assert "review" in found[0]["reasons"][0]
        ok = run("mapped")
        assert ok.returncode == 0, ok.stderr
        assert json.loads(ok.stdout)["threads"][0]["verdict"] == "migrates"
    finally:
        flush_prefix(prefix)


def _to2(ran: list[int]) -> Any:
    def to2(state: dict[str, Any]) -> dict[str, Any]:
        ran.append(2)
        return {**state, "priority": "urgent"}

    return to2


def _upgraded(before: Any, after: Any) -> None:
    """``after`` is ``before`` upgraded to version 2 in place: same id, same writes."""
    assert after.checkpoint["id"] == before.checkpoint["id"]
    assert after.checkpoint["channel_values"]["priority"] == "urgent"
    assert after.metadata[VERSION_KEY] == 2
    assert after.metadata[MIGRATED_KEY]["ran"] == [2]
    assert after.pending_writes == before.pending_writes and before.pending_writes


def test_an_upgraded_thread_resumes_migrated_on_redis(tmp_path: Path) -> None:
    with two_savers(tmp_path) as (_, red):
        config = _config("up")
        build(version=1).compile(checkpointer=red).invoke({"done": []}, config)  # paused
        before = red.get_tuple(config)
        assert before is not None and before.metadata[VERSION_KEY] == 1
        ran: list[int] = []
        v2 = build(version=2, migrations={2: _to2(ran)}).compile(checkpointer=red)
        _upgrade.upgrade(v2, config)
        after = red.get_tuple(config)
        _upgraded(before, after)
        # an ordinary put of the same id (the stale, unmigrated one) keeps the upgrade
        red.put(before.parent_config, before.checkpoint, before.metadata, {})  # type: ignore[arg-type]
        assert red.get_tuple(config) == after
        sent = len(SENT)
        out = v2.invoke(Command(resume="ok"), config)
        assert out["done"][-1] == "publish:urgent" and out["resilience"]["status"] == "success"
        assert ran == [2] and len(SENT) == sent  # migrated once; the effect not sent again
        v2.invoke({"done": []}, config)
        assert ran == [2]


async def test_an_upgraded_thread_resumes_migrated_on_async_redis(tmp_path: Path) -> None:
    async with two_async_savers(tmp_path) as (_, red):
        config = _config("aup")
        await build(version=1).compile(checkpointer=red).ainvoke({"done": []}, config)
        before = await red.aget_tuple(config)
        assert before is not None
        ran: list[int] = []
        v2 = build(version=2, migrations={2: _to2(ran)}).compile(checkpointer=red)
        await _upgrade.aupgrade(v2, config)
        after = await red.aget_tuple(config)
        _upgraded(before, after)
        await red.aput(before.parent_config, before.checkpoint, before.metadata, {})  # type: ignore[arg-type]
        assert await red.aget_tuple(config) == after
        out = await v2.ainvoke(Command(resume="ok"), config)
        assert out["done"][-1] == "publish:urgent" and ran == [2]
