"""A process for the archival crash tests: archives every idle thread of a store,
and kills itself with SIGKILL at the stage it is told.

    python tests/archive_worker.py BACKEND TARGET ARCHIVE_URL STAGE

STAGE: ``before_put`` (claimed and read, nothing put), ``mid_put`` (after the
second object is put), ``after_put`` (every object confirmed, before the hot
delete) or ``none`` (finish). Prints the report as one JSON line when it finishes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from langgraph_resilience import Archive
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

CLAIM_TTL = 0.3


def main() -> None:
    backend, target, url, stage = sys.argv[1:5]
    archive = Archive(url)
    puts = 0
    put_new = archive.put_new

    def counting_put(key: str, body: bytes) -> Any:
        nonlocal puts
        outcome = put_new(key, body)
        puts += 1
        if stage == "mid_put" and puts == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return outcome

    archive.put_new = counting_put  # type: ignore[method-assign]

    def pause(thread_id: str, at: str) -> None:
        if at == stage:
            os.kill(os.getpid(), signal.SIGKILL)

    cls: Any = ResilientSqliteSaver if backend == "sqlite" else ResilientPostgresSaver
    with cls.from_conn_string(target, archive=archive) as saver:
        report = saver.archive_idle(0, claim_ttl=CLAIM_TTL, _pause=pause)
    print(json.dumps({"archived": report.archived, "failed": list(report.failed)}))


if __name__ == "__main__":
    main()
