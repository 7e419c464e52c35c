"""How a save is laid out in JetStream messages: the commit message, its chunks, notification ids.

A save (every event of one ``insert_events`` call, one session) is **one commit message** on the
session's subject ``<stream>.s.<session hex>``. Its body is the msgpack array of the saved rows
``[[version, topic, state], ...]``; its headers name the first version and the count, so a reader
can skip it without decoding it. The server (2.9) has no atomic batch publish, but one message is
stored or not: a reader sees all of a save or nothing of it.

A body above the server's maximum payload (a save of many events, or a single tool output of
several megabytes) is cut into **chunks** published first, each its own message on
``<stream>_chunks.<save id>`` (a stream of their own); the commit message is then published on the
session's subject, carrying only the stream sequences of its chunks (header ``Compaction-Chunked``).
Readers only ever read the session subjects and follow a commit's chunk list, so a save whose
commit was never published (the writer crashed, or lost the race for the session) is invisible: its
chunks are orphans, deleted by the writer when it loses the race and otherwise never read.

Notification ids: the stream ``<stream>`` holds the commit messages and nothing else, so its
sequence orders the saves of every session. A commit is published with the expected last sequence
of its own subject only (a conflict is per session), so saves of different sessions go through
concurrently and the stream orders them. The notification id of the ``i``-th event of the commit at
stream sequence ``k`` is ``k * ID_SPACE + i`` (:func:`position`): ids follow the stream sequence and
are unique and increasing, but not dense (PostgreSQL's are not either). A save holds at most
:data:`ID_SPACE` events. Commits stored by earlier versions, which serialised every save to number
events densely, carry their first id in the header ``Compaction-Position``; it is still read, and
every such id is below ``ID_SPACE``, so the numbering stays increasing across both.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator, Sequence

import msgspec

FIRST = "Compaction-First"
COUNT = "Compaction-Count"
POSITION = "Compaction-Position"
CHUNKED = "Compaction-Chunked"
ID_SPACE = 1 << 22
"""Notification ids per commit message: the most events one save may hold."""
HEADROOM = 8 * 1024
"""Bytes of the maximum payload kept free for headers and protocol framing."""

Row = tuple[int, str, bytes]  # originator_version, topic, state

_ROWS = msgspec.msgpack.Decoder(list[tuple[int, str, bytes]])
_SEQS = msgspec.msgpack.Decoder(list[int])


def save_ids() -> Iterator[str]:
    """Save ids for one writer (a recorder): a random prefix of its own and a counter. A save id is
    the commit's ``Nats-Msg-Id`` (the server's de-duplication key) and names its chunks' subject,
    so it must be unique among every writer's saves; a counter costs less than a random id per save."""
    prefix = uuid.uuid4().hex
    return (f"{prefix}-{number}" for number in itertools.count(1))


def encode_rows(rows: Sequence[Row]) -> bytes:
    return msgspec.msgpack.encode(list(rows))


def decode_rows(body: bytes) -> list[Row]:
    return _ROWS.decode(body)


def encode_chunk_list(seqs: Sequence[int]) -> bytes:
    return msgspec.msgpack.encode(list(seqs))


def decode_chunk_list(body: bytes) -> list[int]:
    return _SEQS.decode(body)


def chunks(body: bytes, size: int) -> Iterator[bytes]:
    """``body`` in consecutive pieces of at most ``size`` bytes."""
    for start in range(0, len(body), size):
        yield body[start : start + size]


def commit_headers(first: int, count: int, chunked: bool) -> dict[str, str]:
    """The headers of a commit message (its :data:`POSITION` is added when it is published)."""
    headers = {FIRST: str(first), COUNT: str(count)}
    if chunked:
        headers[CHUNKED] = "1"
    return headers


def header_range(headers: dict[str, str] | None) -> tuple[int, int]:
    """``(first version, count)`` of a commit message's headers."""
    if not headers or FIRST not in headers or COUNT not in headers:
        raise ValueError(f"a commit message without {FIRST}/{COUNT} headers: {headers!r}")
    return int(headers[FIRST]), int(headers[COUNT])


def is_chunked(headers: dict[str, str] | None) -> bool:
    return bool(headers and headers.get(CHUNKED) == "1")


def position(headers: dict[str, str] | None, seq: int) -> int:
    """The notification id of the first event of the commit message at stream sequence ``seq``."""
    if headers and POSITION in headers:  # stored by an earlier version: dense ids
        return int(headers[POSITION])
    return seq * ID_SPACE


def last_id(headers: dict[str, str] | None, seq: int) -> int:
    """The notification id of the last event of the commit message at stream sequence ``seq``."""
    return position(headers, seq) + header_range(headers)[1] - 1
