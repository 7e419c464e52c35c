"""``GET /v1/events``: the store's committed events as Server-Sent Events, for followers in any
language.

Each SSE message is one committed event: ``id:`` its notification id (the store's global order:
increasing, with gaps on JetStream, whose ids follow the stream sequence), ``event:`` its type
(``user/message``, ``compact/end``, ...), ``data:`` a :class:`~compaction.serve.shapes.StreamedEvent`
(the session and the event in the native export's line shape). The stream starts after
``?after=N`` or, on a reconnect, after the ``Last-Event-ID`` the client got last (an EventSource
sends it by itself), so a follower that reconnects misses nothing and sees nothing twice.
``?session=ID`` keeps one session's events. While nothing new is committed the stream polls the
store and sends a comment line every ``heartbeat`` seconds, so proxies keep the connection open.
The streams end when the service shuts down.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from uuid import UUID

import msgspec
from aiohttp import web

from compaction.errors import BadRequestError
from compaction.serve.routes import HOST, integer
from compaction.serve.shapes import StreamedEvent
from compaction.sessions.native import event_line
from compaction.sessions.store import StoredNotification

BATCH = 256
STOPPING = web.AppKey("stopping", asyncio.Event)
POLL = web.AppKey("poll", float)
HEARTBEAT_SECONDS = 15.0


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/events", events, name="events")
    app[STOPPING] = asyncio.Event()
    app.on_shutdown.append(_stop)


async def _stop(app: web.Application) -> None:
    app[STOPPING].set()


def start_of(request: web.Request) -> int:
    """Where the stream starts: after ``Last-Event-ID`` (a reconnect), else ``?after=`` (else 0)."""
    last = request.headers.get("Last-Event-ID")
    if last is not None:
        if not last.strip().isdecimal():
            raise BadRequestError(f"Last-Event-ID: expected a notification id; found {last!r}")
        return int(last)
    return integer(request, "after", 0) or 0


def message(notification: StoredNotification) -> bytes:
    event = notification.event
    data = StreamedEvent(notification.notification_id, notification.session_id, event_line(event))
    return (
        f"id: {notification.notification_id}\nevent: {event.TYPE}\ndata: ".encode()
        + msgspec.json.encode(data)
        + b"\n\n"
    )


async def events(request: web.Request) -> web.StreamResponse:
    host = request.app[HOST]
    after = start_of(request)
    wanted = request.query.get("session")
    try:
        only = UUID(wanted) if wanted is not None else None
    except ValueError:
        raise BadRequestError(f"?session=: expected a session id; found {wanted!r}") from None
    stopping = request.config_dict[STOPPING]
    poll = request.config_dict.get(POLL, 0.2)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    await response.write(b": committed events\n\n")
    quiet = 0.0
    while not stopping.is_set():
        batch = await host.call(None, functools.partial(host.store.notifications, after, BATCH))
        for notification in batch:
            after = notification.notification_id
            if only is None or notification.session_id == only:
                await response.write(message(notification))
        if batch:
            quiet = 0.0
            continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), poll)
        quiet += poll
        if quiet >= HEARTBEAT_SECONDS:
            await response.write(b": still here\n\n")
            quiet = 0.0
    return response
