"""A scratch Postgres database for a benchmark (shared by the benchmark scripts)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


def server_dsn() -> str:
    """The server to use: ``LGR_POSTGRES_URL``, else the local default."""
    return os.environ.get("LGR_POSTGRES_URL", DEFAULT_DSN)


@contextmanager
def postgres_db(dsn: str) -> Iterator[str]:
    """Create a fresh ``lgr_bench_<random>`` database; yield its DSN; drop it."""
    name = f"lgr_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(dsn, dbname=name)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
