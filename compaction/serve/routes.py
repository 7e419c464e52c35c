"""The routes of the sessions resource, the probes and the OpenAPI document.

Every answer about a session carries its version as the ETag (``"N"``: the number of stored
events); a write may send it back as ``If-Match`` and is refused with 409 ``ConcurrencyError`` when
the session moved on meanwhile. An append may carry an ``Idempotency-Key``: a retry of an append
whose answer was lost (a crash, a timeout) finds the events the first attempt stored and answers
with them (``replayed: true``) instead of storing them again.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Iterator
from typing import Any, TypeVar
from uuid import UUID

import msgspec
from aiohttp import web

from compaction.audit.report import audit_session
from compaction.errors import BadRequestError
from compaction.serve.host import Host
from compaction.serve.items import FORMATS
from compaction.serve.shapes import Append, CompactRequest, Format, Health, NewSession, Ready

HOST = web.AppKey("host", Host)
OPENAPI = web.AppKey("openapi", bytes)
S = TypeVar("S")
KEY = re.compile(r"[A-Za-z0-9._:-]{1,128}")
MAX_PAGE = 1000
EXPORT_BLOCK = 1024
"""Lines of an export the service writes at a time."""
log = logging.getLogger("compaction.serve")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/healthz", healthz, name="healthz")
    app.router.add_get("/readyz", readyz, name="readyz")
    app.router.add_get("/v1/openapi.json", openapi, name="openapi")
    app.router.add_get("/v1/sessions", list_sessions, name="sessions")
    app.router.add_post("/v1/sessions", create_session, name="create")
    app.router.add_get("/v1/sessions/{id}", get_session, name="session")
    app.router.add_post("/v1/sessions/{id}/items", append_items, name="items")
    app.router.add_get("/v1/sessions/{id}/surface", get_surface, name="surface")
    app.router.add_post("/v1/sessions/{id}/compact", compact, name="compact")
    app.router.add_get("/v1/sessions/{id}/audit", audit, name="audit")
    app.router.add_get("/v1/sessions/{id}/export", export, name="export")


# ---------------------------------------------------------------- reading requests


async def body_of(request: web.Request, shape: type[S]) -> S:
    raw = await request.read()
    try:
        return msgspec.json.decode(raw, type=shape)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise BadRequestError(
            f"{request.method} {request.path}: the body is not a {shape.__name__}: {e}"
        ) from e


def session_id(request: web.Request) -> UUID:
    text = request.match_info["id"]
    try:
        return UUID(text)
    except ValueError:
        raise BadRequestError(f"{request.path}: expected a session id (a UUID); found {text!r}") from None


def if_match(request: web.Request) -> int | None:
    """The version ``If-Match`` names (``"N"``, ``W/"N"`` or ``N``); None when absent or ``*``."""
    raw = request.headers.get("If-Match")
    if raw is None or raw.strip() == "*":
        return None
    text = raw.strip().removeprefix("W/").strip('"')
    if not text.isdecimal():
        raise BadRequestError(f'If-Match: expected a version ETag such as "12"; found {raw!r}')
    return int(text)


def idempotency_key(request: web.Request) -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is not None and not KEY.fullmatch(key):
        raise BadRequestError(
            f"Idempotency-Key: expected 1-128 characters of A-Z a-z 0-9 . _ : -; found {key!r}"
        )
    return key


def integer(request: web.Request, name: str, default: int | None, low: int = 0) -> int | None:
    text = request.query.get(name)
    if text is None:
        return default
    if not text.lstrip("-").isdecimal() or int(text) < low:
        raise BadRequestError(f"?{name}=: expected an integer >= {low}; found {text!r}")
    return int(text)


def format_of(request: web.Request) -> Format:
    found = request.query.get("format", "openai")
    for name in FORMATS:
        if name == found:
            return name
    raise BadRequestError(f"?format=: expected one of {', '.join(FORMATS)}; found {found!r}")


def answer(value: Any, *, status: int = 200, version: int | None = None) -> web.Response:
    headers = {"ETag": f'"{version}"'} if version is not None else None
    return web.Response(
        status=status, body=msgspec.json.encode(value), content_type="application/json", headers=headers
    )


# ---------------------------------------------------------------- probes and the document


async def healthz(request: web.Request) -> web.Response:
    return answer(Health("ok"))


async def readyz(request: web.Request) -> web.Response:
    """Ready when the store answers a query (its last notification id)."""
    host = request.app[HOST]
    try:
        last = await host.call(None, host.store.max_notification_id)
    except Exception as e:
        return answer(Ready("unavailable", host.store.backend, error=str(e)), status=503)
    return answer(Ready("ready", host.store.backend, last_notification=last))


async def openapi(request: web.Request) -> web.Response:
    return web.Response(body=request.app[OPENAPI], content_type="application/json")


# ---------------------------------------------------------------- sessions


async def list_sessions(request: web.Request) -> web.Response:
    host = request.app[HOST]
    prefix = request.query.get("prefix", "")
    after = request.query.get("after")
    limit = integer(request, "limit", 50, low=1) or 50
    query = request.query.get("q")
    page = await host.call(None, lambda: host.listed(prefix, after, min(limit, MAX_PAGE), query))
    return answer(page)


async def create_session(request: web.Request) -> web.Response:
    host = request.app[HOST]
    spec = await body_of(request, NewSession)
    if spec.window is not None and spec.window <= 0:
        raise BadRequestError(f"window: expected a positive number of tokens; found {spec.window}")
    created = await host.call(spec.id, lambda: host.create(spec))
    response = answer(created, status=201, version=created.version)
    response.headers["Location"] = str(request.url.with_path(f"{request.path}/{created.id}").with_query(None))
    return response


async def get_session(request: web.Request) -> web.Response:
    host = request.app[HOST]
    key = session_id(request)
    info = await host.call(key, lambda: host.info(host.load(key)))
    return answer(info, version=info.version)


async def append_items(request: web.Request) -> web.Response:
    host = request.app[HOST]
    key = session_id(request)
    expected, idempotency = if_match(request), idempotency_key(request)
    body = await body_of(request, Append)
    appended = await host.call(key, lambda: host.append(key, body, expected, idempotency))
    return answer(appended, version=appended.version)


async def get_surface(request: web.Request) -> web.Response:
    host = request.app[HOST]
    key = session_id(request)
    shape, at = format_of(request), integer(request, "at", None)
    surface = await host.call(key, lambda: host.surface(key, shape, at))
    return answer(surface, version=surface.version)


async def compact(request: web.Request) -> web.Response:
    host = request.app[HOST]
    key = session_id(request)
    expected = if_match(request)
    raw = await request.read()
    wanted = CompactRequest() if not raw.strip() else await body_of(request, CompactRequest)
    if wanted.window is not None and wanted.window <= 0:
        raise BadRequestError(f"window: expected a positive number of tokens; found {wanted.window}")
    done = await host.call(key, lambda: host.compact(key, wanted, expected))
    return answer(done, version=done.version)


async def audit(request: web.Request) -> web.Response:
    host = request.app[HOST]
    key = session_id(request)

    def audited() -> tuple[int, dict[str, Any]]:
        version = host.load(key).saved_length
        return version, audit_session(host.store, key).as_json()

    version, document = await host.call(key, audited)
    return answer(document, version=version)


async def export(request: web.Request) -> web.StreamResponse:
    """The native export, written block by block as it is read from the store (window by window:
    the service never holds the whole session). A failure before the first block answers with the
    JSON error; a failure after it aborts the connection, so a client never takes a cut export for
    a whole one (it ends without the chunked encoding's last chunk)."""
    host = request.app[HOST]
    key = session_id(request)
    stored = await host.call(key, lambda: host.export(key))
    lines = stored.lines()
    block = await host.call(None, lambda: _block(lines))
    response = web.StreamResponse(
        headers={
            "Content-Type": "application/x-ndjson",
            "ETag": f'"{stored.events}"',
            "Content-Disposition": f'attachment; filename="{key}.events.jsonl"',
        }
    )
    await response.prepare(request)
    try:
        while block:
            await response.write(block)
            block = await host.call(None, lambda: _block(lines))
    except Exception:
        log.exception("export of session %s failed after its first lines: connection aborted", key)
        if request.transport is not None:
            request.transport.abort()
        raise
    await response.write_eof()
    return response


def _block(lines: Iterator[str]) -> bytes:
    """The next :data:`EXPORT_BLOCK` lines as one write (empty at the end)."""
    return "".join(line + "\n" for line in itertools.islice(lines, EXPORT_BLOCK)).encode()
