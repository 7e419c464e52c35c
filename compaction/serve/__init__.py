"""``compaction serve``: the library as an HTTP service, for agents written in any language.

:func:`application` builds the aiohttp application over a :class:`~compaction.sessions.store.SessionStore`
(mount it in your own aiohttp application with ``add_subapp``); :func:`serve` runs it as the
``compaction serve`` command does. The API, its JSON shapes and its errors are described in
docs/service.md and in the OpenAPI document the service serves at ``/v1/openapi.json``
(docs/openapi.json).
"""

from __future__ import annotations

from compaction.serve.app import application
from compaction.serve.server import serve

__all__ = ["application", "serve"]
