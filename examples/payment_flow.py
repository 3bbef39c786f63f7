"""A payment flow whose money movements are never repeated, checked by the recovery suite.

    python -m examples.payment_flow

An order is validated, its card is charged, the money is paid out to the
merchant's bank and a receipt is emailed. Each call that moves money or sends
mail is a `side_effect`:

- the card gateway can look a charge up by its idempotency key, so the charge
  has ``reconcile=gateway.find_charge``: after a crash between the charge and
  its record, the resumed run asks the gateway instead of charging again;
- the bank can not, so the payout has ``on_unknown="raise"``: after such a
  crash the run stops with a partial result naming the payout to verify
  (`EffectOutcomeUnknown`) rather than guess and maybe pay twice;
- the receipt mailer looks messages up too (``reconcile``).

Run as a script, it pays one order, then shows the payout's stop: a crash right
after the payout (a `FaultPlan`), the resumed run's partial result and what it
suggests; then a person who checked with the bank records the payout
(`settle_effect`) and `retry_failed` finishes the order, paid out once. Last,
the recovery suite's report.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START

from langgraph_resilience import (
    Backoff,
    NodePolicy,
    PermanentError,
    ResilientState,
    ResilientStateGraph,
    retry_failed,
    settle_effect,
    side_effect,
)
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.testing import FaultPlan, SimulatedCrash, recovery_suite

ORDER = {"order_id": "ord-17", "amount_cents": 4200, "card": "tok_visa", "email": "a@example.com"}


@dataclass
class Ledger:
    """A fake outside service that keeps what it did, by idempotency key."""

    prefix: str
    done: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def do(self, idempotency_key: str, **details: Any) -> str:
        with self.lock:
            self.done.append({"key": idempotency_key, **details})
            return f"{self.prefix}_{details.get('order_id', len(self.done))}"

    def find(self, idempotency_key: str) -> str | None:
        with self.lock:
            for entry in self.done:
                if entry["key"] == idempotency_key:
                    return f"{self.prefix}_{entry.get('order_id')}"
        return None


@dataclass
class World:
    """The services the flow talks to: card gateway, bank, mailer."""

    gateway: Ledger = field(default_factory=lambda: Ledger("ch"))
    bank: Ledger = field(default_factory=lambda: Ledger("po"))
    mailer: Ledger = field(default_factory=lambda: Ledger("msg"))

    def counters(self) -> dict[str, list[dict[str, Any]]]:
        """What `recovery_suite` counts: each service's calls."""
        return {"charge": self.gateway.done, "payout": self.bank.done, "receipt": self.mailer.done}


class PaymentState(ResilientState, total=False):
    order_id: str
    amount_cents: int
    card: str
    email: str
    charge_id: str
    payout_id: str
    receipt_id: str


def validate(state: PaymentState) -> dict[str, Any]:
    if state["amount_cents"] <= 0:
        raise PermanentError(f"amount must be positive, got {state['amount_cents']}")
    return {}


def build_graph(checkpointer: BaseCheckpointSaver[Any], world: World | None = None) -> Any:
    """The payment flow compiled on ``checkpointer``, talking to ``world``.

    Example:
        >>> with ResilientSqliteSaver.from_conn_string(":memory:") as saver:
        ...     graph = build_graph(saver, World())
        ...     out = graph.invoke(ORDER, {"configurable": {"thread_id": "1"}})
        >>> out["charge_id"], out["payout_id"], out["resilience"]["status"]
        ('ch_ord-17', 'po_ord-17', 'success')
    """
    w = world if world is not None else World()

    @side_effect(reconcile=w.gateway.find)
    def charge_card(order_id: str, card: str, amount: int, *, idempotency_key: str) -> str:
        return w.gateway.do(idempotency_key, order_id=order_id, card=card, amount=amount)

    @side_effect(on_unknown="raise")
    def pay_out(order_id: str, amount: int, *, idempotency_key: str) -> str:
        return w.bank.do(idempotency_key, order_id=order_id, amount=amount)

    @side_effect(reconcile=w.mailer.find)
    def send_receipt(order_id: str, to: str, *, idempotency_key: str) -> str:
        return w.mailer.do(idempotency_key, order_id=order_id, to=to)

    def charge(state: PaymentState) -> dict[str, Any]:
        return {"charge_id": charge_card(state["order_id"], state["card"], state["amount_cents"])}

    def payout(state: PaymentState) -> dict[str, Any]:
        net = state["amount_cents"] * 97 // 100  # the gateway keeps 3 %
        return {"payout_id": pay_out(state["order_id"], net)}

    def receipt(state: PaymentState) -> dict[str, Any]:
        return {"receipt_id": send_receipt(state["order_id"], state["email"])}

    g = ResilientStateGraph(PaymentState)
    g.set_node_defaults(policy=NodePolicy(retry=Backoff(max_attempts=3, initial_interval=0.05)))
    for name, node in [("validate", validate), ("charge", charge), ("payout", payout)]:
        g.add_node(name, node)
    g.add_node("receipt", receipt)
    g.add_edge(START, "validate")
    g.add_edge("validate", "charge")
    g.add_edge("charge", "payout")
    g.add_edge("payout", "receipt")
    g.add_edge("receipt", END)
    return g.compile(checkpointer=checkpointer)


def main() -> int:
    world = World()
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "payments.db")
        with ResilientSqliteSaver.from_conn_string(db) as saver:
            out = build_graph(saver, world).invoke(ORDER, {"configurable": {"thread_id": "paid"}})
        print(
            f"paid: charge {out['charge_id']}, payout {out['payout_id']}, receipt "
            f"{out['receipt_id']} ({out['resilience']['status']})"
        )

        config = {"configurable": {"thread_id": "crashed"}}
        world = World()
        with ResilientSqliteSaver.from_conn_string(db) as saver:
            faulty = FaultPlan().crash_after_effect("pay_out").apply(build_graph(saver, world))
            try:
                faulty.invoke(ORDER, config)
            except SimulatedCrash as crash:
                print(f"\n{crash}: the payout happened, its record did not")
        with ResilientSqliteSaver.from_conn_string(db) as saver:  # a new process
            out = build_graph(saver, world).invoke(None, config)
        failed = out["resilience"]["failed_step"]
        print(
            f"resumed: {out['resilience']['status']} at step {failed['path']!r}:\n  "
            f"{failed['message']}"
        )
        for suggestion in out["resilience"]["recovery_suggestions"]:
            print(f"  suggested: {suggestion}")
        print(f"payouts made: {len(world.bank.done)} (not repeated)")
        # A person looks the payout up in the bank's statement, and records it.
        with ResilientSqliteSaver.from_conn_string(db) as saver:
            (payout,) = [e for e in saver.list_effects("crashed") if e.name == "pay_out"]
            seen = world.bank.find(payout.idempotency_key)
            settle_effect(saver, "crashed", payout.idempotency_key, happened=True, result=seen)
            out = retry_failed(build_graph(saver, world), config)
        print(
            f"settled by hand ({seen}), then retry_failed: {out['resilience']['status']}, "
            f"receipt {out['receipt_id']}; payouts made: {len(world.bank.done)}\n"
        )

    suite_world = World()
    report = recovery_suite(
        lambda saver: build_graph(saver, suite_world), ORDER, effects=suite_world.counters()
    )
    print(report)
    return 0 if not report.effects_duplicated else 1


if __name__ == "__main__":
    sys.exit(main())
