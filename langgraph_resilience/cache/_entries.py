"""What a node cache stores, as rows: keys, expiries, the statements (pure, no I/O).

A cache key is LangGraph's ``FullKey``: a namespace (a tuple of strings) and a
key. A namespace is stored as the JSON text of its list, which keeps every
tuple apart (``("a,b",)`` and ``("a", "b")`` are two namespaces; the empty
namespace is ``[]``); a row is found again by the exact text its key encodes to.
An expiry is the server's clock plus the TTL, so every process that shares the
cache agrees when an entry is gone, whatever its own clock says.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langgraph.cache.base import FullKey, Namespace

__all__ = [
    "CLEAR_ALL",
    "CLEAR_NAMESPACES",
    "GET",
    "PURGE_EXPIRED",
    "SET",
    "SETUP",
    "SETUP_LOCK",
    "TABLE",
    "check_ttl",
    "namespace_texts",
    "ns_text",
    "set_params",
    "wanted",
]

#: The one table of the Postgres node cache.
TABLE = "resilience_node_cache"

#: Serializes concurrent setups (two processes starting at once): a transaction-level
#: advisory lock, released at the transaction's end.
SETUP_LOCK = f"SELECT pg_advisory_xact_lock(hashtext('{TABLE}'))"

SETUP = (
    f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    ns text NOT NULL,
    key text NOT NULL,
    expires_at timestamptz,
    encoding text NOT NULL,
    val bytea NOT NULL,
    PRIMARY KEY (ns, key)
)""",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_expiry ON {TABLE} (expires_at) "
    "WHERE expires_at IS NOT NULL",
)

# One round trip: the live entries among the keys asked for; the expired ones
# among them are deleted by the same statement (its SELECT reads the snapshot
# taken before the DELETE, and skips them by their expiry).
GET = f"""WITH wanted AS (
    SELECT * FROM unnest(%s::text[], %s::text[]) AS w(ns, key)
), gone AS (
    DELETE FROM {TABLE} c USING wanted w
    WHERE c.ns = w.ns AND c.key = w.key AND c.expires_at <= now()
)
SELECT c.ns, c.key, c.encoding, c.val
FROM {TABLE} c JOIN wanted w ON c.ns = w.ns AND c.key = w.key
WHERE c.expires_at IS NULL OR c.expires_at > now()"""

# One statement for every pair: an entry set again replaces the old one (value and expiry).
SET = f"""INSERT INTO {TABLE} (ns, key, expires_at, encoding, val)
SELECT ns, key,
       CASE WHEN ttl IS NULL THEN NULL ELSE now() + ttl * interval '1 second' END,
       encoding, val
FROM unnest(%s::text[], %s::text[], %s::float8[], %s::text[], %s::bytea[])
     AS t(ns, key, ttl, encoding, val)
ON CONFLICT (ns, key) DO UPDATE
SET expires_at = EXCLUDED.expires_at, encoding = EXCLUDED.encoding, val = EXCLUDED.val"""

CLEAR_ALL = f"DELETE FROM {TABLE}"
CLEAR_NAMESPACES = f"DELETE FROM {TABLE} WHERE ns = ANY(%s::text[])"
PURGE_EXPIRED = f"DELETE FROM {TABLE} WHERE expires_at <= now()"


def ns_text(ns: Namespace) -> str:
    """The stored text of a namespace: the JSON of its list (one text per tuple)."""
    if not isinstance(ns, tuple) or not all(isinstance(part, str) for part in ns):
        raise TypeError(f"a cache namespace is a tuple of str, got {ns!r}")
    return json.dumps(list(ns), ensure_ascii=False, separators=(",", ":"))


def _key_text(key: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"a cache key is a str, got {key!r}")
    if "\x00" in key:
        raise ValueError(f"a cache key cannot hold a NUL character (Postgres text): {key!r}")
    return key


def wanted(keys: Sequence[FullKey]) -> tuple[dict[tuple[str, str], FullKey], list[Any]]:
    """The stored (ns, key) of each key asked for, back to the key, and GET's parameters."""
    rows = {(ns_text(ns), _key_text(key)): (ns, key) for ns, key in keys}
    return rows, [[ns for ns, _ in rows], [key for _, key in rows]]


def check_ttl(ttl: object) -> float | None:
    """A TTL in seconds (None: the entry never expires); refuses what is not one."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl < 0:
        raise ValueError(f"a cache TTL is a number of seconds >= 0 or None, got {ttl!r}")
    return float(ttl)


def set_params(pairs: Mapping[FullKey, tuple[Any, int | None]], dump: Any) -> list[list[Any]]:
    """SET's parameters: one array per column, the values serialized by ``dump``."""
    columns: list[list[Any]] = [[], [], [], [], []]
    for (ns, key), (value, ttl) in pairs.items():
        encoding, raw = dump(value)
        for column, item in zip(
            columns, (ns_text(ns), _key_text(key), check_ttl(ttl), encoding, raw), strict=True
        ):
            column.append(item)
    return columns


def namespace_texts(namespaces: Iterable[Namespace]) -> list[str]:
    """CLEAR_NAMESPACES' parameter: the stored text of each namespace."""
    return [ns_text(ns) for ns in namespaces]
