"""The archive against an S3-compatible endpoint: moto in server mode, started by
these tests on loopback (a real HTTP server, the requests obstore sends to AWS).
Skipped with the reason where moto cannot start; under CI=true that fails."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from langgraph.types import Command
from test_archive import Calls, build

from langgraph_resilience import Archive
from langgraph_resilience.checkpoint.archive._codec import thread_prefix

BUCKET = "lgr-archive"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but the S3 endpoint cannot start: {reason}")
    pytest.skip(f"no S3-compatible endpoint: {reason}")


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server on a free loopback port, with one bucket."""
    try:
        import boto3
        import moto.server  # noqa: F401
    except ImportError as exc:
        _unavailable(f"moto[server] is not installed ({exc}); pip install -e '.[dev]'")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()
                break
            except OSError as exc:
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read().decode()[-500:] if proc.stderr else ""
                    _unavailable(f"moto server did not answer on {url}: {exc} {err}")
                time.sleep(0.1)
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )
        client.create_bucket(Bucket=BUCKET)
        yield url
    finally:
        proc.kill()
        proc.wait()


def s3_archive(endpoint: str, prefix: str) -> Archive:
    return Archive(
        f"s3://{BUCKET}/{prefix}",
        options={
            "endpoint": endpoint,
            "region": "us-east-1",
            "access_key_id": "test",
            "secret_access_key": "test",
            "client_options": {"allow_http": True},
        },
    )


def test_conditional_put_never_overwrites(s3_endpoint: str) -> None:
    archive = s3_archive(s3_endpoint, f"put-{uuid.uuid4().hex[:6]}")
    assert archive.put_new("t/ns=/0000000001-a", b"one") == "created"
    assert archive.put_new("t/ns=/0000000001-a", b"one") == "same"  # a retry finds its own
    assert archive.put_new("t/ns=/0000000001-a", b"two") == "differs"
    assert archive.read("t/ns=/0000000001-a") == b"one"


async def test_round_trip_through_s3(checkpointer: Any, s3_endpoint: str) -> None:
    h = checkpointer
    archive = s3_archive(s3_endpoint, f"rt-{h.id}")
    config = {"configurable": {"thread_id": f"s3/{h.id}-{uuid.uuid4().hex[:6]}"}}
    thread_id = config["configurable"]["thread_id"]
    if h.backend == "redis":  # one object per demotion, under the saver's key prefix
        h.saver.archive = archive  # what archive=... on its constructor sets
        where = f"redis/{quote(h.saver.place.prefix, safe='')}/{thread_prefix(thread_id)}/"
    else:  # one object per checkpoint
        h.saver._state.archive = archive
        where = thread_prefix(thread_id)
    calls = Calls()
    graph = build(h, calls, ask=True)
    await h.invoke(graph, {"done": []}, config)
    before = [t.checkpoint["id"] for t in await h.listed(config)]

    assert thread_id in (await h.call("archive_idle", 0)).archived
    assert len(archive.keys(where)) == (1 if h.backend == "redis" else len(before))
    out = await h.invoke(graph, Command(resume="ok"), config)

    assert out["answer"] == "ok" and calls.nodes == ["pay", "then", "then"]
    assert calls.charges == 1
    assert [t.checkpoint["id"] for t in await h.listed(config)][-len(before) :] == before
    assert archive.keys(where) == []
