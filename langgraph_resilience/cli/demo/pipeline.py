"""The demo's seven-step research pipeline, a `ResilientStateGraph` of fake chat
models and fake tools (no API key), each step failing the way real ones do:

1. ``plan``      a chat model plans the research;
2. ``search``    a flaky search API: the connection drops twice (TRANSIENT),
                 the third try succeeds (`Backoff`);
3. ``extract``   the model's first answer is prose, not cited facts: rejected by
                 ``validate`` (VALIDATION); ``adapt`` asks again at temperature 0
                 for JSON, which passes;
4. ``enrich``    a citation index over its quota (DEGRADABLE): its fallback
                 ``enrich_cached`` answers from a cached copy, and the step is
                 flagged degraded;
5. ``draft``     the model writes the report;
6. ``notify``    emails the draft through `side_effect` (intent before, outcome
                 after; ``reconcile`` asks the outbox whether a send happened);
7. ``publish``   posts to the publishing target named in the state; the team
                 wiki refuses the bot (PERMANENT on a critical step: the run ends
                 with a partial result). The fix is another target, given to
                 `retry_failed` as ``update={"publish_to": "reports-archive"}``.

Every step appends ``<node> <pid> <try>`` to ``steps.log`` in the demo's
directory (``LGR_DEMO_DIR``) as it starts, and each email sent appends a line to
``outbox.log`` (both fsynced), so the demo can prove what ran where and that the
email went out once. ``LGR_DEMO_SLOW_ACK`` (seconds) makes the mail server slow
to acknowledge a send: the window in which the demo kills a worker.

The graph is ``langgraph_resilience.cli.demo.pipeline:builder``, usable as
``langgraph-resilience worker --graph langgraph_resilience.cli.demo.pipeline:builder``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import time
from pathlib import Path
from typing import Any

from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.graph import END, START

from langgraph_resilience.effects._side_effect import side_effect
from langgraph_resilience.errors import DegradableError, PermanentError, ValidationFailed
from langgraph_resilience.graph._builder import ResilientStateGraph
from langgraph_resilience.graph._task import current_attempt
from langgraph_resilience.policy import Attempt, Backoff, NodePolicy
from langgraph_resilience.state import ResilientState

__all__ = [
    "DIR_ENV",
    "FIXED_TARGET",
    "SLOW_ACK_ENV",
    "STEPS",
    "TOPIC",
    "ResearchState",
    "build",
    "builder",
    "outbox",
    "read_lines",
    "steps_log",
]

DIR_ENV = "LGR_DEMO_DIR"
SLOW_ACK_ENV = "LGR_DEMO_SLOW_ACK"
STEPS = ("plan", "search", "extract", "enrich", "draft", "notify", "publish")
TOPIC = "why do tides come twice a day?"
BROKEN_TARGET = "team-wiki"
FIXED_TARGET = "reports-archive"
FAST = Backoff(max_attempts=4, initial_interval=0.05, max_interval=0.2)


class ResearchState(ResilientState, total=False):
    topic: str
    publish_to: str
    plan: list[str]
    sources: list[str]
    facts: list[str]
    context: str
    draft: str
    email: str
    published: str


# -- where the demo keeps its evidence ------------------------------------------------


def _dir() -> Path:
    return Path(os.environ.get(DIR_ENV) or ".")


def steps_log() -> Path:
    return _dir() / "steps.log"


def outbox() -> Path:
    return _dir() / "outbox.log"


def _append(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_lines(path: Path) -> list[list[str]]:
    """The complete lines of a log, split on spaces."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [line.split() for line in text.splitlines(keepends=True) if line.endswith("\n")]


def _started(node: str) -> None:
    _append(steps_log(), f"{node} {os.getpid()} {current_attempt().number}")


# -- fake models and tools -----------------------------------------------------------


def _model(*answers: str) -> GenericFakeChatModel:
    usage = {"input_tokens": 120, "output_tokens": 80, "total_tokens": 200}
    replies = [AIMessage(content=a, usage_metadata=usage) for a in answers]
    return GenericFakeChatModel(messages=itertools.cycle(replies))


def _search_api(query: str) -> list[str]:
    if current_attempt().number < 3:
        raise ConnectionError("search API: connection reset by peer")
    return [f"noaa.gov/tides#{query[:12]}", "britannica.com/science/tide", "nasa.gov/moon-tides"]


def _citation_index(facts: list[str]) -> str:
    raise DegradableError("citation index: monthly quota used up; a cached copy will do")


@side_effect(name="email_report", reconcile=lambda key: _sent(key))
def send_email(to: str, body: str, *, idempotency_key: str = "") -> str:
    """Send the report (appends to the outbox); the server may be slow to ack."""
    message_id = _message_id(idempotency_key)
    _append(outbox(), f"{message_id} {os.getpid()} {to}")
    _append(steps_log(), f"notify-sent {os.getpid()} 0")
    time.sleep(float(os.environ.get(SLOW_ACK_ENV) or 0))
    return message_id


def _message_id(idempotency_key: str) -> str:
    return "msg-" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:10]


def _sent(idempotency_key: str) -> str | None:
    """The mail server's answer to "did this send happen?" (the outbox)."""
    message_id = _message_id(idempotency_key)
    return message_id if any(line[0] == message_id for line in read_lines(outbox())) else None


# -- the steps -----------------------------------------------------------------------


def plan(state: ResearchState) -> dict[str, Any]:
    _started("plan")
    reply = _model("lunar gravity|the sun's share|Earth's rotation").invoke(state["topic"])
    return {"plan": str(reply.content).split("|")}


def search(state: ResearchState) -> dict[str, Any]:
    _started("search")
    return {"sources": _search_api(state["topic"])}


def extract(state: ResearchState) -> dict[str, Any]:
    _started("extract")
    temperature = current_attempt().overrides.get("temperature", 0.9)
    if temperature > 0.5:  # a creative answer: prose, no citations
        reply = _model("Tides are a fascinating dance between the Moon and the oceans!")
    else:
        facts = [
            "The Moon's gravity raises a bulge on the near side [1]",
            "Inertia leaves a second bulge on the far side [2]",
            "Earth turns through both bulges each day [3]",
        ]
        reply = _model(json.dumps(facts))
    text = str(reply.invoke(f"facts about {state['topic']}").content)
    try:
        facts = json.loads(text)
    except json.JSONDecodeError:
        facts = [text]
    return {"facts": facts}


def cited_facts(update: dict[str, Any]) -> None:
    """``extract``'s output check: at least three facts, each with a citation."""
    facts = update.get("facts") or []
    if len(facts) < 3 or not all(str(f).rstrip().endswith("]") for f in facts):
        raise ValidationFailed(f"expected 3+ cited facts, got {len(facts)} without citations")


def colder(attempt: Attempt) -> dict[str, Any]:
    """``extract``'s adapt: after a rejected answer, ask at temperature 0 for JSON."""
    return {"temperature": 0.0, "format": "json"}


def enrich(state: ResearchState) -> dict[str, Any]:
    _started("enrich")
    return {"context": _citation_index(state.get("facts") or [])}


def enrich_cached(state: ResearchState) -> dict[str, Any]:
    _started("enrich_cached")
    return {"context": "cached citation index (2 weeks old)"}


def draft(state: ResearchState) -> dict[str, Any]:
    _started("draft")
    time.sleep(0.2)  # a longer model call
    body = "Tides come twice a day: " + "; ".join(state.get("facts") or [])
    reply = _model(body).invoke(f"write up {state['topic']}")
    return {"draft": str(reply.content)}


def notify(state: ResearchState) -> dict[str, Any]:
    _started("notify")
    return {"email": send_email("requester@example.com", state.get("draft") or "")}


def publish(state: ResearchState) -> dict[str, Any]:
    _started("publish")
    target = state.get("publish_to") or BROKEN_TARGET
    if target == BROKEN_TARGET:
        raise PermanentError(
            f"{target}: 403 Forbidden, the research bot may not post here; "
            f"publish to {FIXED_TARGET!r} instead"
        )
    return {"published": f"{target}/tides-report"}


def build() -> ResilientStateGraph[ResearchState, Any, ResearchState, ResearchState]:
    """The pipeline's builder (compile it with a resilient saver)."""
    g: ResilientStateGraph[ResearchState, Any, ResearchState, ResearchState]
    g = ResilientStateGraph(ResearchState)
    g.set_node_defaults(policy=NodePolicy(retry=FAST))
    g.add_node("plan", plan)
    g.add_node("search", search)
    g.add_node(
        "extract",
        extract,
        policy=NodePolicy(retry=FAST, validate=cited_facts, adapt=colder),
    )
    g.add_node("enrich", enrich, policy=NodePolicy(retry=FAST, fallback="enrich_cached"))
    g.add_node("enrich_cached", enrich_cached)
    g.add_node("draft", draft)
    g.add_node("notify", notify)
    g.add_node("publish", publish)
    g.add_edge(START, "plan")
    for a, b in itertools.pairwise(STEPS):
        g.add_edge(a, b)
    g.add_edge("enrich_cached", "draft")
    g.add_edge("publish", END)
    return g


builder = build()
