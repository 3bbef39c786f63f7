"""The ``archive`` command on a ``redis://`` URL (`ResilientRedisSaver.archive_idle`),
side by side with the same command on SQLite: the same threads archived, the
hot keys gone to the cold tier, and ``show`` with ``LGR_ARCHIVE`` restores a
thread first and reads it as it was.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest
import redis
from redis_servers import REDIS_DOWN, REDIS_URL, flush_prefix
from test_redis_runlog import config, pipeline

from langgraph_resilience.checkpoint.redis import ResilientRedisSaver
from langgraph_resilience.checkpoint.redis.store._keys import thread_keys
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

pytestmark = pytest.mark.skipif(REDIS_DOWN is not None, reason=REDIS_DOWN or "")


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "langgraph_resilience", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})},
    )


def _two_threads(saver: Any) -> None:
    graph = pipeline({"on": False}, saver)
    for thread in ("idle", "long"):
        assert graph.invoke({"done": []}, config(thread))["resilience"]["status"] == "success"


def test_archive_command_on_redis_as_on_sqlite(tmp_path: Path) -> None:
    prefix = f"ar{uuid.uuid4().hex[:10]}"
    db_sql, cold_sql = str(tmp_path / "s.db"), f"file://{tmp_path}/c1"
    cold_red = f"file://{tmp_path}/c2"
    db_red = f"{REDIS_URL}#{prefix}"
    try:
        with ResilientSqliteSaver.from_conn_string(db_sql) as sql:
            sql.setup()
            _two_threads(sql)
        with ResilientRedisSaver.from_conn_string(
            REDIS_URL, prefix=prefix, archive=cold_red
        ) as red:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                red.setup()
            _two_threads(red)
        seen = []
        for db, cold in ((db_sql, cold_sql), (db_red, cold_red)):
            done = _cli("archive", "--db", db, "--older-than", "0s", "--archive", cold, "--json")
            assert done.returncode == 0, done.stderr
            found = json.loads(done.stdout)
            seen.append({k: sorted(v) for k, v in found.items()})
        on_sqlite, on_redis = seen
        assert on_redis == {"archived": ["idle", "long"], "skipped": [], "failed": []}
        assert on_redis == on_sqlite
        client = redis.Redis.from_url(REDIS_URL)
        keys = thread_keys(prefix, "idle")
        assert client.exists(keys.archived) == 1 and client.exists(keys.cp) == 0  # cold
        client.close()
        for db, cold in ((db_sql, cold_sql), (db_red, cold_red)):
            shown = _cli("show", "idle", "--db", db, "--json", env={"LGR_ARCHIVE": cold})
            assert shown.returncode == 0, shown.stderr
            assert json.loads(shown.stdout)["status"] == "success"
        client = redis.Redis.from_url(REDIS_URL)
        assert client.exists(keys.archived) == 0 and client.exists(keys.cp) == 1  # restored
        client.close()
    finally:
        flush_prefix(prefix)
