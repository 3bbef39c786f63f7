"""What recovery tells the outside: log lines, custom-stream events, LangChain
callback runs per try (`_emit`), OpenTelemetry spans and counters (`_otel`), and
LangGraph's serde allowlist events counted and logged once (`_serde_events`).

The lowest folder but the core: the savers report their writes here too.
"""
