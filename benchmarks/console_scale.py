"""What the web console's pages cost on a big store: the runs page (first page,
filtered by status, by thread), a run's page and, with ``--metrics``, the
metrics page (per day: one `recovery_metrics` call per day with runs), on 1,000
to 100,000 runs.

The store is built as `metrics_scale` builds it (real runs, then clones). The
console runs as a user starts it (``langgraph-resilience ui`` in a subprocess,
on a free loopback port); each page is fetched over HTTP, medians over
``--repeats`` after one warm-up. Target (issue 29): the runs page under 0.5 s
at 100,000 runs. Run it from the repository root::

    .venv/bin/python benchmarks/console_scale.py --runs 100000 [--dialects sqlite,postgres]
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from metrics_scale import fill, median_time, store

TARGET = 0.5
ROOT = Path(__file__).resolve().parent.parent


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(dialect: str, n: int, repeats: int, metrics: bool) -> dict[str, float]:
    with store(dialect) as target, tempfile.TemporaryDirectory() as folder:
        copies, _ = fill(dialect, target, n, folder)
        port = _port()
        cli = [sys.executable, "-m", "langgraph_resilience.cli", "ui", "--db", target]
        proc = subprocess.Popen([*cli, "--port", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        thread = "fixed-s0~1" if copies else "fixed-s0"
        pages = {
            "runs": "/runs",
            "partial": "/runs?status=partial_complete",
            "thread": f"/runs?thread={thread}",
            "run": f"/run?thread={thread}",
        }
        if metrics:  # what recovery_metrics costs, once per day with runs
            pages["metrics"] = "/metrics?per=day"
        try:
            with httpx.Client(base_url=url, timeout=600) as client:
                for _ in range(300):
                    try:
                        client.get("/runs")
                        break
                    except httpx.HTTPError:
                        time.sleep(0.1)
                out = {}
                for name, path in pages.items():
                    assert client.get(path).status_code == 200, path
                    out[name], _ = median_time(lambda p=path: client.get(p), repeats)
            with httpx.Client(base_url=url) as client:
                html = client.get("/runs").text
            out["rows"] = float(html.count('<tr class="run"'))
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return out


def main() -> int:
    logging.getLogger("langgraph_resilience").setLevel(logging.CRITICAL)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="1000,100000")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dialects", default="sqlite")
    parser.add_argument("--metrics", action="store_true", help="time the metrics page too")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    print(f"console pages over HTTP by store size, medians of {args.repeats} (seconds)")
    print(
        f"{'store':9s} {'runs':>7s} {'runs pg':>8s} {'partial':>8s} {'thread':>8s} "
        f"{'run':>8s} {'metrics':>8s}"
    )
    for dialect in args.dialects.split(","):
        for n in (int(x) for x in args.runs.split(",")):
            r = measure(dialect, n, args.repeats, args.metrics)
            print(
                f"{dialect:9s} {n:7d} {r['runs']:8.3f} {r['partial']:8.3f} "
                f"{r['thread']:8.3f} {r['run']:8.3f} {r.get('metrics', float('nan')):8.3f}"
                f"   ({int(r['rows'])} rows shown)",
                flush=True,
            )
    print(f"target: the runs page (first page) < {TARGET} s at 100,000 runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
