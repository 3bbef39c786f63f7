"""Resilient drop-in subclasses of LangGraph's SQLite and Postgres savers.

- `langgraph_resilience.checkpoint.sqlite.ResilientSqliteSaver`
- `langgraph_resilience.checkpoint.sqlite.aio.AsyncResilientSqliteSaver`
- `langgraph_resilience.checkpoint.postgres.ResilientPostgresSaver`
- `langgraph_resilience.checkpoint.postgres.aio.AsyncResilientPostgresSaver`

They are imported from their own modules so that using one dialect never imports
the other's driver.
"""
