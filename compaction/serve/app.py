"""The application factory: the service as an aiohttp :class:`web.Application` over a store.

    app = compaction.serve.application(SessionStore.open("postgresql://..."), token="s3cret")
    web.run_app(app)                          # on its own
    outer.add_subapp("/compaction", app)      # or mounted in your own aiohttp application

The caller owns the store (the application never closes it). ``token``: every route but the
probes requires ``Authorization: Bearer <token>``. ``max_body``: the largest request body in bytes
(413 ``PayloadTooLargeError`` above it). ``keep``: how many loaded sessions stay in memory.
``poll``: seconds between two looks at the store while an event stream has nothing new.
"""

from __future__ import annotations

from aiohttp import web

from compaction.serve import routes, stream
from compaction.serve.guard import TOKEN, bearer, errors, timing
from compaction.serve.host import Host
from compaction.serve.openapi import encoded
from compaction.sessions.store import SessionStore

MAX_BODY = 8 * 1024 * 1024
"""The default request size limit: 8 MiB, room for a long step's tool output."""


def application(
    store: SessionStore,
    *,
    token: str | None = None,
    max_body: int = MAX_BODY,
    keep: int = 4096,
    poll: float = 0.2,
) -> web.Application:
    app = web.Application(middlewares=[timing, errors, bearer], client_max_size=max_body)
    app[routes.HOST] = Host(store, keep=keep)
    app[routes.OPENAPI] = encoded()
    app[stream.POLL] = poll
    if token is not None:
        app[TOKEN] = token
    routes.add_routes(app)
    stream.add_routes(app)
    return app


def host_of(app: web.Application) -> Host:
    """The sessions ``app`` hosts (for an embedding application that also works in-process)."""
    return app[routes.HOST]
