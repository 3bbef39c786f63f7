"""Drive examples/agent_server's ``langgraph dev`` (on 127.0.0.1:2024) with langgraph_sdk.

    python client.py

One run that succeeds (its flaky step retried, its email sent once), one that
ends with a partial result (an unknown channel), finished through
``POST /resilience/threads/{id}/retry``; then the report and metrics routes.
"""

from __future__ import annotations

import asyncio
import json
import sys

import httpx
from langgraph_sdk import get_client

URL = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:2024"


async def main() -> None:
    client = get_client(url=URL, api_key=None)
    async with httpx.AsyncClient(base_url=URL, timeout=30) as http:
        ok = (await client.threads.create())["thread_id"]
        first = {"topic": "checkpoints", "to": "me@example.com"}
        out = await client.runs.wait(ok, "report", input=first)
        print("run 1:", out["resilience"]["status"], "receipt", out["receipt"])

        short = (await client.threads.create())["thread_id"]
        out = await client.runs.wait(short, "report", input={"topic": "leases", "channel": "tv"})
        log = out["resilience"]
        print("run 2:", log["status"], "failed at", log["failed_step"]["path"])
        fix = {"update": {"channel": "blog"}}
        run = (await http.post(f"/resilience/threads/{short}/retry", json=fix)).json()
        out = await client.runs.join(short, run["run_id"])
        print("run 2 retried:", out["resilience"]["status"], out["published"])

        report = (await http.get(f"/resilience/threads/{ok}/report")).json()
        print("steps:", [(s["path"], s["attempts"]) for s in report["steps"]])
        metrics = (await http.get("/resilience/metrics")).json()
        shown = ("runs_ended", "partial_completion_rate", "recoveries_by_kind")
        print(json.dumps({k: metrics[k] for k in shown}))


if __name__ == "__main__":
    asyncio.run(main())
