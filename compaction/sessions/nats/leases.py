"""The compaction lease of each session in the JetStream key-value bucket ``<stream>_leases``.

Key: the session id (hex). Value: the holder's claim (:class:`~compaction.sessions.leases.LeaseClaim`:
compaction id, host, pid, expiry, and once stored the seq of its ``compact/start``). Every write is a
compare-and-set (:mod:`compaction.sessions.nats.buckets`):

- acquire: ``create`` when the key has no value; ``update(..., last=revision)`` over a claim that
  may be taken over (expired, this process's own failed compaction, or closed in the log); any
  other claim refuses with :class:`~compaction.errors.LeaseTakenError`. Of two processes racing for
  one session exactly one write lands; the other reads the winner's claim and is refused.
- confirm (the renewal): ``update(..., last=revision)`` adding the start's seq, once it is stored.
- release: ``delete(..., last=revision)`` once the compaction's ``compact/end`` is stored.

A release that fails (the store unreachable) leaves a claim whose start the log shows closed: the
next acquirer takes it over. A process that dies between its claim and its start leaves a claim
that blocks the session until its expiry (the lease's ``lease_seconds``), as its start would have.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import msgspec
import nats.js.errors
from eventsourcing.persistence import PersistenceError
from nats.js.kv import KeyValue

from compaction.errors import LeaseTakenError
from compaction.sessions.leases import Closed, Grant, LeaseClaim
from compaction.sessions.nats.buckets import (
    LEASES,
    Entry,
    compare_and_set,
    delete_if,
    open_bucket,
    read,
)

log = logging.getLogger("compaction.store.nats")
RACE_ATTEMPTS = 8


class _Value(msgspec.Struct, frozen=True):
    compaction_id: str
    host: str
    pid: int
    expires_at: datetime
    start_seq: int | None = None


_DECODER = msgspec.json.Decoder(_Value)


def _encode(claim: LeaseClaim) -> bytes:
    return msgspec.json.encode(
        _Value(claim.compaction_id, claim.host, claim.pid, claim.expires_at, claim.start_seq)
    )


def _decode(session_id: UUID, entry: Entry) -> LeaseClaim | None:
    try:
        value = _DECODER.decode(entry.value)
    except msgspec.DecodeError:
        return None  # not a claim (deleted, or foreign): free
    return LeaseClaim(
        session_id, value.compaction_id, value.host, value.pid, value.expires_at, value.start_seq
    )


class JetStreamLeases:
    """:class:`~compaction.sessions.leases.CompactionLeases` on the ``<stream>_leases`` bucket."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection  # a JetStreamConnection
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await open_bucket(self.connection.log, LEASES)
        return self._kv

    def _read(self, key: str) -> Entry | None:
        async def once() -> Entry | None:
            return await read(await self._bucket(), key)

        result: Entry | None = self.connection.call(once())
        return result

    def _write(self, key: str, claim: LeaseClaim, last: int | None) -> int | None:
        """The new revision, or None when another writer moved the key first."""

        async def once() -> int | None:
            try:
                return await compare_and_set(await self._bucket(), key, _encode(claim), last)
            except nats.js.errors.KeyWrongLastSequenceError:
                return None

        result: int | None = self.connection.call(once())
        return result

    def acquire(self, claim: LeaseClaim, *, replaces: str | None, closed: Closed) -> Grant | None:
        key = claim.session_id.hex
        held: LeaseClaim | None = None
        for _ in range(RACE_ATTEMPTS):
            entry = self._read(key)
            held = None if entry is None else _decode(claim.session_id, entry)
            if held is not None and not _may_take(held, replaces, closed):
                raise _taken(held)
            revision = self._write(key, claim, None if entry is None else entry.revision)
            if revision is not None:
                return Grant(claim, revision)
        raise _taken(held or claim)

    def confirm(self, grant: Grant, start_seq: int) -> Grant:
        claim = dataclasses.replace(grant.claim, start_seq=start_seq)
        try:
            revision = self._write(claim.session_id.hex, claim, grant.revision)
        except PersistenceError as e:
            log.warning("compaction %s: its lease could not be confirmed: %s", claim.compaction_id, e)
            return grant
        if revision is None:
            log.warning(
                "compaction %s: its lease of session %s was taken over before it was confirmed",
                claim.compaction_id, claim.session_id,
            )  # fmt: skip
            return grant
        return Grant(claim, revision)

    def release(self, grant: Grant) -> None:
        claim = grant.claim

        async def once() -> bool:
            return await delete_if(await self._bucket(), claim.session_id.hex, grant.revision)

        try:
            self.connection.call(once())
        except PersistenceError as e:  # the log shows the compaction closed: the next one takes over
            log.warning("compaction %s: its lease could not be released: %s", claim.compaction_id, e)


def _may_take(held: LeaseClaim, replaces: str | None, closed: Closed) -> bool:
    if held.compaction_id == replaces:
        return True  # this process's own failed compaction, taken over
    if held.expires_at <= datetime.now(UTC):
        return True
    return closed(held)


def _taken(held: LeaseClaim) -> LeaseTakenError:
    return LeaseTakenError(
        held.session_id, held.compaction_id, held.host, held.pid, held.expires_at.isoformat()
    )
