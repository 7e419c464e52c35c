"""The OpenAPI 3.1 document of the service, served at ``/v1/openapi.json`` and kept in the
repository as ``docs/openapi.json`` (a test checks that the two are equal and that every route is
documented and every documented path routed). The schemas are generated from the Structs of
:mod:`compaction.serve.shapes`; the paths are written here."""

from __future__ import annotations

from typing import Any

import msgspec

from compaction.serve.shapes import SCHEMAS

JSON = dict[str, Any]
API_VERSION = "1"


def ref(name: str) -> JSON:
    return {"$ref": f"#/components/schemas/{name}"}


def _content(schema: JSON, media: str = "application/json") -> JSON:
    return {media: {"schema": schema}}


ERROR = {
    "description": "an error: the library's type name, message and status",
    "content": _content(ref("ErrorBody")),
}
SESSION_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}}
IF_MATCH = {
    "name": "If-Match",
    "in": "header",
    "required": False,
    "description": 'the session version this write expects (the ETag of a read or write, e.g. "12"); '
    "409 ConcurrencyError when the session moved on",
    "schema": {"type": "string"},
}
IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "a client-chosen key: a retried append with the same key answers with what the "
    "first attempt stored (replayed: true) instead of storing it twice",
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"},
}
ETAG = {
    "ETag": {"description": 'the session version after the request, e.g. "12"', "schema": {"type": "string"}}
}


def _query(name: str, description: str, schema: JSON) -> JSON:
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}


FORMAT = _query(
    "format",
    "the provider shape (default openai)",
    {"type": "string", "enum": ["openai", "anthropic", "responses"]},
)


def operation(
    summary: str,
    answer: JSON,
    *,
    status: str = "200",
    parameters: tuple[JSON, ...] = (),
    body: str | None = None,
    etag: bool = False,
    open_probe: bool = False,
) -> JSON:
    ok: JSON = {"description": summary, "content": answer}
    if etag:
        ok["headers"] = ETAG
    found: JSON = {"summary": summary, "responses": {status: ok, "default": ERROR}}
    if parameters:
        found["parameters"] = list(parameters)
    if body is not None:
        found["requestBody"] = {"required": True, "content": _content(ref(body))}
    if open_probe:
        found["security"] = []
    return found


PATHS: JSON = {
    "/healthz": {"get": operation("the process answers", _content(ref("Health")), open_probe=True)},
    "/readyz": {
        "get": operation(
            "the store answers a query (503 when it does not)", _content(ref("Ready")), open_probe=True
        )
    },
    "/v1/openapi.json": {"get": operation("this document", _content({"type": "object"}))},
    "/v1/sessions": {
        "get": operation(
            "list or search sessions, in id order",
            _content(ref("SessionList")),
            parameters=(
                _query("prefix", "only ids starting with this", {"type": "string"}),
                _query("after", "the next_after of the previous page", {"type": "string"}),
                _query("limit", "page size (default 50, at most 1000)", {"type": "integer", "minimum": 1}),
                _query(
                    "q", "only sessions whose surface text holds this (case-insensitive)", {"type": "string"}
                ),
            ),
        ),
        "post": operation(
            "create a session with its request header (provider, model, window, system, tools)",
            _content(ref("SessionInfo")),
            status="201",
            body="NewSession",
            etag=True,
        ),
    },
    "/v1/sessions/{id}": {
        "get": operation(
            "a session's version, header and surface size",
            _content(ref("SessionInfo")),
            parameters=(SESSION_ID,),
            etag=True,
        )
    },
    "/v1/sessions/{id}/items": {
        "post": operation(
            "append items of one provider shape, all or nothing",
            _content(ref("Appended")),
            parameters=(SESSION_ID, IF_MATCH, IDEMPOTENCY_KEY),
            body="Append",
            etag=True,
        )
    },
    "/v1/sessions/{id}/surface": {
        "get": operation(
            "the surface rendered for a provider, ready to send; with at, as it was right after that seq",
            _content(ref("Surface")),
            parameters=(
                SESSION_ID,
                FORMAT,
                _query("at", "replay: the surface right after this seq", {"type": "integer", "minimum": 0}),
            ),
            etag=True,
        )
    },
    "/v1/sessions/{id}/compact": {
        "post": operation(
            "compact now (manual) or when over the threshold (if_needed, before a model call)",
            _content(ref("Compacted")),
            parameters=(SESSION_ID, IF_MATCH),
            body="CompactRequest",
            etag=True,
        )
    },
    "/v1/sessions/{id}/audit": {
        "get": operation(
            "re-check every compaction of the session from its stored log (compaction audit)",
            _content({"type": "object"}),
            parameters=(SESSION_ID,),
            etag=True,
        )
    },
    "/v1/sessions/{id}/export": {
        "get": operation(
            "the session in the native event format (JSONL: a header line, then one event per line)",
            _content({"type": "string"}, "application/x-ndjson"),
            parameters=(SESSION_ID,),
            etag=True,
        )
    },
    "/v1/events": {
        "get": operation(
            "committed events as Server-Sent Events (id: notification id, event: type, data: StreamedEvent)",
            _content({"type": "string"}, "text/event-stream"),
            parameters=(
                _query(
                    "after", "start after this notification id (default 0)", {"type": "integer", "minimum": 0}
                ),
                _query("session", "only this session's events", {"type": "string", "format": "uuid"}),
                {
                    "name": "Last-Event-ID",
                    "in": "header",
                    "required": False,
                    "description": "resume after this notification id (wins over after)",
                    "schema": {"type": "string"},
                },
            ),
        )
    },
}


def document() -> JSON:
    """The whole document: paths, and the schemas of every shape."""
    _, schemas = msgspec.json.schema_components(SCHEMAS, ref_template="#/components/schemas/{name}")
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "compaction serve",
            "version": API_VERSION,
            "description": "Event-sourced context compaction for agents in any language: sessions, "
            "provider-shaped appends and surfaces, compaction, audit, replay, export and a stream "
            "of committed events. See docs/service.md.",
        },
        "security": [{"bearer": []}],
        "paths": PATHS,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def encoded() -> bytes:
    """The document as served and as kept in docs (indented, keys in order, a final newline)."""
    return msgspec.json.format(msgspec.json.encode(document()), indent=2) + b"\n"
