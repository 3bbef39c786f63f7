"""LangGraph's serde events reach `recovery_metrics`, OpenTelemetry and the log.

A state holding a class of the test's own is stored, then read back by a saver
with LangGraph's default serializer (which decodes the type no allowlist names,
and reports ``msgpack_unregistered_allowed``) and by one whose allowlist holds
only LangGraph's safe types (which refuses it, as strict msgpack does, and
reports ``msgpack_blocked``). Each kind is counted every time, logged once per
type, and added to the ``langgraph_resilience.serde_events`` counter.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START

import langgraph_resilience.telemetry._otel as otel
from langgraph_resilience import ResilientState, ResilientStateGraph, recovery_metrics
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver


@dataclasses.dataclass
class Invoice:
    number: str


class State(ResilientState, total=False):
    n: str
    invoice: Invoice


def _graph() -> ResilientStateGraph:
    g = ResilientStateGraph(State)
    g.add_node("bill", lambda s: {"invoice": Invoice(s["n"])})
    g.add_edge(START, "bill")
    return g


@pytest.fixture
def meter_reader(monkeypatch: pytest.MonkeyPatch) -> Any:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    monkeypatch.setattr(otel._metrics_state, "_METER_PROVIDER", MeterProvider([reader]))
    return reader


def _points(reader: Any, name: str) -> dict[tuple[tuple[str, Any], ...], float]:
    found = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        found[tuple(sorted(point.attributes.items()))] = point.value
    return found


def test_serde_events_are_counted_logged_once_and_sent(
    tmp_path: Path, meter_reader: Any, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "events.db")
    thread = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:6]}"}}
    with ResilientSqliteSaver.from_conn_string(path) as saver:
        before = recovery_metrics(saver).serde_events
        _graph().compile(checkpointer=saver).invoke({"n": "A-1"}, thread)
        caplog.set_level(logging.WARNING, logger="langgraph_resilience")
        for _ in range(2):
            assert isinstance(
                saver.get_tuple(thread).checkpoint["channel_values"]["invoice"], Invoice
            )
        saver.serde = JsonPlusSerializer(
            allowed_msgpack_modules=None
        )  # LangGraph's safe types only
        for _ in range(2):
            blocked = saver.get_tuple(thread).checkpoint["channel_values"]["invoice"]
            assert blocked == {"number": "A-1"}, "strict msgpack decodes a refused type as data"
        after = recovery_metrics(saver).serde_events
    allowed, refused = "msgpack_unregistered_allowed", "msgpack_blocked"
    assert after.get(allowed, 0) - before.get(allowed, 0) >= 2
    assert after.get(refused, 0) - before.get(refused, 0) == 2
    ours = [r.getMessage() for r in caplog.records if r.name == "langgraph_resilience"]
    for kind in ("decoded a type no msgpack allowlist names", "refused a type not in"):
        said = [m for m in ours if kind in m and "test_serde_events.Invoice" in m]
        assert len(said) <= 1, f"logged more than once per type: {said}"
    assert any("refused a type not in" in m for m in ours), "the refusal was not logged"
    points = _points(meter_reader, "langgraph_resilience.serde_events")
    module = Invoice.__module__
    assert points[(("kind", refused), ("module", module), ("name", "Invoice"))] == 2
    assert points[(("kind", allowed), ("module", module), ("name", "Invoice"))] >= 2
