"""Event hashes and file actions, kept by the read-ahead and carried by the session's snapshot.

A compaction hashes every shadowed event (``compact/summary.shadowed_hashes``) and pairs every
result of its span with its call for the files touched (:func:`~compaction.handover.files.file_action`).
The read-ahead (:mod:`compaction.handover.readahead`) does both as the messages arrive and keeps
them in the session's analysis, whose entries are found by object: a process that loads the
session from its snapshot has new objects and would hash and pair the whole span again during its
first compaction.

So the read-ahead also keeps them by seq (:data:`DIGESTS` and :data:`FILES`, memos of the
analysis, within its bound) and
publishes them, for the nodes of the surface, as the session's reading :data:`READING`
(:attr:`~compaction.sessions.session.Session.readings`), which snapshots carry: each event's sha256
digest, and each result's file action with where its block and the call it was paired with are
(seq and index in the message). :func:`recall_carried` puts them back into an analysis for the
events of a span.

Exact, not an approximation: a digest is a function of the event at its seq alone, and a file
action of the call and result blocks it names (a stored event never changes; a rollback forgets
the readings and the read-ahead starts over). A file action is recalled only when both blocks are
in the span, are a call and a result, and the result answers that call's id; otherwise the walk
pairs and reads it as before. ``tests/compaction/test_carried_readings.py`` checks every event and
every result of every public transcript against a fresh hash and a fresh reading.

What is not carried: the messages' readings for the walk (:func:`~compaction.handover.reading.read`),
which cost about as much to rebuild as objects as to read again.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence

import msgspec

from compaction.handover.analysis import Slot, SpanAnalysis, chars
from compaction.handover.files import FileAction, file_action, file_actions
from compaction.handover.reading import Call, Result, read
from compaction.sessions.blocks import Block, Message, ToolCallBlock, ToolResultBlock
from compaction.sessions.events import SessionEvent
from compaction.sessions.memo import ENTRY_BYTES, STRING_BYTES, ValueMemo
from compaction.sessions.session import Session, project

__all__ = [
    "DIGESTS",
    "FILES",
    "READING",
    "Carried",
    "FileRecord",
    "Waiting",
    "carried_hashes",
    "publish_carried",
    "recall_carried",
    "record",
]

READING = "handover/hashes-files@1"
"""The carried readings' name among the session's readings. A change of the event hash, of
:func:`~compaction.handover.files.file_action` or of this encoding must bump it: snapshots
written before carry the old values."""

TOOL_BLOCKS = (ToolCallBlock, ToolResultBlock)
DIGEST = 32
"""Bytes of one sha256 digest."""
SEQ_CODE = "q"


class FileRecord(msgspec.Struct, array_like=True, frozen=True):
    """A result's file action (``kind``, ``paths``), with where the result is (``seq``, its block's
    ``index`` in the message) and the call it was paired with (``call_seq``, ``call_index``)."""

    seq: int
    index: int
    call_seq: int
    call_index: int
    kind: str
    paths: tuple[str, ...]


class Carried(msgspec.Struct, array_like=True):
    """The encoded reading: ``seqs`` (packed int64) and their ``digests`` (32 bytes each, same
    order), and the file records."""

    seqs: bytes
    digests: bytes
    files: list[FileRecord]


def _digest_size(seq: int, value: bytes) -> int:
    return ENTRY_BYTES + len(value) + STRING_BYTES


def _files_size(seq: int, value: tuple[FileRecord, ...]) -> int:
    return ENTRY_BYTES + sum(ENTRY_BYTES + len(found.kind) + chars(found.paths) for found in value)


DIGESTS: Slot[ValueMemo[int, bytes]] = Slot(lambda budget: ValueMemo(budget, _digest_size))
"""Each message event's sha256 digest by seq, as the snapshot carries it (seqs of the session's
epoch in the analysis's :attr:`~compaction.handover.analysis.SpanAnalysis.progress`)."""
FILES: Slot[ValueMemo[int, tuple[FileRecord, ...]]] = Slot(lambda budget: ValueMemo(budget, _files_size))
"""Each message's results' file actions by its seq, as the snapshot carries them."""

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Carried)

Waiting = dict[str, tuple[ToolCallBlock, int, int]]
"""The calls still waiting for their result, by id, each with where it is (seq, block index): the
read-ahead pairs a result with the latest call of its id, as the facts walk does."""


def record(analysis: SpanAnalysis, seq: int, event: SessionEvent, waiting: Waiting) -> Message | None:
    """Hash the surface event ``event`` at ``seq`` and read its message with ``analysis`` active,
    pairing its results through ``waiting``; keep by seq what the snapshot carries (the event's
    digest, its results' file actions). Returns the message read (None: the event shows none)."""
    analysis.memo(DIGESTS).keep(seq, bytes.fromhex(analysis.event_hash(event)))
    message = project(event)
    if message is None:
        return None
    found = read(message)
    if not found.items:
        return message
    tools = [i for i, block in enumerate(message.content) if isinstance(block, TOOL_BLOCKS)]
    files: list[FileRecord] = []
    for index, item in zip(tools, found.items, strict=True):
        if isinstance(item, Call):
            waiting[item.block.id] = (item.block, seq, index)
            continue
        assert isinstance(item, Result)
        paired = waiting.pop(item.block.tool_call_id, None)
        if paired is not None:
            call, call_seq, call_index = paired
            kind, paths = file_action(call, item.block)
            files.append(FileRecord(seq, index, call_seq, call_index, kind, paths))
    if files:
        analysis.memo(FILES).keep(seq, tuple(files))
    return message


def publish_carried(session: Session, analysis: SpanAnalysis) -> None:
    """Publish what the analysis keeps by seq, for ``session``'s surface nodes, as the reading
    :data:`READING` (encoded when a snapshot asks)."""

    def encode() -> bytes:
        digests, files = analysis.memo(DIGESTS).kept, analysis.memo(FILES).kept
        seqs = [seq for seq in session.nodes if seq in digests]
        carried = Carried(
            seqs=array(SEQ_CODE, seqs).tobytes(),
            digests=b"".join(map(digests.__getitem__, seqs)),
            files=[found for seq in session.nodes if seq in files for found in files[seq]],
        )
        return _ENCODER.encode(carried)

    session.readings[READING] = encode


def carried(session: Session) -> Carried | None:
    """What the session's reading carries, or None (no reading, or another layout)."""
    published = session.readings.get(READING)
    if published is None:
        return None
    try:
        found = _DECODER.decode(published())
    except msgspec.DecodeError:
        return None
    if len(found.seqs) % 8 or len(found.digests) != DIGEST * (len(found.seqs) // 8):
        return None
    return found


def carried_hashes(session: Session, analysis: SpanAnalysis, seqs: Sequence[int]) -> list[str] | None:
    """The hash of each event at ``seqs``, as the analysis keeps it by seq (read ahead in this
    process) or the session's reading carries it (read ahead by the process that saved the
    snapshot); None when one of them is in neither."""
    kept = analysis.memo(DIGESTS).kept
    if all(seq in kept for seq in seqs):
        return [kept[seq].hex() for seq in seqs]
    found = carried(session)
    if found is None:
        return None
    by_seq = dict(_hex_digests(found))
    hashes: list[str] = []
    for seq in seqs:
        digest = by_seq.get(seq)
        if digest is None:
            return None
        hashes.append(digest)
    return hashes


def _hex_digests(found: Carried) -> Iterator[tuple[int, str]]:
    """Each carried seq with its digest in hex (the event hash), in the carried order."""
    stored = array(SEQ_CODE)
    stored.frombytes(found.seqs)
    hexes, width = found.digests.hex(), 2 * DIGEST
    for at, seq in enumerate(stored):
        yield seq, hexes[at * width : (at + 1) * width]


def recall_carried(
    session: Session, analysis: SpanAnalysis, seqs: Sequence[int], events: Sequence[SessionEvent]
) -> int:
    """Put the carried digests and file actions of the events ``events`` (at ``seqs``) into
    ``analysis``, where it has none; returns how many events' hashes were recalled."""
    if not seqs:
        return 0
    first = events[0]
    if analysis.hashes.recall(first) is not None:
        return 0  # read in this process: the analysis has them by object
    found = carried(session)
    if found is None:
        return 0
    by_seq = dict(zip(seqs, events, strict=True))
    hashes = _recall_hashes(analysis, found, by_seq)
    _recall_files(analysis, found.files, by_seq)
    return hashes


def _recall_hashes(analysis: SpanAnalysis, found: Carried, by_seq: dict[int, SessionEvent]) -> int:
    unknown = analysis.hashes.recall
    events: list[SessionEvent] = []
    values: list[str] = []
    for seq, digest in _hex_digests(found):
        event = by_seq.get(seq)
        if event is not None and unknown(event) is None:
            events.append(event)
            values.append(digest)
    analysis.hashes.keep_all(events, values)
    return len(events)


def _recall_files(analysis: SpanAnalysis, files: list[FileRecord], by_seq: dict[int, SessionEvent]) -> None:
    messages = zip(by_seq, map(project, by_seq.values()), strict=True)
    contents = {seq: message.content for seq, message in messages if message is not None}
    results: list[ToolResultBlock] = []
    actions: list[tuple[ToolCallBlock, FileAction]] = []
    memo = file_actions(analysis)
    unknown = memo.recall
    for found in files:
        result = _block(contents.get(found.seq), found.index)
        call = _block(contents.get(found.call_seq), found.call_index)
        if (
            isinstance(result, ToolResultBlock)
            and isinstance(call, ToolCallBlock)
            and result.tool_call_id == call.id
            and unknown(result) is None
        ):
            results.append(result)
            actions.append((call, (found.kind, found.paths)))
    memo.keep_all(results, actions)


def _block(content: tuple[Block, ...] | None, index: int) -> Block | None:
    """The ``index``-th block of a message's ``content``, or None."""
    return content[index] if content is not None and 0 <= index < len(content) else None
