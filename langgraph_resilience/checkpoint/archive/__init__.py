"""The checkpoint lifecycle: a cold tier in object storage (`Archive`), idle threads
moved into it and restored on access, a size budget per checkpoint, and retention.

The rooms: ``_objects`` (`Archive` over obstore), ``_codec`` (the key schema and
an object's bytes), ``_moves`` (archival and restore as operations), ``_drivers``
(their sync and async drivers), ``_methods`` (the savers' methods), ``_sizes``
(the size budget). The SQL is in `langgraph_resilience.checkpoint.archive._archival` and
``_retention``; `ArchiveError` is defined with the other errors, in
`langgraph_resilience.errors`.
"""

from __future__ import annotations

from langgraph_resilience.checkpoint.archive._objects import Archive
from langgraph_resilience.errors import ArchiveError

__all__ = ["Archive", "ArchiveError"]
