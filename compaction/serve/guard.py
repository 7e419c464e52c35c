"""The middlewares every request passes: errors as JSON, then the bearer token.

``errors`` turns whatever a handler raises into the JSON error body (:mod:`compaction.serve.failures`):
the library's errors with their type names, aiohttp's own HTTP errors (no route, a method the route
does not take, a body over the size limit) as the library's :class:`RouteNotFoundError` and
:class:`PayloadTooLargeError`. ``bearer`` refuses a request without the service's token (when it
has one) with 401; the health and readiness probes are open.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from compaction.errors import BadRequestError, PayloadTooLargeError, RouteNotFoundError, UnauthorizedError
from compaction.serve.failures import error_response, json_error
from compaction.serve.host import STORE_SECONDS

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OPEN_ROUTES = frozenset({"healthz", "readyz"})
"""Probes answer without a token (a load balancer or an orchestrator calls them), by route name, so
a mounted application's probes are open under its prefix too."""
TOKEN = web.AppKey("token", str)


@web.middleware
async def timing(request: web.Request, handler: Handler) -> web.StreamResponse:
    """``Server-Timing: store;dur=MS, app;dur=MS`` on every answer that has not started streaming:
    the time the request spent in the store work (:data:`~compaction.serve.host.STORE_SECONDS`),
    and in the application (the handler and the middlewares, the store work included; what is
    left of the client's time is aiohttp's, the network's and the client's own)."""
    began = time.perf_counter()
    STORE_SECONDS.set(0.0)
    response = await handler(request)
    if not response.prepared:
        store, app = STORE_SECONDS.get() * 1e3, (time.perf_counter() - began) * 1e3
        response.headers["Server-Timing"] = f"store;dur={store:.3f}, app;dur={app:.3f}"
    return response


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except UnauthorizedError as e:
        return error_response(e, {"WWW-Authenticate": "Bearer"})
    except web.HTTPRequestEntityTooLarge as e:
        return json_error(413, PayloadTooLargeError.__name__, f"request body over the limit: {e.text}")
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed) as e:
        message = f"no route answers {request.method} {request.path}"
        return json_error(e.status, RouteNotFoundError.__name__, message)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return json_error(e.status, BadRequestError.__name__, e.text or e.reason)
    except Exception as e:  # every other failure: the library's, or a bug (logged)
        return error_response(e)


@web.middleware
async def bearer(request: web.Request, handler: Handler) -> web.StreamResponse:
    token = request.config_dict.get(TOKEN)
    if token is None or request.match_info.route.name in OPEN_ROUTES:
        return await handler(request)
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise UnauthorizedError(
            f"{request.method} {request.path}: expected the header `Authorization: Bearer <token>` "
            "with the service's token; found "
            + ("another token" if scheme.lower() == "bearer" else "no bearer token")
        )
    return await handler(request)
