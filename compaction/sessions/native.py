"""The native event format: one session as JSONL, restorable exactly (same seqs, same surface).

Line 1 is a header ``{"format": "compaction-events", "version": 2, "session_id", "library_version",
"events", "surface_hash"}``; each further line is one event ``{"seq", "type", "time", "payload",
"surface_op", "source_event_seqs", "hash"}`` where ``payload`` holds the event's own fields and
``hash`` (since version 2) is the event's content hash (:func:`event_hash`). Reading refuses a file
whose seqs are not contiguous, whose events break a rule or whose event does not match its hash
(an edited shadowed event changes no surface hash, so the surface hash alone would not notice),
naming the line and the seq. Version 1 files (no per-event hash) still import.

Format evolution rules (docs/formats.md): new fields get defaults; a type name is never reused for a
different shape; where an event's shape must change, its class raises ``class_version`` and gains an
``upcast_vN_vN+1`` (eventsourcing's convention): an event line of a version above 1 says
``"class_version"``, and an older line is upcast when it is imported, as a stored row is when it is
read. Such a line's content hash names the shape it was written in, so it is checked against the
line as written. A whole-file change of the envelope is upcast by :data:`UPCASTERS`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, TextIO
from uuid import UUID

import msgspec

from compaction.errors import (
    CorruptSurfaceError,
    EventRuleError,
    StoreError,
    TranscriptError,
    UnknownEventTypeError,
)
from compaction.sessions.events import SessionEvent, UnknownEvent
from compaction.sessions.hashing import FoldedLog, folded_surface_hash, surface_hash
from compaction.sessions.mapper import decode_event, encode_event
from compaction.sessions.session import Session

FORMAT = "compaction-events"
VERSION = 2
HASHED_SINCE = 2  # the first version whose event lines carry ``hash``
_ENVELOPE = ("seq", "type", "time", "surface_op", "source_event_seqs")
_LINE = msgspec.json.Encoder()
_PARSE = msgspec.json.Decoder().decode
TOO_DEEP = "JSON nested too deeply to read (more levels than the decoder's recursion limit)"

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
UPCASTERS: dict[tuple[str, int], Upcaster] = {}
"""(event type, format version it was written in) -> payload rewrite to the current shape."""


def library_version() -> str:
    try:
        return version("event-compaction")
    except PackageNotFoundError:  # running from a source tree
        return "0+unknown"


# ---------------------------------------------------------------- writing


def event_hash(event: SessionEvent) -> str:
    """The content hash of one event: lowercase hex sha256 of its msgspec JSON (the bytes the store
    keeps as its payload), so any change to any field, envelope included, changes it."""
    return hashlib.sha256(encode_event(event)).hexdigest()


def event_line(event: SessionEvent) -> dict[str, Any]:
    if isinstance(event, UnknownEvent):  # written back as it was stored
        data = msgspec.json.decode(event.payload)
        version = data.pop("class_version", 1)
        digest = hashlib.sha256(msgspec.json.encode(data)).hexdigest()
        kind = event.event_type
    else:
        data = msgspec.to_builtins(event)
        version, digest, kind = event.class_version, event_hash(event), event.TYPE
    envelope = {key: data.pop(key, None) for key in _ENVELOPE}
    data.pop("type", None)
    line = {
        "seq": event.seq,
        "type": kind,
        "time": envelope["time"],
        "payload": data,
        "surface_op": envelope["surface_op"],
        "source_event_seqs": envelope["source_event_seqs"],
        "hash": digest,
    }
    if version > 1:
        line["class_version"] = version
    return line


def _header_line(session_id: UUID, events: int, digest: str) -> str:
    header = {
        "format": FORMAT,
        "version": VERSION,
        "session_id": str(session_id),
        "library_version": library_version(),
        "events": events,
        "surface_hash": digest,
    }
    return json.dumps(header, ensure_ascii=False)


def _event_text(event: SessionEvent) -> str:
    """One event's line: compact JSON, text as UTF-8 (msgspec: a quarter of the stdlib's time)."""
    return _LINE.encode(event_line(event)).decode()


def export_lines(session: Session) -> Iterator[str]:
    """The export of a session in memory (every event it holds or fetches)."""
    yield _header_line(session.id, len(session), surface_hash(session))
    for event in session.events():
        yield _event_text(event)


def export_session(session: Session, path: Path) -> int:
    with path.open("w", encoding="utf-8") as out:
        for line in export_lines(session):
            out.write(line + "\n")
    return len(session)


@dataclass(frozen=True)
class StoredExport:
    """The export of a stored session, read from the store window by window: memory holds one
    window of events and the session's fold state, whatever its length.

    :meth:`of` folds the session (from its latest snapshot: :meth:`SessionStore.fold`) for the
    header's count and surface hash (:func:`~compaction.sessions.hashing.folded_surface_hash`);
    :meth:`lines` then reads the events ``0..events-1`` in windows (events a writer appends
    meanwhile are not part of this export). A read that ends before the count the header announces
    raises :class:`~compaction.errors.StoreError` instead of ending the export early."""

    source: FoldedLog
    session_id: UUID
    events: int
    surface_hash: str

    @classmethod
    def of(cls, source: FoldedLog, session_id: UUID) -> StoredExport:
        session, digest = folded_surface_hash(source, session_id)
        return cls(source, session_id, len(session), digest)

    def lines(self) -> Iterator[str]:
        """The header line, then one line per event (no newlines)."""
        yield _header_line(self.session_id, self.events, self.surface_hash)
        expected = 0
        for event in self.source.iter_events(self.session_id, 0, self.events):
            if event.seq != expected:
                break
            yield _event_text(event)
            expected += 1
        if expected != self.events:
            raise StoreError(
                f"session {self.session_id}: the store returned no event at seq {expected} while "
                f"exporting its {self.events} events; the export is incomplete"
            )

    def write(self, out: TextIO) -> int:
        """Write every line to ``out``; the number of events written."""
        for line in self.lines():
            out.write(line + "\n")
        return self.events


# ---------------------------------------------------------------- reading


def _fail(path: str, line: int, message: str) -> TranscriptError:
    return TranscriptError(path, line, message)


def is_native(path: Path) -> bool:
    """Whether the file starts with a native export header (any version)."""
    try:
        with path.open(encoding="utf-8-sig") as handle:
            header = json.loads(handle.readline())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False
    return isinstance(header, dict) and header.get("format") == FORMAT


def read_header(path: Path) -> dict[str, Any]:
    first = next(_numbered_lines(path), (1, ""))[1]
    try:
        header = json.loads(first)
    except json.JSONDecodeError as e:
        raise _fail(str(path), 1, f"the header line is not JSON: {e}") from e
    except RecursionError:
        raise _fail(str(path), 1, f"the header line is not JSON: {TOO_DEEP}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise _fail(str(path), 1, f"not a native event export (expected format {FORMAT!r})")
    file_version = header.get("version")
    if not isinstance(file_version, int) or not 1 <= file_version <= VERSION:
        raise _fail(
            str(path),
            1,
            f"unsupported format version {file_version!r}; this library reads 1..{VERSION}",
        )
    return header


def _numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` from 1; unreadable files and bytes that are not UTF-8 name the line."""
    number = 0
    try:
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
    except UnicodeDecodeError as e:
        raise _fail(str(path), number, f"expected UTF-8 text: {e}") from e
    except OSError as e:
        raise TranscriptError(str(path), None, f"cannot read the export: {e}") from e


def import_session(path: Path) -> Session:
    """Rebuild the exported session exactly; every rule is re-checked, errors name the line."""
    header = read_header(path)
    session = Session(_session_id(str(path), header))
    hashes: list[_LineHash] = []  # of every event line, checked once the whole file is read
    for number, raw in _numbered_lines(path):
        if number == 1 or not raw.strip():
            continue
        line = _parsed_line(str(path), number, raw)
        event = _decode_line(str(path), number, line, header["version"])
        if header["version"] >= HASHED_SINCE:
            hashes.append(_line_hash(number, line, event))
        if event.time.tzinfo is None:
            raise _fail(str(path), number, f"time {event.time.isoformat()} has no timezone; expected UTC")
        if event.seq != len(session):
            raise _fail(str(path), number, f"seq {event.seq} is not contiguous; expected {len(session)}")
        try:
            session.append(event)
        except (EventRuleError, CorruptSurfaceError) as e:
            raise _fail(str(path), number, f"event seq {event.seq} breaks a rule: {e}") from e
    if not len(session):
        raise _fail(str(path), 2, "expected at least one event line after the header, found none")
    _verify(str(path), header, session)
    if header["version"] >= HASHED_SINCE:
        for recorded, event in zip(hashes, session.events(), strict=True):
            _check_hash(str(path), recorded, event)
    return session


def _session_id(path: str, header: dict[str, Any]) -> UUID:
    try:
        return UUID(str(header.get("session_id")))
    except ValueError as e:
        raise _fail(path, 1, f"session_id {header.get('session_id')!r} is not a UUID") from e


def _parsed_line(path: str, number: int, raw: str) -> Any:
    """The line's JSON value (parsed once: the event and its hash check both read it)."""
    try:
        return _PARSE(raw)
    except RecursionError:
        raise _fail(path, number, f"not an event line: {TOO_DEEP}") from None
    except msgspec.DecodeError as e:
        raise _fail(path, number, f"not an event line (not JSON: {e})") from e


def _decode_line(path: str, number: int, line: Any, file_version: int) -> SessionEvent:
    try:
        kind = line["type"]
        payload = dict(line["payload"])
        upcast = UPCASTERS.get((kind, file_version))
        if upcast is not None:
            payload = upcast(payload)
        payload.update(seq=line["seq"], time=line["time"])
        # Only the envelope's nulls mean "absent": a payload field may be None on purpose
        # (``turn: int | None`` has no default, so dropping it would make the line undecodable).
        for key in ("surface_op", "source_event_seqs"):
            if line.get(key) is not None:
                payload[key] = line[key]
        version = line.get("class_version", 1)
        if version != 1:  # first, where the mapper looks for it (upcast there when older)
            payload = {"class_version": version, **payload}
        return decode_event(kind, msgspec.json.encode(payload), f"{path}:{number}")
    except UnknownEventTypeError as e:
        raise _fail(path, number, str(e)) from e
    except RecursionError:
        raise _fail(path, number, f"not an event line: {TOO_DEEP}") from None
    except (KeyError, TypeError) as e:
        raise _fail(path, number, f"not an event line ({type(e).__name__}: {e})") from e
    except Exception as e:  # decode errors from msgspec come wrapped in StoreError
        raise _fail(path, number, str(e)) from e


@dataclass(frozen=True)
class _LineHash:
    """What one event line says of its content hash: the line's number, the hash it records, and
    (a line of an older class version, upcast on import) the hash of the event as written."""

    number: int
    recorded: str | None
    written: str | None


def _line_hash(number: int, line: dict[str, Any], event: SessionEvent) -> _LineHash:
    recorded = line.get("hash")
    upcast = line.get("class_version", 1) != event.class_version  # hashed as written
    return _LineHash(
        number,
        recorded if isinstance(recorded, str) else None,
        hashlib.sha256(_written(line)).hexdigest() if upcast else None,
    )


def _check_hash(path: str, line: _LineHash, event: SessionEvent) -> None:
    """The line's recorded content hash against the event it decoded to. Checked after the count
    and the surface hash, so an edit the surface shows is reported as such (line 1); this finds
    the rest: an edited event that is no longer on the surface (a shadowed one)."""
    if line.recorded is None:
        raise _fail(
            path, line.number, f'event seq {event.seq} has no content hash; expected "hash": a sha256'
        )
    actual = line.written if line.written is not None else event_hash(event)
    if line.recorded != actual:
        raise _fail(
            path,
            line.number,
            f"event seq {event.seq} ({event.TYPE}) does not match its content hash (expected "
            f"{line.recorded[:16]}..., found {actual[:16]}...): the event was edited after export",
        )


def _written(line: dict[str, Any]) -> bytes:
    """The event's JSON as the exporting version encoded it (its field order: the envelope, then
    the payload as exported), for the content hash of a line written in an older shape."""
    envelope = {"seq": line["seq"], "time": line["time"]}
    for key in ("surface_op", "source_event_seqs"):
        if line.get(key) is not None:
            envelope[key] = line[key]
    return msgspec.json.encode(envelope | dict(line["payload"]))


def _verify(path: str, header: dict[str, Any], session: Session) -> None:
    expected = header.get("events")
    if expected is not None and expected != len(session):
        raise _fail(path, 1, f"the header announces {expected} events but the file holds {len(session)}")
    recorded = header.get("surface_hash")
    if recorded and recorded != surface_hash(session):
        raise _fail(path, 1, "the rebuilt surface hash differs from the header's (file altered?)")


def iter_exports(paths: Iterable[Path]) -> Iterator[Session]:
    for path in paths:
        yield import_session(path)
