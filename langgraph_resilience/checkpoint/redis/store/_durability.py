"""What a Redis server keeps on disk, read from its config at ``setup()``, and
what the saver says about it (a pure decision on ``CONFIG GET`` replies).

| ``appendonly`` / ``appendfsync`` | an acknowledged write survives a SIGKILL of the server |
|---|---|
| ``yes`` / ``always`` | yes: fsynced before the reply |
| ``yes`` / ``everysec`` | up to about one second of writes may be lost |
| ``yes`` / ``no`` | the OS flushes when it likes (often ~30 s) |
| ``no``, ``save`` set | only what the last RDB snapshot held |
| ``no``, no ``save`` | nothing: the server keeps nothing on disk (the saver warns once) |
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Durability", "durability"]


class Durability(NamedTuple):
    """``level``: "always", "everysec", "os", "snapshot", "none" or "unknown";
    ``warn``: whether the saver warns at setup; ``message``: what it says."""

    level: str
    warn: bool
    message: str


def durability(config: dict[str, str] | None, target: str) -> Durability:
    """The verdict on a server's ``CONFIG GET appendonly appendfsync save`` reply
    (None: the server refused ``CONFIG``, as some managed services do)."""
    if config is None:
        return Durability(
            "unknown",
            True,
            f"Redis at {target} refused CONFIG GET: the saver cannot tell whether it keeps "
            "checkpoints on disk. Use appendonly yes with appendfsync always for no loss.",
        )
    aof = config.get("appendonly", "no").lower() == "yes"
    fsync = config.get("appendfsync", "everysec").lower()
    if aof and fsync == "always":
        return Durability("always", False, f"Redis at {target}: AOF, fsync always")
    if aof and fsync == "everysec":
        return Durability(
            "everysec",
            False,
            f"Redis at {target}: AOF with appendfsync everysec: up to ~1 s of acknowledged "
            "checkpoints may be lost if the server dies; appendfsync always loses none.",
        )
    if aof:
        return Durability(
            "os",
            True,
            f"Redis at {target}: AOF with appendfsync no: the OS decides when checkpoints "
            "reach the disk; appendfsync always loses none.",
        )
    if config.get("save", "").strip():
        return Durability(
            "snapshot",
            True,
            f"Redis at {target} keeps only RDB snapshots: checkpoints since the last one are "
            "lost if the server dies; set appendonly yes and appendfsync always.",
        )
    return Durability(
        "none",
        True,
        f"Redis at {target} keeps nothing on disk (appendonly no, no save points): every "
        "checkpoint is lost if the server restarts; set appendonly yes, appendfsync always.",
    )
