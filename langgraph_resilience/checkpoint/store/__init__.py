"""How every store operation is written and run, both dialects.

- ``_store``: statements, dialects and the executor (operations as generators of `Stmt`).
- ``_schema``: the resilience tables and their migrations.
- ``_pg_functions``: the PL/pgSQL functions the migrations create, and their error markers.
- ``_store_retry``: the retry loops every saver operation runs in.
- ``_counters``: save counters (checkpoint and write tries).
- ``_sums``: checksums written with each row and verified on every read.
- ``_storage``: what one thread takes up in the store.
"""
