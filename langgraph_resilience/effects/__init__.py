"""Side effects recorded once: `side_effect`, and `settle_effect` for the unknown.

`_steps` decides what one call does (look up, claim, reconcile, call, settle),
`_side_effect` drives it sync or async and does the I/O, `_outcome` is the
outcome as stored and replayed, `_settle` records by
hand what an effect of unknown outcome did, `_util._heartbeat` renews the claims of
calls in flight.
"""

from __future__ import annotations

from langgraph_resilience.effects._settle import asettle_effect, settle_effect
from langgraph_resilience.effects._side_effect import side_effect

__all__ = ["asettle_effect", "settle_effect", "side_effect"]
