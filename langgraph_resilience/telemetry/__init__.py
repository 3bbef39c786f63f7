"""What recovery tells the outside: log lines, custom-stream events, LangChain
callback runs per try (`_emit`), and OpenTelemetry spans and counters (`_otel`).

The lowest folder but the core: the savers report their writes here too.
"""
