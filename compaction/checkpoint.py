"""The checkpoint message (spec §d.13 framing) and content hashes of shadowed events."""

from __future__ import annotations

import hashlib
import uuid

from compaction.events import COMPACT_PLUGIN
from compaction.instruction import CLOSE_TAG, OPEN_TAG, PREAMBLE
from compaction.sessions.blocks import Message, Source, TextBlock
from compaction.sessions.events import SessionEvent
from compaction.sessions.mapper import encode_event


def frame(summary: tuple[TextBlock, ...]) -> tuple[TextBlock, ...]:
    return (TextBlock(f"{PREAMBLE}\n\n{OPEN_TAG}"), *summary, TextBlock(CLOSE_TAG))


def checkpoint_message(compaction_id: str, summary: tuple[TextBlock, ...]) -> Message:
    return Message(
        id=f"checkpoint-{compaction_id}",
        role="user",
        content=frame(summary),
        source=Source(kind="plugin", plugin=COMPACT_PLUGIN, compaction_id=compaction_id),
    )


def is_checkpoint(message: Message) -> bool:
    return message.source.kind == "plugin" and message.source.plugin == COMPACT_PLUGIN


def event_hash(event: SessionEvent) -> str:
    """sha256 of the event's stored encoding (what the store holds for that seq)."""
    return hashlib.sha256(encode_event(event)).hexdigest()


def new_compaction_id() -> str:
    return str(uuid.uuid4())
