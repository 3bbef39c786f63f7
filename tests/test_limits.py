"""Shared limits: concurrency, rate and a 429 that pauses every process.

The cross-process claims run real processes on one store (SQLite file,
Postgres and Redis: `limit_store`), each fanning out to tries of one node under a `Limit`; what the
tries logged of their own start and end times is the evidence. A holder is
SIGKILLed while it holds a slot, and its slot must be free within a second.
"""

from __future__ import annotations

import inspect
import json
import logging
import signal
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import (
    CHECKPOINTERS,
    REDIS_SAVERS,
    Harness,
    harness,
    open_redis,
    require_postgres,
)
from helpers import read_ledger, sql, wait_until
from spawn import Process, spawn

from langgraph_resilience import (
    Backoff,
    ConfigError,
    Limit,
    NodePolicy,
    ResilientState,
    ResilientStateGraph,
    Worker,
)
from langgraph_resilience.agents import CallPolicy
from langgraph_resilience.checkpoint.ledger import _releases
from langgraph_resilience.checkpoint.store._schema import LIMIT_HOLDS, LIMIT_STARTS, LIMITS
from langgraph_resilience.checkpoint.store._store import Stmt
from langgraph_resilience.errors import LimitBusy
from langgraph_resilience.limits import alimit_states, limit_states
from langgraph_resilience.limits._admit import Admit, Held, Release
from langgraph_resilience.limits._drive import admit_async, admit_sync, release_async, release_sync

SCRIPT = str(Path(__file__).parent / "scripts" / "limit_worker.py")


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def limit_store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(backend, target) as the ``store`` fixture's, and Redis: ``#<key prefix>``
    on the tests' Redis (flushed after)."""
    if request.param == "postgres":
        require_postgres()
        return "postgres", request.getfixturevalue("pg_dsn")
    if request.param == "redis":
        from redis_servers import REDIS_DOWN, flush_prefix

        if REDIS_DOWN is not None:
            pytest.skip(REDIS_DOWN)
        prefix = f"t{uuid.uuid4().hex[:12]}"
        request.addfinalizer(lambda: flush_prefix(prefix))
        return "redis", f"#{prefix}"
    return "sqlite", str(tmp_path / "store.db")


#: The savers the in-process tests of a release run on: the fixture's, and Redis.
LIMIT_SAVERS = list(dict.fromkeys([*CHECKPOINTERS, *REDIS_SAVERS]))


@pytest.fixture(params=LIMIT_SAVERS)
async def limit_saver(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    """The ``checkpointer`` fixture's savers, and the Redis savers always."""
    async with AsyncExitStack() as stack:
        yield await harness(request.param, request, tmp_path, stack)


def saver_of(backend: str, target: str, stack: ExitStack) -> Any:
    if backend == "redis":
        import warnings

        from redis_servers import REDIS_URL

        from langgraph_resilience.checkpoint.redis import ResilientRedisSaver

        url, _, prefix = target.rpartition("#")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the machine's Redis keeps no disk
            redis_saver = stack.enter_context(
                ResilientRedisSaver.from_conn_string(url or REDIS_URL, prefix=prefix)
            )
            redis_saver.setup()
        return redis_saver
    if backend == "sqlite":
        from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

        saver = stack.enter_context(ResilientSqliteSaver.from_conn_string(target))
    else:
        from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver

        saver = stack.enter_context(ResilientPostgresSaver.from_conn_string(target))
    saver.setup()
    return saver


def run_procs(store: tuple[str, str], ledger: Path, *options: str, procs: int = 3) -> None:
    """``procs`` limit_worker processes on one store; each must end in success."""
    backend, target = store
    with ExitStack() as stack:
        saver_of(backend, target, stack)  # set up once, before three processes race to
    # The second process runs the async saver and ainvoke: the twins share one limit.
    children = [
        spawn(SCRIPT, backend, target, str(n), str(ledger), *options, *(["--async"] * (n == 1)))
        for n in range(procs)
    ]
    for child in children:
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        assert json.loads(out.splitlines()[-1])["status"] == "success", out


def times(ledger: Path, what: str) -> list[tuple[str, float]]:
    return [(f"{p}/{i}", float(t)) for w, p, i, t in read_ledger(ledger) if w == what]


def name() -> str:
    return f"api-{uuid.uuid4().hex[:8]}"


# -- across processes ----------------------------------------------------------------------


def test_concurrency_is_shared_by_every_process(
    limit_store: tuple[str, str], tmp_path: Path
) -> None:
    ledger = tmp_path / "tries.log"
    run_procs(limit_store, ledger, "--limit", name(), "--concurrency", "2", "--hold", "0.08")
    starts, ends = dict(times(ledger, "start")), dict(times(ledger, "end"))
    assert len(starts) == len(ends) == 18
    # The most tries at once, from their own start and end times.
    events = sorted([(t, 1) for t in starts.values()] + [(t, -1) for t in ends.values()])
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    assert most == 2


def test_rate_is_shared_by_every_process(limit_store: tuple[str, str], tmp_path: Path) -> None:
    ledger = tmp_path / "tries.log"
    options = ("--limit", name(), "--rate", "4", "--per", "1.0", "--tries", "4")
    run_procs(limit_store, ledger, *options)
    starts = sorted(t for _, t in times(ledger, "start"))
    ends = [t for _, t in times(ledger, "end")]
    assert len(starts) == 12
    for t in starts:  # any second: four starts, one more for the processes' clocks
        assert len([s for s in starts if t <= s < t + 1.0]) <= 5
    assert max(ends) - starts[0] >= 2.0


def test_a_429_pauses_the_limit_for_every_process(
    limit_store: tuple[str, str], tmp_path: Path
) -> None:
    ledger = tmp_path / "tries.log"
    options = ("--limit", name(), "--concurrency", "3", "--tries", "4", "--hold", "0.1")
    run_procs(limit_store, ledger, *options, "--retry-after", "1.5")
    (failed,) = [t for _, t in times(ledger, "fail")]
    starts = [t for _, t in times(ledger, "start")]
    # Tries admitted before the pause was stored may log their start a moment later.
    during = [t - failed for t in starts if failed + 0.1 < t < failed + 1.5 - 0.02]
    assert during == []
    # The other processes' tries (four each) came after the 429: they waited, then ran.
    assert len([t for t in starts if t >= failed + 1.5 - 0.02]) >= 8


def test_a_killed_holder_frees_its_slot_at_once(
    limit_store: tuple[str, str], tmp_path: Path
) -> None:
    backend, target = limit_store
    ledger, limit = tmp_path / "tries.log", name()
    with ExitStack() as stack:
        saver = saver_of(backend, target, stack)
        options = ("--limit", limit, "--concurrency", "1", "--tries", "1", "--hold", "60")
        holder: Process = spawn(SCRIPT, backend, target, "0", str(ledger), *options)
        try:
            wait_until(lambda: times(ledger, "start"), 30, "the holder's try to start")
            probe = Admit([Limit(limit, concurrency=1)], 0.2)
            busy = admit_sync(saver, "probe", probe)
            assert isinstance(busy, LimitBusy) and busy.why == "full"
            holder.kill()
            killed = time.monotonic()
            held = admit_sync(saver, "probe", Admit(probe.limits, 5.0))
            assert isinstance(held, Held)
            assert time.monotonic() - killed < 1.0
            release_sync(Release(held))
        finally:
            if holder.poll() is None:
                holder.kill()
            holder.wait(10)
        assert holder.returncode == -signal.SIGKILL


# -- in one process --------------------------------------------------------------------------


class State(ResilientState, total=False):
    n: int


def one_node_graph(policy: NodePolicy, calls: list[float]) -> Any:
    g = ResilientStateGraph(State)

    def work(state: State) -> State:
        calls.append(time.time())
        return {"n": 1}

    g.add_node("work", work, policy=policy)
    g.set_entry_point("work")
    g.set_finish_point("work")
    return g


def pause(saver: Any, limit: Limit, seconds: float) -> None:
    """Pause ``limit`` in the store, as a try holding it that met a 429 would."""
    held = admit_sync(saver, "setup", Admit([limit], 1.0))
    assert isinstance(held, Held)
    release_sync(Release(held, seconds, "RateLimited: 429"))


def test_a_pause_longer_than_max_wait_fails_the_try_clearly_without_a_worker(
    limit_store: tuple[str, str],
) -> None:
    limit, calls = Limit(name(), concurrency=1), []
    policy = NodePolicy(retry=Backoff(max_attempts=3, max_wait=0.5), limits=[limit])
    with ExitStack() as stack:
        saver = saver_of(*limit_store, stack)
        pause(saver, limit, 30)
        graph = one_node_graph(policy, calls).compile(checkpointer=saver)
        began = time.monotonic()
        out = graph.invoke({"n": 0}, {"configurable": {"thread_id": name()}})
        assert time.monotonic() - began < 5
        (state,) = [s for s in limit_states(saver) if s.name == limit.name]
    assert calls == []
    failed = out["resilience"]["failed_step"]
    assert out["resilience"]["status"] == "partial_complete"
    assert failed["error_type"] == "LimitBusy" and "is paused for" in failed["message"]
    assert state.paused_for > 25 and state.pause_reason == "RateLimited: 429"


def end_pause(backend: str, target: str, limit: Limit, run_id: str) -> None:
    """End ``limit``'s pause and the wait of the run it released, in the store."""
    if backend == "redis":
        from redis_servers import REDIS_URL, patch_run, run_record

        prefix = target.rpartition("#")[2]
        found = run_record(prefix, run_id)
        assert found is not None
        patch_run(prefix, run_id, not_before=None)
        client = redis.Redis.from_url(REDIS_URL)
        try:
            client.hdel(f"{prefix}:lim:{{{limit.name}}}:def", "paused_until")
            client.zadd(f"{prefix}:runs:queued", {f"{found[0]}\0{run_id}": 0})
        finally:
            client.close()
        return
    sql(backend, target, f"UPDATE {LIMITS.name} SET paused_until = NULL")
    sql(backend, target, "UPDATE resilience_runs SET not_before = NULL WHERE run_id = ?", (run_id,))


def test_under_a_worker_a_long_pause_releases_the_run_until_it_ends(
    limit_store: tuple[str, str],
) -> None:
    backend, target = limit_store
    limit, calls = Limit(name(), rate=5, per=1.0), []
    policy = NodePolicy(retry=Backoff(max_attempts=3, max_wait=0.5), limits=[limit])
    with ExitStack() as stack:
        saver = saver_of(backend, target, stack)
        pause(saver, limit, 3600)
        worker = Worker(one_node_graph(policy, calls), checkpointer=saver, poll_interval=0.05)
        run_id = worker.submit({"n": 0})
        assert worker.run(until_idle=True) == {run_id: "queued"}
        record = saver.read_run(run_id)
        assert record.not_before is not None and record.not_before > time.time() + 3500
        assert calls == []
        # The pause over (in the store's clock), the run is taken again and runs.
        end_pause(backend, target, limit, run_id)
        assert worker.run(until_idle=True) == {run_id: "success"}
    assert len(calls) == 1


def test_waits_are_counted_per_limit(limit_store: tuple[str, str]) -> None:
    limit = Limit(name(), rate=1, per=0.3)
    with ExitStack() as stack:
        saver = saver_of(*limit_store, stack)
        first = admit_sync(saver, "a", Admit([limit], 1.0))
        second = admit_sync(saver, "b", Admit([limit], 1.0))  # waits ~0.3 s for the window
        third = admit_sync(saver, "c", Admit([limit], 1.0))  # reports the wait in its ask
        assert all(isinstance(h, Held) for h in (first, second, third))
        assert isinstance(second, Held) and 0.2 < second.waited < 0.6
        (state,) = [s for s in limit_states(saver) if s.name == limit.name]
    assert state.waited >= 0.2 and state.rate == 1 and state.holders == ()


def test_a_name_reused_with_other_numbers_is_refused(limit_store: tuple[str, str]) -> None:
    shared = name()
    with ExitStack() as stack:
        saver = saver_of(*limit_store, stack)
        held = admit_sync(saver, "a", Admit([Limit(shared, concurrency=2)], 1.0))
        assert isinstance(held, Held)
        release_sync(Release(held))
        with pytest.raises(ConfigError, match="same numbers") as raised:
            admit_sync(saver, "b", Admit([Limit(shared, concurrency=3)], 1.0))
    assert "concurrency=2" in str(raised.value) and "concurrency=3" in str(raised.value)


def test_several_limits_are_taken_all_at_once_or_not_at_all(
    limit_store: tuple[str, str],
) -> None:
    """A try under a free limit and a full one holds neither while it waits:
    what the free one took for it is given back (on Redis, by a second round
    trip), so another try gets the free one at once."""
    first = name()  # the free one first by name: it is asked for before the full one
    free, full = Limit(first, concurrency=1, rate=1, per=60), Limit(f"{first}-b", concurrency=1)
    with ExitStack() as stack:
        saver = saver_of(*limit_store, stack)
        holder = admit_sync(saver, "holder", Admit([full], 1.0))
        assert isinstance(holder, Held)
        busy = admit_sync(saver, "both", Admit([free, full], 0.1))
        assert isinstance(busy, LimitBusy) and busy.limit == full.name and busy.why == "full"
        states = {s.name: s for s in limit_states(saver)}
        assert states[free.name].holders == () and states[free.name].starts == 0
        alone = admit_sync(saver, "alone", Admit([free], 0.0))  # its rate too: 1 a minute
        assert isinstance(alone, Held)
        release_sync(Release(alone))
        release_sync(Release(holder))


def redis_saver(stack: ExitStack) -> Any:
    """A sync Redis saver under a key prefix of its own (flushed after)."""
    from redis_servers import REDIS_DOWN, flush_prefix

    if REDIS_DOWN is not None:
        pytest.skip(REDIS_DOWN)
    prefix = f"t{uuid.uuid4().hex[:12]}"
    stack.callback(flush_prefix, prefix)
    return saver_of("redis", f"#{prefix}", stack)


def test_a_redis_acquire_sent_again_after_a_lost_reply_keeps_what_it_took() -> None:
    """The driver sends a batch again after a lost reply: the acquire that ran
    finds its own hold and start, and admits again instead of counting them."""
    from langgraph_resilience._util._process import process_id
    from langgraph_resilience.limits._admit import asks_of

    limit = Limit(name(), concurrency=1, rate=1, per=60)
    with ExitStack() as stack:
        saver = redis_saver(stack)
        asks, me = asks_of([limit]), process_id()
        assert saver.limits.acquire(asks, "hold-1", me, 30.0).admitted
        assert saver.limits.acquire(asks, "hold-1", me, 30.0).admitted  # sent again
        other = saver.limits.acquire(asks, "hold-2", me, 30.0)
        assert other.why == "full" and other.holders == (me,)
        (state,) = [s for s in limit_states(saver) if s.name == limit.name]
        assert state.holders == (me,) and state.starts == 1


@pytest.mark.parametrize("odd", ["plain", "}x", "a{b}", "#tag", "a}b"])
def test_each_limits_scripts_touch_one_slot_of_its_own(odd: str) -> None:
    """Redis Cluster: every script of a limit names keys of one slot (its hash
    tag), whatever its name; a name written like another's tag has other keys."""
    from redis.crc import key_slot

    from langgraph_resilience.checkpoint.redis.ledger._limits import acquire
    from langgraph_resilience.checkpoint.redis.store._keys import limit_keys, limit_tag
    from langgraph_resilience.checkpoint.redis.store._ops import Place
    from langgraph_resilience.limits._admit import asks_of

    limits = [Limit(odd, concurrency=2, rate=3, per=1.0), Limit("other", concurrency=1)]
    batch = next(acquire(Place("lgr", 0), asks_of(limits), "h", "me", 30.0, (), "", 0.0))
    slots = []
    for command in batch[1:]:  # one EVALSHA a limit (the first: the set of names)
        assert command[0] == "EVALSHA" and command[2] == 3
        slots.append({key_slot(k.encode()) for k in command[3:6]})
    assert all(len(s) == 1 for s in slots) and len(slots) == 2
    assert limit_keys("lgr", odd) != limit_keys("lgr", "#" + limit_tag(odd))


def test_a_redis_hold_is_renewed_by_the_servers_clock_until_freed() -> None:
    from langgraph_resilience._util._process import process_id
    from langgraph_resilience.limits._admit import asks_of

    limit = Limit(name(), concurrency=1)
    with ExitStack() as stack:
        saver = redis_saver(stack)
        asks, me = asks_of([limit]), "elsewhere|1|"  # a holder no one here can judge
        assert saver.limits.acquire(asks, "h", me, 0.3).admitted
        time.sleep(0.2)
        assert saver.limits.renew("h", 0.3, (limit.name,))  # 0.3 s more from now
        time.sleep(0.2)  # past the first lease, within the renewed one
        assert saver.limits.acquire(asks, "h2", process_id(), 30.0).why == "full"
        time.sleep(0.2)  # past the renewed lease: the hold is dropped
        assert saver.limits.acquire(asks, "h2", process_id(), 30.0).admitted
        assert not saver.limits.renew("h", 0.3, (limit.name,))  # no longer held


def test_redis_limits_keep_the_servers_clock_not_a_clients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process whose clock is an hour ahead pauses a limit for 2 s, waits it
    out and takes its slot: a process with the right clock then finds the pause
    over and the slot held (by the clients' clocks, it would find the limit
    paused for an hour more)."""
    limit = Limit(name(), concurrency=1)
    with ExitStack() as stack:
        saver = redis_saver(stack)
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 3600)
        pause(saver, limit, 2.0)
        skewed = admit_sync(saver, "ahead", Admit([limit], 3.0))  # waits out the pause
        monkeypatch.setattr(time, "time", real)
        assert isinstance(skewed, Held) and 1.5 < skewed.waited < 2.8
        busy = admit_sync(saver, "right", Admit([limit], 0.1))
        assert isinstance(busy, LimitBusy) and busy.why == "full"
        (state,) = [s for s in limit_states(saver) if s.name == limit.name]
        assert len(state.holders) == 1
        release_sync(Release(skewed))


@pytest.mark.parametrize("is_async", [False, True])
async def test_a_redis_saver_closing_frees_the_slots_still_waiting(
    is_async: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release waits for the saver's next write (here the bound is a minute):
    the saver closing stores it, as the SQL savers do."""
    from redis_servers import REDIS_DOWN, flush_prefix

    if REDIS_DOWN is not None:
        pytest.skip(REDIS_DOWN)
    monkeypatch.setattr(_releases, "BOUND", 60.0)
    limit, prefix = Limit(name(), concurrency=1), f"t{uuid.uuid4().hex[:12]}"
    try:
        async with AsyncExitStack() as stack:
            saver = await open_redis(is_async, stack, prefix)
            if is_async:
                held = await admit_async(saver, "a", Admit([limit], 1.0))
                await release_async(Release(held))  # type: ignore[arg-type]
            else:
                held = admit_sync(saver, "a", Admit([limit], 1.0))
                release_sync(Release(held))  # type: ignore[arg-type]
            assert holds_of("redis", prefix, limit) != []  # waiting for a write
        assert holds_of("redis", prefix, limit) == []
    finally:
        flush_prefix(prefix)


def test_the_heartbeat_renews_a_running_trys_hold_on_redis() -> None:
    """The process's heartbeat (`_drive._renew_live`) renews each running try's
    hold on the limits it holds (Redis finds a hold by its limit)."""
    from langgraph_resilience.checkpoint.redis.store._keys import limit_keys
    from langgraph_resilience.limits import _drive

    limit = Limit(name(), concurrency=1)
    with ExitStack() as stack:
        saver = redis_saver(stack)
        holds = limit_keys(saver.place.prefix, limit.name).holds

        def lease_end() -> float:
            ((_, value),) = saver.conn.hgetall(holds).items()
            return float(value.decode().split("\n")[1])

        held = admit_sync(saver, "a", Admit([limit], 1.0))
        assert isinstance(held, Held)
        first = lease_end()
        time.sleep(0.05)
        _drive._renew_live()
        assert lease_end() - first >= 40  # ms: renewed from the server's now
        release_sync(Release(held))
        _drive._renew_live()  # a released hold is not renewed again
        saver.limits.flush()
        assert saver.conn.hgetall(holds) == {}


def test_an_agents_call_policy_holds_its_limits_as_a_node_does() -> None:
    from langgraph_resilience.agents._policy import node_policy

    limit = Limit(name(), rate=10, per=60)
    assert node_policy(CallPolicy(limits=[limit])).limits == (limit,)


def test_limits_need_a_resilient_saver() -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    policy = NodePolicy(limits=[Limit(name(), concurrency=1)])
    graph = one_node_graph(policy, []).compile(checkpointer=InMemorySaver())
    with pytest.raises(ConfigError, match="resilient saver"):
        graph.invoke({"n": 0}, {"configurable": {"thread_id": "t"}})


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: Limit("x", concurrency=0), "0 would admit nothing"),
        (lambda: Limit("x", rate=0), "rate must be an int >= 1"),
        (lambda: Limit("x"), "bounds nothing"),
        (lambda: Limit("x", rate=5, per=None), "per must be the rate's window"),  # type: ignore[arg-type]
        (lambda: Limit("x", rate=5, per=0), "per must be seconds > 0"),
        (lambda: Limit("", concurrency=1), "non-empty str"),
        (lambda: NodePolicy(limits=Limit("x", concurrency=1)), "a list of"),  # type: ignore[arg-type]
        (lambda: NodePolicy(limits=["x"]), "Limit objects only"),  # type: ignore[list-item]
        (
            lambda: CallPolicy(limits=[Limit("x", concurrency=1), Limit("x", rate=2)]),
            "'x' twice",
        ),
    ],
)
def test_bad_values_are_refused_with_what_would_be_right(make: Any, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        make()


def test_the_tables_match_their_definitions(store: tuple[str, str]) -> None:
    from test_schema import live_columns

    backend, target = store
    with ExitStack() as stack:
        saver_of(backend, target, stack)
    for table in (LIMITS, LIMIT_HOLDS, LIMIT_STARTS):
        assert live_columns(backend, target, table.name) == list(table.names)


async def test_an_agents_model_call_under_a_limit_pauses_it_on_a_429(
    limit_saver: Harness, tmp_path: Path
) -> None:
    pytest.importorskip("langchain.agents")
    import asyncio

    from agent_worker import PLAN, ScriptedModel, research_agent
    from test_agents import QUESTION, RateLimited, cfg

    from langgraph_resilience.limits import alimit_states

    limit = Limit(name(), concurrency=1)
    model = ScriptedModel(plan=PLAN, errors=[RateLimited("0.3")], calls=[])
    agent = research_agent(
        limit_saver.saver,
        tmp_path,
        chat_model=model,
        sleep=time.sleep,
        asleep=asyncio.sleep,
        model=CallPolicy(retry=Backoff(max_attempts=3, initial_interval=0.01), limits=[limit]),
    )
    out = await limit_saver.invoke(agent, QUESTION, cfg())
    assert out["messages"][-1].content == "Report sent."
    if limit_saver.is_async:
        found = await alimit_states(limit_saver.saver)
    else:
        found = await asyncio.to_thread(limit_states, limit_saver.saver)
    (state,) = [s for s in found if s.name == limit.name]
    assert state.pause_reason is not None and "429" in state.pause_reason
    assert state.holders == ()  # every call let go of its slot


def test_the_command_shows_each_limits_holders_rate_and_pause(
    limit_store: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    from redis_servers import REDIS_URL

    from langgraph_resilience.cli import main

    backend, target = limit_store
    # on Redis: the key prefix after the URL's #, as every command takes it
    db = ["--db", f"{REDIS_URL}{target}" if backend == "redis" else target]
    limit = Limit(name(), concurrency=2, rate=10, per=60)
    with ExitStack() as stack:
        saver = saver_of(backend, target, stack)
        held = admit_sync(saver, "a", Admit([limit], 1.0))
        pause(saver, Limit(limit.name, concurrency=2, rate=10, per=60), 120)
        capsys.readouterr()
        assert main(["limits", *db, "--json"]) == 0
        (shown,) = [s for s in json.loads(capsys.readouterr().out) if s["name"] == limit.name]
        assert main(["limits", *db]) == 0
        table = capsys.readouterr().out
        if backend == "redis":  # the deprecated spelling: said, and read the same
            prefix = target.lstrip("#")
            assert main(["limits", "--db", REDIS_URL, "--prefix", prefix, "--json"]) == 0
            said = capsys.readouterr()
            assert "--prefix is deprecated" in said.err and f"#{prefix}'" in said.err
            (alias,) = [s for s in json.loads(said.out) if s["name"] == limit.name]
            assert (alias["holders"], alias["starts"]) == (shown["holders"], shown["starts"])
            assert main(["limits", "--db", f"{REDIS_URL}#other", "--prefix", prefix]) == 2
            assert "disagree" in capsys.readouterr().err
        assert isinstance(held, Held)
        release_sync(Release(held))
    assert len(shown["holders"]) == 1 and shown["starts"] == 2 and shown["paused_for"] > 100
    assert limit.name in table and "1/2" in table and "2/10 per 60 s" in table


# -- what a release costs --------------------------------------------------------------------


def count_writes(saver: Any) -> list[int]:
    """Count the saver's write transactions (each try of each write) from now on;
    on Redis, the operations it runs (each a round trip or more)."""
    seen = [0]
    attr = "_run" if hasattr(saver, "place") else "_transact"
    transact = getattr(saver, attr)
    if inspect.iscoroutinefunction(transact):

        async def acounted(*args: Any, **kwargs: Any) -> Any:
            seen[0] += 1
            return await transact(*args, **kwargs)

        setattr(saver, attr, acounted)
    else:

        def counted(*args: Any, **kwargs: Any) -> Any:
            seen[0] += 1
            return transact(*args, **kwargs)

        setattr(saver, attr, counted)
    return seen


def uncount(saver: Any) -> None:
    delattr(saver, "_run" if hasattr(saver, "place") else "_transact")


def holds_of(backend: str, target: str, limit: Limit) -> list[Any]:
    if backend == "redis":  # target: the saver's key prefix
        from redis_servers import REDIS_URL

        client = redis.Redis.from_url(REDIS_URL)
        try:
            return list(client.hkeys(f"{target}:lim:{{{limit.name}}}:holds"))
        finally:
            client.close()
    return sql(
        backend, target, f"SELECT hold FROM {LIMIT_HOLDS.name} WHERE name = ?", (limit.name,)
    )


async def test_a_tries_release_rides_its_writes(
    limit_saver: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a concurrency limit a try costs one write more than without: its
    acquire. Its slot is freed in the transaction of the node's own writes, after
    the try ended (no release waits for the bound here: it is a minute)."""
    monkeypatch.setattr(_releases, "BOUND", 60.0)
    backend, target, saver = limit_saver.backend, limit_saver.target, limit_saver.saver
    limit, during = Limit(name(), concurrency=1), []

    def work(state: State) -> State:
        during.append(len(holds_of(backend, target, limit)))
        return {"n": 1}

    def graph(limits: list[Limit]) -> Any:
        g = ResilientStateGraph(State)
        g.add_node("work", work, policy=NodePolicy(limits=limits))
        g.set_entry_point("work")
        g.set_finish_point("work")
        return g.compile(checkpointer=saver)

    plain, limited = graph([]), graph([limit])
    await limit_saver.invoke(plain, {"n": 0}, {"configurable": {"thread_id": name()}})
    await limit_saver.invoke(limited, {"n": 0}, {"configurable": {"thread_id": name()}})
    writes = count_writes(saver)
    costs = []
    for g in (plain, limited):
        writes[0] = 0
        await limit_saver.invoke(g, {"n": 0}, {"configurable": {"thread_id": name()}})
        costs.append(writes[0])
        assert holds_of(backend, target, limit) == []  # freed as the run ended
    assert costs[1] - costs[0] == 1
    assert during == [0, 1, 0, 1]  # held while its try ran


async def test_a_release_no_write_carries_is_stored_within_the_bound(
    limit_saver: Harness,
) -> None:
    """A try's slot with no write after it (or whose next write fails) is freed
    on its own within `_releases.BOUND`."""
    import asyncio

    backend, target, saver = limit_saver.backend, limit_saver.target, limit_saver.saver
    limit = Limit(name(), concurrency=1)

    def broken() -> Any:
        yield Stmt("SELECT * FROM no_such_table", fetch=True)

    def unknown_command() -> Any:
        yield [("no_such_table",)]

    def write_that_fails() -> Any:
        """A write of the saver that fails, with what rides it."""
        if backend != "redis":
            return saver._write(broken)
        return saver._run(saver._riding(unknown_command()))

    for next_write_fails in (False, True):
        if limit_saver.is_async:
            held = await admit_async(saver, "a", Admit([limit], 1.0))
        else:
            held = await asyncio.to_thread(admit_sync, saver, "a", Admit([limit], 1.0))
        assert isinstance(held, Held)
        writes = count_writes(saver)
        if limit_saver.is_async:
            await release_async(Release(held))
        else:
            release_sync(Release(held))
        ended = time.monotonic()
        assert writes[0] == 0  # the release itself writes nothing
        if limit_saver.is_async:
            (state,) = [x for x in await alimit_states(saver) if x.name == limit.name]
        else:
            (state,) = [x for x in limit_states(saver) if x.name == limit.name]
        assert state.holders == ()  # this saver's reads see it freed already
        if next_write_fails:
            with pytest.raises(Exception, match="no_such_table"):
                if limit_saver.is_async:
                    await write_that_fails()
                else:
                    await asyncio.to_thread(write_that_fails)
        while holds_of(backend, target, limit):
            assert time.monotonic() - ended < 5, "the slot was never freed"
            await asyncio.sleep(0.01)
        assert time.monotonic() - ended < 1.0
        uncount(saver)


def test_a_paused_limit_is_logged_once_not_once_per_branch(
    limit_store: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    from langgraph.types import Send

    limit = Limit(name(), concurrency=1)
    policy = NodePolicy(retry=Backoff(max_attempts=2, max_wait=0.2), limits=[limit])
    g = ResilientStateGraph(State)
    g.add_node("work", lambda state: {"n": 1}, policy=policy)
    g.add_conditional_edges("__start__", lambda s: [Send("work", {"n": i}) for i in range(5)])
    g.set_finish_point("work")
    with ExitStack() as stack:
        saver = saver_of(*limit_store, stack)
        pause(saver, limit, 30)
        graph = g.compile(checkpointer=saver)
        with caplog.at_level(logging.DEBUG, logger="langgraph_resilience"):
            out = graph.invoke({"n": 0}, {"configurable": {"thread_id": name()}})
    assert out["resilience"]["status"] == "partial_complete"
    busy = [r for r in caplog.records if getattr(r, "event", None) == "limit_busy"]
    assert len(busy) >= 5  # every branch met the pause (each still told, at DEBUG)
    loud = [r for r in busy if r.levelno >= logging.WARNING]
    assert len(loud) == 1 and "is paused for" in loud[0].getMessage()
