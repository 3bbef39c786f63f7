"""One of several processes setting up a fresh Postgres database at once
(tests/test_concurrent_setup.py).

    python tests/scripts/setup_worker.py DSN [async]

Connects, prints ``ready``, waits for a line on stdin (the test sends it to every
process at once), then calls ``setup()``; exits 0 on success, prints the error
and exits 1 otherwise.
"""

from __future__ import annotations

import asyncio
import sys

from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.postgres.aio import AsyncResilientPostgresSaver


def _wait() -> None:
    print("ready", flush=True)
    sys.stdin.readline()


async def _async(dsn: str) -> None:
    async with AsyncResilientPostgresSaver.from_conn_string(dsn) as saver:
        _wait()
        await saver.setup()


def main() -> int:
    dsn = sys.argv[1]
    try:
        if sys.argv[2:] == ["async"]:
            asyncio.run(_async(dsn))
        else:
            with ResilientPostgresSaver.from_conn_string(dsn) as saver:
                _wait()
                saver.setup()
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
