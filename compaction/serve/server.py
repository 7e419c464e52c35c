"""Running the service as ``compaction serve`` does: bind, serve until SIGTERM or SIGINT, then
shut down gracefully.

A non-loopback address is refused without a token (a store of every agent's conversations must
not be open to the network); the token is read from ``--token-file`` (its first line). On SIGTERM
the listening socket closes first, the event streams end, and the requests under way finish
(their saves are never cut short: a save runs to its end in its worker thread) for up to
``grace`` seconds before the store is closed.
"""

from __future__ import annotations

import asyncio
import gc
import ipaddress
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from compaction.errors import ConfigurationError
from compaction.serve.app import MAX_BODY, application
from compaction.sessions.store import SessionStore

WORKERS = 32
"""Worker threads for store calls (each request's store work runs in one)."""
SWITCH_INTERVAL = 0.0005
"""Seconds a thread may hold the GIL before another runnable one gets it (Python's default is
0.005). A compaction is CPU work in a worker thread; at the default, the event loop could wait up
to 5 ms for the GIL behind it, and every request it serves meanwhile with it. The ``compaction
serve`` process sets it; an application mounted in another process leaves that process's as it is."""


@dataclass(frozen=True)
class Binding:
    host: str = "127.0.0.1"
    port: int = 8080
    token: str | None = None
    max_body: int = MAX_BODY
    grace: float = 30.0


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def read_token(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigurationError(
            f"--token-file {path}: expected a readable file holding the token; {e}"
        ) from e
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if len(token) < 16:
        raise ConfigurationError(
            f"--token-file {path}: expected a token of at least 16 characters on its first line; "
            f"found {len(token)} characters"
        )
    return token


def check_binding(binding: Binding) -> None:
    if binding.token is None and not is_loopback(binding.host):
        raise ConfigurationError(
            f"--host {binding.host}: refusing to serve a non-loopback address without a token; "
            "pass --token-file FILE (clients then send `Authorization: Bearer <token>`), or bind "
            "127.0.0.1"
        )


def serve(store_url: str, binding: Binding) -> dict[str, object]:
    """Serve until SIGTERM/SIGINT; the store is opened here and closed after the shutdown."""
    check_binding(binding)
    sys.setswitchinterval(SWITCH_INTERVAL)
    with SessionStore.open(store_url) as store:
        served = asyncio.run(_serve(store, binding))
    return {"stopped": True, **served}


async def _serve(store: SessionStore, binding: Binding) -> dict[str, object]:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(WORKERS, thread_name_prefix="compaction-serve"))
    app = application(store, token=binding.token, max_body=binding.max_body)
    runner = web.AppRunner(app, shutdown_timeout=binding.grace, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, binding.host, binding.port, reuse_address=True)
    await site.start()
    gc.freeze()  # what the imports and the start made lives as long as the process: never collect it
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    host, port = runner.addresses[0][:2]  # the port bound, when --port 0 asked for any
    url = f"http://{host}:{port}" if ":" not in str(host) else f"http://[{host}]:{port}"
    print(f"compaction serve: listening on {url}", file=sys.stderr, flush=True)
    await stop.wait()
    print("compaction serve: shutting down (finishing the requests under way)", file=sys.stderr, flush=True)
    await runner.cleanup()
    return {"url": url, "shutdown": "graceful"}
