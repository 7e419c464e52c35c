"""One JetStream connection per process for every store handle of the same servers and stream.

A store handle (an eventsourcing infrastructure factory) used to open its own connection and its
own event-loop thread. Handles of one process now share them: :data:`CONNECTIONS` counts the
handles using each connection and closes it when the last one closes. Sharing is what lets the
saves of several handles (several writers of one process, each with its own session) go out
together: their publishes leave in one socket write and their acknowledgements come back in one
read, where separate connections pay a system call, a server wake-up and a loop turn per save.
Each handle keeps its own recorders (and their caches); only the connection and its loop are
shared. A child process never inherits the parent's connections (its loop thread does not exist
there): the table is emptied after a fork.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

Key = tuple[tuple[str, ...], str, int, float]
"""What makes two handles share a connection: servers, stream, replicas, request timeout."""


class Closable(Protocol):
    @property
    def open(self) -> bool: ...

    def close(self) -> None: ...


C = TypeVar("C", bound=Closable)


@dataclass
class _Entry:
    connection: Closable
    users: int


class SharedConnections:
    """Connections by :data:`Key`, each with the number of handles using it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[Key, _Entry] = {}

    def acquire(self, key: Key, make: Callable[[], C]) -> C:
        """The open connection for ``key``, or a new one from ``make()``; one more user of it."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or not entry.connection.open:
                entry = self._entries[key] = _Entry(make(), 0)
            entry.users += 1
            return entry.connection  # type: ignore[return-value]

    def release(self, key: Key, connection: Closable) -> None:
        """One user fewer; the connection is closed when it was the last."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.connection is not connection:
                last = True  # made anew after it broke: its old users close it themselves
            else:
                entry.users -= 1
                last = entry.users == 0
                if last:
                    del self._entries[key]
        if last:
            connection.close()

    def users(self, key: Key) -> int:
        with self._lock:
            entry = self._entries.get(key)
            return 0 if entry is None else entry.users

    def forget(self) -> None:
        """Drop every entry without closing it (a forked child: the loops live in the parent)."""
        self._lock = threading.Lock()
        self._entries = {}


CONNECTIONS = SharedConnections()
os.register_at_fork(after_in_child=CONNECTIONS.forget)
