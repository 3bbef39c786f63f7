"""The examples run as their docstrings say, and each passes `recovery_suite`
(the payment flow's payout stops for a person instead, as designed)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import require_postgres

from examples import multi_worker, payment_flow, research_agent
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.testing import CASES_ENV, recovery_suite


def config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


# -- the research agent ------------------------------------------------------------------


def test_research_agent_answers_with_its_tools_and_emails_once(tmp_path: Path) -> None:
    outbox = research_agent.Outbox()
    with ResilientSqliteSaver.from_conn_string(str(tmp_path / "r.db")) as saver:
        graph = research_agent.build_graph(saver, outbox)
        out = graph.invoke({"question": research_agent.QUESTION}, config("q"))
        paths = {s["path"] for s in saver.step_history("q")}
    assert out["resilience"]["status"] == "success" and out["emailed"] is True
    for topic, text in research_agent.CORPUS.items():  # each branch searched its topic
        assert f"- {topic}: {text}" in out["report"]
    assert {"plan", "write_report", "send_report"} <= paths
    assert any(p.startswith("research") for p in paths)
    assert [m["body"] for m in outbox.sent] == [out["report"]]


def test_research_agent_passes_the_recovery_suite() -> None:
    outbox = research_agent.Outbox()
    report = recovery_suite(
        lambda saver: research_agent.build_graph(saver, outbox),
        {"question": research_agent.QUESTION},
        effects={"email": outbox.sent},
    )
    report.assert_ok()
    steps = set(report.reference_steps)
    # the ToolNode loop inside the subgraph, in each Send branch
    assert {f"research[{n}]/tools" for n in range(3)} <= steps
    assert {"research[0]/agent", "research[0]/agent#2", "send_report"} <= steps
    assert report.reference_effects == {"email": 1}
    assert any("email_report" in c.name for c in report.family("effect_replay"))


def test_research_agent_runs_with_one_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(CASES_ENV, "1")
    assert research_agent.main() == 0
    out = capsys.readouterr().out
    assert "emailed to team@example.com: 1 email(s)" in out
    assert "recovery suite passed" in out


# -- the payment flow --------------------------------------------------------------------


def test_payment_flow_moves_each_amount_once(tmp_path: Path) -> None:
    world = payment_flow.World()
    with ResilientSqliteSaver.from_conn_string(str(tmp_path / "p.db")) as saver:
        out = payment_flow.build_graph(saver, world).invoke(payment_flow.ORDER, config("o"))
    assert out["resilience"]["status"] == "success"
    assert (out["charge_id"], out["payout_id"], out["receipt_id"]) == (
        "ch_ord-17",
        "po_ord-17",
        "msg_ord-17",
    )
    assert [e["amount"] for e in world.gateway.done] == [4200]
    assert [e["amount"] for e in world.bank.done] == [4074]  # less the gateway's 3 %


def test_payment_flow_under_the_recovery_suite_never_moves_money_twice() -> None:
    world = payment_flow.World()
    report = recovery_suite(
        lambda saver: payment_flow.build_graph(saver, world),
        payment_flow.ORDER,
        effects=world.counters(),
    )
    assert report.effects_duplicated == {} and report.completed_redone == ()
    report.assert_ok()
    # The payout's outcome is unknown after a crash right after the bank call:
    # on_unknown="raise" stops for a person; the suite settles it as the bank
    # shows (it saw the call return), and retry_failed finishes with one payout.
    payout = next(
        c for c in report.cases if c.name == "crash right after effect 'pay_out' call 1 returned"
    )
    assert payout.passed and payout.effects_duplicated == {}
    assert any("EffectOutcomeUnknown" in line for line in payout.evidence)
    assert any("a person settled" in line and "retry_failed" in line for line in payout.evidence)
    charge = next(c for c in report.cases if "effect 'charge_card'" in c.name)
    assert charge.passed  # reconcile found the charge: not charged again


def test_payment_flow_runs_with_one_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(CASES_ENV, "1")
    assert payment_flow.main() == 0
    out = capsys.readouterr().out
    assert "paid: charge ch_ord-17, payout po_ord-17, receipt msg_ord-17 (success)" in out
    assert "resumed: partial_complete at step 'payout'" in out
    assert "payouts made: 1 (not repeated)" in out
    assert "settled by hand (po_ord-17), then retry_failed: success, receipt msg_ord-17; " in out
    assert "payouts made: 1\n" in out


# -- the multi-worker deployment ------------------------------------------------------


def test_multi_worker_pipeline_passes_the_recovery_suite_on_postgres(
    pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(multi_worker.FEED_ENV, str(tmp_path / "feed.jsonl"))
    monkeypatch.setenv(multi_worker.STEP_SECONDS_ENV, "0")
    report = recovery_suite(
        multi_worker.build_graph,
        {"job": "j-1"},
        checkpointer_factory=lambda: multi_worker.open_saver(pg_dsn),
        effects={"post": lambda: len(multi_worker.feed().entries())},
    )
    report.assert_ok()
    assert report.reference_effects == {"post": 1}


@pytest.mark.crash
def test_multi_worker_deployment_survives_a_killed_worker(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    require_postgres()
    monkeypatch.setenv(multi_worker.STEP_SECONDS_ENV, "0.3")
    monkeypatch.setattr(sys, "argv", ["multi_worker", multi_worker.DEFAULT_DSN])
    code = multi_worker.main()
    out = capsys.readouterr().out
    assert code == 0, out
    assert "was killed with SIGKILL midway" in out
    assert out.count(": success (claimed") == 4
    taken = int(out.split("runs taken over from the dead worker: ")[1].split()[0])
    assert taken >= 1
