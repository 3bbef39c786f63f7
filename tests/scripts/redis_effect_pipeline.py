"""A process for the Redis effect crash test: a seven-step resilient pipeline on
a Redis saver whose fourth step charges a card through ``@side_effect``.

    python tests/scripts/redis_effect_pipeline.py URL THREAD LEDGER CHARGES
        [--async] [--in-call] [--resume]

Each node appends ``<node> <pid>`` to LEDGER (fsynced) when it starts; the
charge appends ``charge <key> <pid>`` to CHARGES (the outside system: fsynced
before it returns). Without ``--resume`` the process SIGKILLs itself right
after the charge returned to the node (its outcome stored, nothing else of
the step), or with ``--in-call`` right after the outside system charged,
before the outcome is stored: the resume reconciles it from CHARGES. Prints
one JSON line: the run's status, the steps done and the thread's effects as
stored (name, status, how).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/: graphs, helpers

from graphs import DoneState, chain
from helpers import append

from langgraph_resilience import Backoff, ResilientStateGraph, side_effect
from langgraph_resilience.checkpoint.redis import ResilientRedisSaver
from langgraph_resilience.checkpoint.redis.aio import AsyncResilientRedisSaver

STEPS = [f"s{i}" for i in range(1, 8)]
RETRY = Backoff(max_attempts=60, initial_interval=0.1, max_interval=0.3, jitter="none")


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for name in ("url", "thread", "ledger", "charges"):
        parser.add_argument(name)
    parser.add_argument("--async", dest="is_async", action="store_true")
    parser.add_argument("--in-call", action="store_true")
    parser.add_argument("--resume", action="store_true")
    return parser.parse_args()


def _graph(args: argparse.Namespace) -> Any:
    def charged(key: str) -> str:
        append(args.charges, f"charge {key} {os.getpid()}")
        if args.in_call and not args.resume:  # killed before the outcome is stored
            os.kill(os.getpid(), signal.SIGKILL)
        return f"receipt-{key[-6:]}"

    def reconcile(key: str) -> str | None:
        """Ask the outside system whether the charge was made (CHARGES)."""
        made = Path(args.charges).exists() and key in Path(args.charges).read_text().split()
        return f"receipt-{key[-6:]}" if made else None

    def after_charge() -> None:
        if not args.resume:  # killed right after the effect returned
            os.kill(os.getpid(), signal.SIGKILL)

    if args.is_async:

        @side_effect(name="charge", reconcile=reconcile)
        async def acharge(*, idempotency_key: str) -> str:
            return charged(idempotency_key)

        def amake(name: str) -> object:
            async def node(state: DoneState) -> dict[str, list[str]]:
                append(args.ledger, f"{name} {os.getpid()}")
                if name == "s4":
                    await acharge()
                    after_charge()
                await asyncio.sleep(0.02)
                return {"done": [name]}

            return node

        return chain(ResilientStateGraph(DoneState), STEPS, amake)

    @side_effect(name="charge", reconcile=reconcile)
    def charge(*, idempotency_key: str) -> str:
        return charged(idempotency_key)

    def make(name: str) -> object:
        def node(state: DoneState) -> dict[str, list[str]]:
            append(args.ledger, f"{name} {os.getpid()}")
            if name == "s4":
                charge()
                after_charge()
            return {"done": [name]}

        return node

    return chain(ResilientStateGraph(DoneState), STEPS, make)


def _report(out: dict[str, Any], effects: Any) -> None:
    stored = [[e.name, e.status, e.how] for e in effects]
    print(
        json.dumps({"status": out["resilience"]["status"], "done": out["done"], "effects": stored})
    )


async def _amain(args: argparse.Namespace) -> None:
    builder = _graph(args)
    cm = AsyncResilientRedisSaver.from_conn_string(args.url, store_retry=RETRY)
    async with cm as saver:
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": args.thread}}
        out = await graph.ainvoke(None if args.resume else {"done": []}, config)
        _report(out, await saver.alist_effects(args.thread))


def main() -> None:
    args = _args()
    if args.is_async:
        asyncio.run(_amain(args))
        return
    builder = _graph(args)
    with ResilientRedisSaver.from_conn_string(args.url, store_retry=RETRY) as saver:
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": args.thread}}
        out = graph.invoke(None if args.resume else {"done": []}, config)
        _report(out, saver.list_effects(args.thread))


if __name__ == "__main__":
    main()
