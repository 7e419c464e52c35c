"""Errors as HTTP answers: one table from the library's error classes to statuses, and the JSON body
every failure carries, ``{"error": {"type", "message", "status"}}``, where ``type`` is the library's
class name (the CLI's ``--json`` error document has the same ``type`` and ``message``).

The status of an error is the one :data:`STATUS` gives the nearest class in its MRO; an exception
that is not the library's (a bug) is a 500 of type ``InternalError`` whose message says no more.
"""

from __future__ import annotations

import logging

import msgspec
from aiohttp import web

from compaction.errors import (
    AuditError,
    BadRequestError,
    BusyError,
    CommitError,
    CompactionConfigError,
    CompactionError,
    CompactionNotFoundError,
    ConcurrencyError,
    ConfigurationError,
    ConversationConflictError,
    CorruptSurfaceError,
    EventCompactionError,
    EventRuleError,
    IntegrationError,
    PayloadTooLargeError,
    RouteNotFoundError,
    SessionNotFoundError,
    SessionStateError,
    SpanError,
    StoreError,
    SummarizerError,
    SurfaceChangedError,
    TranscriptError,
    UnauthorizedError,
    UnknownEventTypeError,
    UnreadableRowError,
)
from compaction.serve.shapes import ErrorBody, ErrorDetail

log = logging.getLogger("compaction.serve")

STATUS: dict[type[BaseException], int] = {
    EventCompactionError: 500,
    # what the client sent
    BadRequestError: 400,
    ConfigurationError: 400,
    UnauthorizedError: 401,
    RouteNotFoundError: 404,
    SessionNotFoundError: 404,
    CompactionNotFoundError: 404,
    PayloadTooLargeError: 413,
    # the request's items break a rule of the log: nothing of the request is stored
    EventRuleError: 422,
    IntegrationError: 422,
    TranscriptError: 422,
    SpanError: 422,
    AuditError: 422,
    # someone else got there first, or the session is in a state that does not allow it
    ConcurrencyError: 409,
    ConversationConflictError: 409,
    BusyError: 409,
    SurfaceChangedError: 409,
    SessionStateError: 409,
    # the compaction could not be made or committed
    CompactionError: 500,
    CompactionConfigError: 500,
    SummarizerError: 502,
    CommitError: 503,
    # the store
    StoreError: 503,
    UnreadableRowError: 500,
    UnknownEventTypeError: 500,
    CorruptSurfaceError: 500,
}
"""The library's error classes -> HTTP status; an error takes its nearest class's status."""


def status_of(error: BaseException) -> int:
    for cls in type(error).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def error_body(kind: str, message: str, status: int) -> bytes:
    return msgspec.json.encode(ErrorBody(ErrorDetail(type=kind, message=message, status=status)))


def error_response(error: BaseException, headers: dict[str, str] | None = None) -> web.Response:
    """The JSON answer for ``error``: the library's type name and message, or ``InternalError``."""
    if isinstance(error, EventCompactionError):
        status, kind, message = status_of(error), type(error).__name__, str(error)
    else:
        log.exception("unexpected failure", exc_info=error)
        status, kind, message = 500, "InternalError", "the service failed unexpectedly (logged)"
    if status >= 500:
        log.warning("%s %s: %s", status, kind, message)
    return json_error(status, kind, message, headers)


def json_error(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status,
        body=error_body(kind, message, status),
        content_type="application/json",
        headers=headers,
    )
