"""How a checkpoint and a write are kept in a hash field, and read back checked.

A record is a JSON header, a newline, then the serialized bytes; the header
holds the checksum the SQL savers compute (`_sums.checkpoint_sum`,
`_sums.write_sum`), verified on every read.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_resilience.checkpoint.store._sums import checkpoint_sum, write_sum
from langgraph_resilience.errors import CheckpointCorrupt

__all__ = ["checkpoint_row", "pack_checkpoint", "pack_write", "read_tuple", "write_channel"]


def _pack(header: dict[str, Any], blob: bytes) -> bytes:
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + blob


def _unpack(record: bytes) -> tuple[dict[str, Any], bytes]:
    head, _, blob = record.partition(b"\n")
    header = json.loads(head)
    if not isinstance(header, dict):
        raise ValueError("record header is not an object")
    return header, blob


def pack_checkpoint(
    checkpoint_id: str, parent_id: str | None, type_: str, blob: bytes, meta: bytes
) -> bytes:
    crc = checkpoint_sum(checkpoint_id, type_, blob, meta)
    return _pack({"p": parent_id, "t": type_, "m": meta.decode(), "s": crc}, blob)


def pack_write(
    checkpoint_id: str,
    task_id: str,
    task_path: str,
    idx: int,
    channel: str,
    type_: str,
    blob: bytes,
) -> bytes:
    crc = write_sum(checkpoint_id, task_id, task_path, idx, channel, type_, blob)
    return _pack({"p": task_path, "c": channel, "t": type_, "s": crc}, blob)


def checkpoint_row(
    thread_id: str, checkpoint_id: str, record: bytes
) -> tuple[str | None, str, bytes, bytes, int]:
    """A checkpoint record as the SQLite table's columns (parent, type, blob,
    metadata, sum), for a reader that runs the SQL savers' statements on them
    (`check_deploy`'s heads: the statement verifies the sum); `CheckpointCorrupt`
    when the record does not decode."""
    try:
        header, blob = _unpack(record)
        parent = header["p"]
        return parent, str(header["t"]), blob, str(header["m"]).encode(), int(header["s"])
    except Exception as exc:
        raise CheckpointCorrupt(
            thread_id=thread_id, checkpoint_ns="", checkpoint_id=checkpoint_id, cause=exc
        ) from exc


def write_channel(header: bytes) -> str:
    """The channel a write record's header names (its value not read)."""
    return str(json.loads(header)["c"])


def read_tuple(
    serde: SerializerProtocol, thread_id: str, ns: str, checkpoint_id: str, reply: list[bytes]
) -> CheckpointTuple:
    """A GET script's reply as a `CheckpointTuple`; `CheckpointCorrupt` when a
    record does not decode or fails its checksum."""

    def corrupt(what: str, cause: BaseException | None = None) -> CheckpointCorrupt:
        return CheckpointCorrupt(
            thread_id=thread_id,
            checkpoint_ns=ns,
            checkpoint_id=checkpoint_id,
            cause=cause,
            mismatch=what,
        )

    try:
        header, blob = _unpack(reply[1])
        meta = str(header["m"]).encode()
        if checkpoint_sum(checkpoint_id, header["t"], blob, meta) != header["s"]:
            raise corrupt("the checkpoint")
        checkpoint = serde.loads_typed((header["t"], blob))
        metadata = json.loads(meta)
        writes: list[tuple[str, str, int, str, Any]] = []
        for suffix, record in zip(reply[2::2], reply[3::2], strict=True):
            task_id, _, idx = suffix.decode().partition("\0")
            w, value = _unpack(record)
            crc = write_sum(checkpoint_id, task_id, w["p"], int(idx), w["c"], w["t"], value)
            if crc != w["s"]:
                raise corrupt(f"write {task_id}/{idx}")
            writes.append((w["p"], task_id, int(idx), w["c"], serde.loads_typed((w["t"], value))))
    except CheckpointCorrupt:
        raise
    except Exception as exc:  # a record that does not decode is a corrupt record
        raise corrupt("", exc) from exc
    writes.sort(key=lambda w: (w[0], w[1], w[2]))
    parent = header["p"]
    config: RunnableConfig = {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }
    parent_config: RunnableConfig | None = (
        {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}}
        if parent
        else None
    )
    return CheckpointTuple(
        config=config,
        checkpoint=checkpoint,
        metadata=metadata,
        parent_config=parent_config,
        pending_writes=[(task_id, channel, value) for _, task_id, _, channel, value in writes],
    )
