"""The subjects of a stream, as its leader counts them, and the first message of each.

Listing the sessions of a store used to read the header of every commit of the stream: one pass
over all of them, about 20,000 a second through the client, so 5 s for 100 sessions of 1,000 saves.
The stream's leader keeps the number of messages of each subject; :func:`subject_counts` asks for
them (``STREAM.INFO`` with a subject filter, every page of the answer), and :func:`firsts` gets the
first message of each subject (:meth:`~compaction.sessions.nats.client.JetStreamLog.gets`: a
few in flight at a time). One get per session is cheaper than reading its commits' headers as
soon as sessions hold more than a few commits (:data:`SCAN_BELOW`); with fewer, the pass over the
headers stays the cheaper.
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec
import nats.js.errors

from compaction.sessions.nats.client import JetStreamLog, Record, retrying

SCAN_BELOW = 8
"""Commits per session (on average) below which a pass over every commit's headers is cheaper than
one get per session."""


class _State(msgspec.Struct):
    subjects: dict[str, int] | None = None


class _Info(msgspec.Struct):
    """The part of a ``STREAM.INFO`` answer read here (``total``: subjects in all pages)."""

    state: _State | None = None
    total: int = 0
    error: dict[str, Any] | None = None


_INFO = msgspec.json.Decoder(_Info)


async def subject_counts(log: JetStreamLog, subject_filter: str, stream: str) -> dict[str, int]:
    """Messages per subject matching ``subject_filter`` in ``stream``, as its leader counts them."""
    found: dict[str, int] = {}
    while True:
        page = await retrying(
            functools.partial(_page, log, stream, subject_filter, len(found)),
            unavailable=f"the subjects {subject_filter} of {stream}",
            doubt_not_found=True,
        )
        subjects = page.state.subjects if page.state is not None and page.state.subjects else {}
        found.update(subjects)
        if not subjects or len(found) >= page.total:
            return found


async def _page(log: JetStreamLog, stream: str, subject_filter: str, offset: int) -> _Info:
    request = msgspec.json.encode({"subjects_filter": subject_filter, "offset": offset})
    answer = await log.nc.request(f"$JS.API.STREAM.INFO.{stream}", request, timeout=log.ask_timeout)
    info = _INFO.decode(answer.data)
    if info.error is not None:
        nats.js.errors.APIError.from_error(info.error)  # raises the error's own class
    return info


async def firsts(log: JetStreamLog, subjects: list[str], stream: str) -> list[Record]:
    """The first message of each of ``subjects`` (one a purge emptied is left out), in stream order."""
    found = await log.gets([(1, subject) for subject in subjects], stream)
    return sorted((record for record in found if record is not None), key=lambda record: record.seq)
