"""A polling subscription, plugged into eventsourcing's ``ApplicationRecorder.subscribe()``.

eventsourcing's SQLite application recorder has no ``subscribe()`` (it raises
``NotImplementedError``), and a PostgreSQL recorder that appends without ``NOTIFY``
(:class:`~compaction.sessions.partitioned.UnannouncedPostgresRecorder`) would leave the stock
``LISTEN`` subscription waiting forever. Their recorders mix in :class:`PollingRecorder`, whose
``subscribe()`` returns a :class:`PollingSubscription`: it selects the notifications after its
position in batches (``>`` on the notification id, since ids can skip after a rejected insert)
and, when the log is exhausted, sleeps for its poll interval (or until stopped). The stock
PostgreSQL and in-memory recorders keep their own listen/notify subscriptions.

The store selects :class:`PollingSQLiteRecorder` for SQLite through eventsourcing's
``APPLICATION_RECORDER_TOPIC`` setting; readers go through
:meth:`~compaction.sessions.store.SessionStore.follow`, never through the recorder.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Self

from eventsourcing.persistence import ApplicationRecorder, Notification, Subscription
from eventsourcing.sqlite import SQLiteApplicationRecorder

DEFAULT_POLL_INTERVAL = 0.5
DEFAULT_BATCH_SIZE = 500


class PollingSubscription(Subscription[ApplicationRecorder]):
    """Notifications after ``gt``, selected in batches; blocks (polling) until :meth:`stop`."""

    def __init__(
        self,
        recorder: ApplicationRecorder,
        gt: int | None = None,
        topics: Sequence[str] = (),
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> None:
        super().__init__(recorder=recorder, gt=gt, topics=topics)
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.position = gt or 0
        self._stopped = threading.Event()
        self._buffer: list[Notification] = []

    def __next__(self) -> Notification:
        while not self._buffer:
            if self._stopped.is_set():
                raise StopIteration
            self._buffer = list(self._select())
            if not self._buffer:
                self._stopped.wait(self.poll_interval)
        if self._stopped.is_set():
            raise StopIteration
        notification = self._buffer.pop(0)
        self.position = notification.id
        return notification

    def _select(self) -> Sequence[Notification]:
        return self._recorder.select_notifications(
            start=self.position,
            limit=self.batch_size,
            topics=self._topics,
            inclusive_of_start=False,
        )

    def stop(self) -> None:
        super().stop()
        self._stopped.set()

    def __enter__(self) -> Self:
        super().__enter__()
        return self

    def __exit__(self, *args: object, **kwargs: Any) -> None:
        super().__exit__(*args, **kwargs)


class PollingRecorder(ApplicationRecorder):
    """Mix into an application recorder (before it) to subscribe by polling."""

    poll_interval: float = DEFAULT_POLL_INTERVAL

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        return PollingSubscription(self, gt, topics, poll_interval=self.poll_interval)


class PollingSQLiteRecorder(PollingRecorder, SQLiteApplicationRecorder):
    """The SQLite application recorder, with a polling ``subscribe()``."""


POLLING_SQLITE_RECORDER_TOPIC = f"{__name__}:{PollingSQLiteRecorder.__name__}"
