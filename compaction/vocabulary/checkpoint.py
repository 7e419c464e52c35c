"""The checkpoint message: how a summary is framed, and how it is recognised.

Every checkpoint on a surface is made here: ours (:func:`checkpoint_message`, the summary between
the preamble's tags) and another harness's (:func:`foreign_checkpoint`, its summary verbatim).
Both carry the compact plugin's provenance, which is what :func:`is_checkpoint` reads."""

from __future__ import annotations

import uuid

from compaction.sessions.blocks import Message, Source, TextBlock, text_of
from compaction.vocabulary.events import COMPACT_PLUGIN
from compaction.vocabulary.instruction import CLOSE_TAG, OPEN_TAG, PREAMBLE


def frame(summary: tuple[TextBlock, ...]) -> tuple[TextBlock, ...]:
    return (TextBlock(f"{PREAMBLE}\n\n{OPEN_TAG}"), *summary, TextBlock(CLOSE_TAG))


def checkpoint_message(
    compaction_id: str, summary: tuple[TextBlock, ...], source_command_id: str | None = None
) -> Message:
    return Message(
        id=f"checkpoint-{compaction_id}",
        role="user",
        content=frame(summary),
        source=_provenance(compaction_id, source_command_id),
    )


def foreign_checkpoint(compaction_id: str, summary: Message) -> Message:
    """The checkpoint of another harness's compaction: its summary message's id and content as the
    harness wrote them (unframed, so the audit compares them verbatim), our provenance."""
    return Message(id=summary.id, role="user", content=summary.content, source=_provenance(compaction_id))


def _provenance(compaction_id: str, source_command_id: str | None = None) -> Source:
    return Source(
        kind="plugin",
        plugin=COMPACT_PLUGIN,
        compaction_id=compaction_id,
        source_command_id=source_command_id,
    )


def is_checkpoint(message: Message) -> bool:
    """A compaction's checkpoint: the summary message a replacement put in the history.

    The rule is the message's provenance (its source names the compact plugin), never its text:
    a user can paste the tags, and an imported harness's checkpoint carries no frame at all."""
    return message.source.kind == "plugin" and message.source.plugin == COMPACT_PLUGIN


def framed_summary(message: Message) -> str | None:
    """The summary text inside :func:`frame`'s tags, when ``message`` frames one; else None.

    Frames come from this library only (a checkpoint, or a chunk's partial summary on its way to
    the merge), so a message must come from a plugin to count: a user's text quoting the tags does
    not. An imported checkpoint is unframed and reads as None (its text is plain history)."""
    if message.role != "user" or message.source.kind != "plugin":
        return None
    if not any(isinstance(b, TextBlock) and OPEN_TAG in b.text for b in message.content):
        return None
    return text_of(message.content).split(OPEN_TAG, 1)[-1].split(CLOSE_TAG, 1)[0]


def new_compaction_id() -> str:
    return str(uuid.uuid4())
