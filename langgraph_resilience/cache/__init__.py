"""Node caches for LangGraph's ``CachePolicy``, kept in the store the savers use.

`langgraph_resilience.cache.postgres.PostgresCache` is a LangGraph ``BaseCache``
on Postgres (the ``postgres`` extra): ``builder.compile(cache=PostgresCache(...))``.
This package's face imports no driver; import the backend's module. ``_entries``
holds its SQL and the pure key and TTL rules.
"""

from __future__ import annotations
