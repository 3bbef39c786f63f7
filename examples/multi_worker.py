"""A deployment of two workers on Postgres; one is killed, the other finishes its work.

    python -m examples.multi_worker [POSTGRES_DSN]

(default DSN: ``LGR_POSTGRES_URL`` or ``postgresql://postgres@127.0.0.1:5432/postgres``;
the example works in a scratch database it creates on that server and drops)

Jobs are queued with `Worker.submit`; two worker processes started with the
command line (``langgraph-resilience worker --graph examples.multi_worker:pipeline``)
claim them under leases. While the first is inside a step, the second starts
and the first is killed with SIGKILL; when its lease runs out the second takes
its run over from the last checkpoint and finishes it, with the other jobs.
Each job publishes its result once (a `side_effect` with ``reconcile``), to a
feed file both processes share.

The feed is a JSON-lines file (``LGR_EXAMPLE_FEED``) standing in for an outside
service; each step also notes its pid in ``<feed>.steps`` so the run shows who
did what.
"""

from __future__ import annotations

import contextlib
import json
import operator
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import psycopg
from langgraph.graph import END, START
from psycopg.conninfo import make_conninfo

from langgraph_resilience import (
    Backoff,
    NodePolicy,
    ResilientState,
    ResilientStateGraph,
    Worker,
    side_effect,
)
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver

ROOT = Path(__file__).resolve().parent.parent
FEED_ENV = "LGR_EXAMPLE_FEED"
STEP_SECONDS_ENV = "LGR_EXAMPLE_STEP_SECONDS"
DEFAULT_DSN = os.environ.get("LGR_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@dataclass(frozen=True)
class Feed:
    """A JSON-lines file that stands for an outside service shared by the workers."""

    path: Path

    def publish(self, job: str, text: str, idempotency_key: str) -> str:
        line = json.dumps({"job": job, "text": text, "key": idempotency_key, "pid": os.getpid()})
        with open(self.path, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        return f"post-{job}"

    def entries(self) -> list[dict[str, Any]]:
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in lines if line.strip()]

    def lookup(self, idempotency_key: str) -> str | None:
        found = [e for e in self.entries() if e["key"] == idempotency_key]
        return f"post-{found[0]['job']}" if found else None

    def note(self, step: str, job: str) -> None:
        with open(f"{self.path}.steps", "a") as f:
            f.write(f"{os.getpid()} {step} {job}\n")

    def steps(self) -> list[list[str]]:
        try:
            return [line.split() for line in Path(f"{self.path}.steps").read_text().splitlines()]
        except FileNotFoundError:
            return []


def feed() -> Feed:
    return Feed(Path(os.environ.get(FEED_ENV, Path(tempfile.gettempdir()) / "lgr-feed.jsonl")))


class JobState(ResilientState, total=False):
    job: str
    words: Annotated[list[str], operator.add]
    post: str


def fetch(state: JobState) -> dict[str, Any]:
    feed().note("fetch", state["job"])
    return {"words": [state["job"], "fetched"]}


def enrich(state: JobState) -> dict[str, Any]:
    feed().note("enrich", state["job"])
    time.sleep(float(os.environ.get(STEP_SECONDS_ENV, "0.5")))  # a slow model call
    return {"words": ["enriched"]}


@side_effect(reconcile=lambda key: feed().lookup(key))
def publish_post(job: str, text: str, *, idempotency_key: str) -> str:
    return feed().publish(job, text, idempotency_key)


def publish(state: JobState) -> dict[str, Any]:
    feed().note("publish", state["job"])
    return {"post": publish_post(state["job"], " ".join(state["words"]))}


def pipeline() -> ResilientStateGraph[Any]:
    """The job pipeline's builder (what ``--graph examples.multi_worker:pipeline`` names)."""
    g = ResilientStateGraph(JobState)
    g.set_node_defaults(policy=NodePolicy(retry=Backoff(max_attempts=3, initial_interval=0.1)))
    g.add_node("fetch", fetch)
    g.add_node("enrich", enrich)
    g.add_node("publish", publish)
    g.add_edge(START, "fetch")
    g.add_edge("fetch", "enrich")
    g.add_edge("enrich", "publish")
    g.add_edge("publish", END)
    return g


def build_graph(checkpointer: Any) -> Any:
    """The pipeline compiled on ``checkpointer`` (for `recovery_suite`)."""
    return pipeline().compile(checkpointer=checkpointer)


@contextlib.contextmanager
def open_saver(dsn: str) -> Iterator[ResilientPostgresSaver]:
    """A Postgres saver on ``dsn``, its tables set up."""
    with ResilientPostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        yield saver


def start_worker(dsn: str, feed_path: Path, lease_ttl: float) -> subprocess.Popen[str]:
    """``langgraph-resilience worker`` in a process of its own."""
    cli = Path(sys.executable).with_name("langgraph-resilience")
    command = [str(cli)] if cli.exists() else [sys.executable, "-m", "langgraph_resilience.cli"]
    env = {**os.environ, FEED_ENV: str(feed_path), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [
            *command,
            "worker",
            "--graph",
            "examples.multi_worker:pipeline",
            "--db",
            dsn,
            "--lease-ttl",
            str(lease_ttl),
            "--poll-interval",
            "0.2",
            "--until-idle",
            "--log-level",
            "WARNING",
        ],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_deployment(dsn: str, jobs: int = 4, lease_ttl: float = 2.0) -> dict[str, Any]:
    """Queue ``jobs`` jobs, run two workers, kill one midway; what each job ended as.

    Returns ``runs`` (run id -> status, claims), ``posts`` (job -> times
    published), ``killed`` (the killed worker's pid) and ``took_over`` (runs
    taken over after their worker's lease expired).
    """
    with tempfile.TemporaryDirectory(prefix="lgr-deploy-") as tmp:
        shared = Feed(Path(tmp) / "feed.jsonl")
        os.environ[FEED_ENV] = str(shared.path)
        tag = os.urandom(3).hex()
        with open_saver(dsn) as saver:
            queue = Worker(pipeline(), checkpointer=saver)
            run_ids = [queue.submit({"job": f"job-{tag}-{n}"}) for n in range(jobs)]
        first = start_worker(dsn, shared.path, lease_ttl)
        deadline = time.monotonic() + 60
        # Once the first worker is inside a slow step, start the second and kill the first.
        while not any(s[0] == str(first.pid) and s[1] == "enrich" for s in shared.steps()):
            if time.monotonic() > deadline or first.poll() is not None:
                break
            time.sleep(0.05)
        second = start_worker(dsn, shared.path, lease_ttl)
        first.send_signal(signal.SIGKILL)
        first.wait()
        _, errors = second.communicate(timeout=90)
        if second.returncode != 0:
            raise RuntimeError(f"the surviving worker failed ({second.returncode}): {errors}")
        with open_saver(dsn) as saver:
            records = {r: saver.read_run(r) for r in run_ids}
        posts: dict[str, int] = {}
        for entry in shared.entries():
            posts[entry["job"]] = posts.get(entry["job"], 0) + 1
        return {
            "runs": {r: (rec.status, rec.attempts) for r, rec in records.items() if rec},
            "posts": posts,
            "killed": first.pid,
            "took_over": [r for r, rec in records.items() if rec and rec.recoveries > 0],
        }


@contextlib.contextmanager
def scratch_database(server_dsn: str) -> Iterator[str]:
    """A new database on the server for the example (other runs on the server's
    own database would be claimed by these workers), dropped afterwards."""
    name = f"lgr_example_{os.urandom(4).hex()}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_conninfo(server_dsn, dbname=name)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> int:
    with scratch_database(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_DSN) as dsn:
        found = run_deployment(dsn)
    print(f"worker {found['killed']} was killed with SIGKILL midway")
    for run_id, (status, claims) in sorted(found["runs"].items()):
        print(f"  run {run_id}: {status} (claimed {claims} time(s))")
    print(f"runs taken over from the dead worker: {len(found['took_over'])}")
    print(f"posts published: {found['posts']}")
    done = all(status == "success" for status, _ in found["runs"].values())
    once = all(n == 1 for n in found["posts"].values()) and len(found["posts"]) == len(
        found["runs"]
    )
    return 0 if done and once else 1


if __name__ == "__main__":
    sys.exit(main())
