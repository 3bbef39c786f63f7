"""Store round trips per step on Postgres, ours against stock, counted (not timed).

A ten-node linear graph (the chain of ``run_length.py``, 2 KB payload,
``durability="sync"``) runs on `ResilientPostgresSaver` (a `ResilientStateGraph`)
and on LangGraph's stock `PostgresSaver` (a plain `StateGraph`), each in its
own scratch database, through a loopback TCP proxy that reads the frontend
protocol messages the client sends. Counted per run, over every connection the
saver opens:

- ``trips``: the times the client sent after it had heard from the server: the
  round trips it waited for (pipelined statements share one);
- ``syncs``: Sync and simple Query messages (the protocol's sync points);
- ``stmts``: statements executed (Execute and simple Query messages; an
  ``executemany`` counts one per row).

Each is divided by the steps for ``/step``. Warmed up first (connections,
prepared statements); the counts are of one run after ``--warmup`` runs, the
same run to run (checked over ``--runs``; if not, medians, and it says so).
``--show`` lists the statements of one run by SQL text. Run it from the repository root::

    .venv/bin/python benchmarks/pg_round_trips.py [--steps 10] [--runs 3]
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import statistics
import struct
import sys
import threading
import uuid
from collections import Counter
from typing import Any

from _pg import postgres_db, server_dsn
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import StateGraph
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from run_length import PAYLOAD, build

from langgraph_resilience import ResilientStateGraph
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver

KEYS = ("trips", "syncs", "stmts")


class Proxy:
    """A loopback TCP proxy to the server that counts what the clients send."""

    def __init__(self, host: str, port: int) -> None:
        self.server = (host, port)
        self.counts: Counter[str] = Counter()
        self.statements: Counter[str] = Counter()  # executions by SQL text
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self.listener.accept()
            upstream = socket.create_connection(self.server)
            heard = threading.Event()  # the server spoke since the client last sent
            args = (client, upstream, heard)
            threading.Thread(target=self._from_client, args=args, daemon=True).start()
            threading.Thread(target=self._from_server, args=args, daemon=True).start()

    def _from_server(self, client: socket.socket, upstream: socket.socket, heard: Any) -> None:
        with contextlib.suppress(OSError), client:
            while data := upstream.recv(65536):
                heard.set()
                client.sendall(data)

    def _from_client(self, client: socket.socket, upstream: socket.socket, heard: Any) -> None:
        with contextlib.suppress(OSError), upstream:
            self._forward(client, upstream, heard)

    def _forward(self, client: socket.socket, upstream: socket.socket, heard: Any) -> None:
        buffer, started = b"", False
        prepared: dict[bytes, str] = {}  # this connection's statements by name
        bound = ""
        while data := client.recv(65536):
            with self.lock:
                if heard.is_set():
                    heard.clear()
                    self.counts["trips"] += 1
                buffer += data
                while True:  # whole messages: a type byte and a length (the startup: no type)
                    head = 4 if not started else 5
                    if len(buffer) < head:
                        break
                    size = struct.unpack("!I", buffer[head - 4 : head])[0] + head - 4
                    if len(buffer) < size:
                        break
                    if started:
                        kind, fields = chr(buffer[0]), buffer[5:size].split(b"\0")
                        self.counts[kind] += 1
                        if kind == "P":  # Parse: name, SQL
                            prepared[fields[0]] = fields[1].decode()
                        elif kind == "B":  # Bind: portal, statement
                            bound = prepared.get(fields[1], "?")
                        elif kind in "EQ":  # Execute (the bound statement), Query: SQL
                            self.statements[bound if kind == "E" else fields[0].decode()] += 1
                    buffer, started = buffer[size:], True
            upstream.sendall(data)

    def take(self) -> tuple[dict[str, int], Counter[str]]:
        """The counts since the last take (``trips``, ``syncs``, ``stmts``), and
        the statements executed."""
        with self.lock:
            c, self.counts = self.counts, Counter()
            statements, self.statements = self.statements, Counter()
        return {"trips": c["trips"], "syncs": c["S"] + c["Q"], "stmts": c["E"] + c["Q"]}, statements


def count(
    saver_cls: Any, graph_cls: Any, steps: int, warmup: int, runs: int
) -> tuple[dict[str, float], Counter[str]]:
    """Median counts of one run, and the statements of the last run."""
    server = conninfo_to_dict(server_dsn())
    with postgres_db(server_dsn()) as dsn:
        proxy = Proxy(str(server.get("host", "127.0.0.1")), int(server.get("port", 5432)))
        via = make_conninfo(
            dsn, host="127.0.0.1", port=proxy.port, sslmode="disable", gssencmode="disable"
        )
        with saver_cls.from_conn_string(via) as saver:
            saver.setup()
            graph = build(graph_cls, steps, saver)
            seen = []
            for i in range(warmup + runs):
                proxy.take()
                config = {"configurable": {"thread_id": str(uuid.uuid4())}}
                out = graph.invoke({"count": 0, "payload": PAYLOAD}, config, durability="sync")
                assert out["count"] == steps, out
                if i >= warmup:
                    seen.append(proxy.take())
    counts = [c for c, _ in seen]
    if any(c != counts[0] for c in counts):
        print(f"  (counts differ run to run, medians shown: {counts})")
    return {k: statistics.median(c[k] for c in counts) for k in KEYS}, seen[-1][1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=6)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--show", action="store_true", help="list the statements of a run")
    args = parser.parse_args()
    print(f"Postgres round trips of one {args.steps}-step run (durability='sync'), counted")
    print(f"{'saver':6s}" + "".join(f" {k:>6s} {'/step':>6s}" for k in KEYS))
    shown = []
    for label, saver_cls, graph_cls in (
        ("stock", PostgresSaver, StateGraph),
        ("ours", ResilientPostgresSaver, ResilientStateGraph),
    ):
        c, statements = count(saver_cls, graph_cls, args.steps, args.warmup, args.runs)
        print(f"{label:6s}" + "".join(f" {c[k]:6g} {c[k] / args.steps:6.1f}" for k in KEYS))
        shown.append((label, statements))
    for label, statements in shown if args.show else ():
        print(f"\n{label}: statements of one run")
        for text, n in statements.most_common():
            print(f"{n:4d}  {' '.join(text.split())[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
