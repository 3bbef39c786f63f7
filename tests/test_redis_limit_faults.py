"""A shared `Limit` on a private Redis (AOF, ``appendfsync always``) SIGKILLed and
restarted from its AOF while processes (``scripts/limit_worker.py``) hold its
slots, one holder SIGKILLed too while the server is down: the limit is never
exceeded (from the tries' own start and end times), the survivors finish every
try, and afterwards no slot is left held (the dead holder's freed, the live
ones' released). LGR_FAULT_RUNS sets the trials (default 2)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from helpers import wait_until
from redis_servers import PrivateRedis, private_redis_server
from spawn import spawn
from test_limits import SCRIPT, name, saver_of, times

from langgraph_resilience import Limit
from langgraph_resilience.limits import limit_states
from langgraph_resilience.limits._admit import Admit, Held, Release
from langgraph_resilience.limits._drive import admit_sync, release_sync

FAULT_RUNS = int(os.environ.get("LGR_FAULT_RUNS", "2"))
CONCURRENCY, TRIES = 2, 4


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    yield from private_redis_server(tmp_path)


def started(ledger: Path) -> set[str]:
    return {k.partition("/")[0] for k, _ in times(ledger, "start")}


def holders(ledger: Path) -> list[str]:
    """The processes with a try started and not ended (holding a slot)."""
    ended = {k for k, _ in times(ledger, "end")}
    return [k.partition("/")[0] for k, _ in times(ledger, "start") if k not in ended]


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


@pytest.mark.faults
@pytest.mark.parametrize("trial", range(FAULT_RUNS))
def test_a_limit_holds_through_its_redis_sigkilled_and_a_holder_killed(
    private_redis: PrivateRedis, tmp_path: Path, trial: int
) -> None:
    ledger, limit = tmp_path / "tries.log", name()
    target = f"{private_redis.url}#lim"
    with ExitStack() as stack:
        saver_of("redis", target, stack)  # set up once, before the processes race to
    options = ("--limit", limit, "--concurrency", str(CONCURRENCY), "--tries", str(TRIES))
    hold = ("--hold", "0.25")
    procs = [spawn(SCRIPT, "redis", target, str(n), str(ledger), *options, *hold) for n in range(3)]
    try:
        # Every process past its saver's setup() (which does not retry: see docs), and
        # a slot held at the kill.
        wait_until(lambda: len(started(ledger)) == 3 and holders(ledger), 30, "slots taken")
        private_redis.kill()
        holding = holders(ledger) or ["2"]  # (its try ended meanwhile: a waiter dies)
        doomed = procs[int(holding[0])]
        doomed.kill()  # a holder dies while the server is down
        killed_at = time.time()
        time.sleep(0.2 * (trial % 3))
        private_redis.start()  # from its AOF
        for proc in procs:
            if proc is doomed:
                continue
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            assert '"status": "success"' in out.splitlines()[-1], out
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
    assert doomed.returncode == -signal.SIGKILL
    starts, ends = dict(times(ledger, "start")), dict(times(ledger, "end"))
    for proc in {"0", "1", "2"} - {holding[0]}:
        assert sum(k.startswith(f"{proc}/") for k in ends) == TRIES, (proc, ends)
    # A try the dead process never ended held its slot until the process died, at least.
    spans = [(t, ends.get(k, max(killed_at, t))) for k, t in starts.items()]
    assert most_at_once(spans) <= CONCURRENCY, spans
    with ExitStack() as stack:
        saver = saver_of("redis", target, stack)
        probe = Admit([Limit(limit, concurrency=CONCURRENCY)], 5.0)
        began = time.monotonic()
        held = [admit_sync(saver, f"probe{i}", probe) for i in range(CONCURRENCY)]
        assert all(isinstance(h, Held) for h in held), held
        assert time.monotonic() - began < 5  # the dead holder's slot was freed
        (state,) = [s for s in limit_states(saver) if s.name == limit]
        assert len(state.holders) == CONCURRENCY  # only the probes: nothing left behind
        for h in held:
            assert isinstance(h, Held)
            release_sync(Release(h))
