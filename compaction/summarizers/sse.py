"""Server-sent events (``text/event-stream``), decoded without any I/O: bytes in, events out.

    decoder = SSEDecoder()
    for chunk in chunks:                   # as they arrive, split anywhere (even inside UTF-8)
        for event in decoder.feed(chunk):
            ...
    events = decoder.close()               # the end of the stream

:func:`decode_event` reads an event's data as the JSON object both providers send.
"""

from __future__ import annotations

import codecs
import re
from typing import Any, NamedTuple

import msgspec

from compaction.errors import SummarizerError


class SSEEvent(NamedTuple):
    event: str
    data: str


_EOL = re.compile(r"\r\n|\r|\n")


class SSEDecoder:
    """Incremental text/event-stream decoder (WHATWG rules: CRLF, CR or LF line ends, comment
    lines, multi-line data)."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        self._buffer += self._utf8.decode(chunk)
        events: list[SSEEvent] = []
        start = 0
        for match in _EOL.finditer(self._buffer):
            if match.group() == "\r" and match.end() == len(self._buffer):
                break  # maybe the first half of a CRLF split across chunks
            self._line(self._buffer[start : match.start()], events)
            start = match.end()
        self._buffer = self._buffer[start:]
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: a last line without its newline, and an event without its blank line,
        still count."""
        events = self.feed(b"")
        self._buffer += self._utf8.decode(b"", final=True)
        for line in _EOL.split(self._buffer):
            if line:
                self._line(line, events)
        self._buffer = ""
        self._line("", events)
        return events

    def _line(self, line: str, events: list[SSEEvent]) -> None:
        if not line:
            if self._data:
                events.append(SSEEvent(self._event or "message", "\n".join(self._data)))
            self._event, self._data = "", []
            return
        if line.startswith(":"):
            return
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value


def decode_events(chunks: list[bytes]) -> list[SSEEvent]:
    """Every event of a whole stream given as chunks (a convenience over :class:`SSEDecoder`)."""
    decoder = SSEDecoder()
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    return events + decoder.close()


def decode_event(event: SSEEvent, provider: str) -> dict[str, Any]:
    """The event's data as a JSON object; anything else is a ``protocol`` SummarizerError."""
    try:
        value = msgspec.json.decode(event.data)
    except msgspec.DecodeError as e:
        raise SummarizerError(
            f"{provider} stream: expected a JSON object in a {event.event!r} event, got {event.data[:200]!r}",
            code="protocol",
        ) from e
    if not isinstance(value, dict):
        raise SummarizerError(
            f"{provider} stream: expected a JSON object in a {event.event!r} event, got "
            f"{type(value).__name__}",
            code="protocol",
        )
    return value
