"""The store's JetStream key-value buckets, and compare-and-set writes that survive a retry.

Beside its streams a store ``S`` keeps three buckets: ``S_snapshots`` (the latest snapshot of each
session, :mod:`compaction.sessions.nats.snapshots`), ``S_leases`` (the compaction lease of each
session, :mod:`compaction.sessions.nats.leases`) and ``S_tracking`` (tracking positions,
:class:`~compaction.sessions.nats.recorders.JetStreamTrackingRecorder`). Each key holds one value
(history 1) and is written only by compare-and-set: ``create`` (no value yet) or ``update`` with the
revision the writer read.

A write that timed out may have been stored all the same; its retry then finds the key at another
revision and is refused. :func:`compare_and_set` reads the key back in that case: when it holds the
very value this writer sent, the write went through and its revision is returned; otherwise
another writer was first (:class:`nats.js.errors.KeyWrongLastSequenceError`).
"""

from __future__ import annotations

from dataclasses import dataclass

import nats.js.errors
from nats.js.kv import KeyValue

from compaction.sessions.nats.client import WRONG_LAST_SEQUENCE, JetStreamLog, retrying

SNAPSHOTS = "snapshots"
LEASES = "leases"
TRACKING = "tracking"


def bucket_name(log: JetStreamLog, purpose: str) -> str:
    return f"{log.stream}_{purpose}"


async def open_bucket(log: JetStreamLog, purpose: str) -> KeyValue:
    """The store's bucket for ``purpose``, created (history 1, the store's replicas) if missing."""
    name = bucket_name(log, purpose)

    async def once() -> KeyValue:
        try:
            return await log.ask.key_value(name)
        except nats.js.errors.BucketNotFoundError:
            pass
        try:
            return await log.js.create_key_value(bucket=name, history=1, replicas=log.replicas)
        except nats.js.errors.BadRequestError:  # created by another process meanwhile
            return await log.ask.key_value(name)

    return await retrying(once)


@dataclass(frozen=True)
class Entry:
    """A key's value and its revision (the sequence ``update(..., last=...)`` expects)."""

    value: bytes
    revision: int


async def read(kv: KeyValue, key: str) -> Entry | None:
    """The key's value, or None when it has none (never written, or deleted)."""
    try:
        entry = await retrying(lambda: kv.get(key))
    except nats.js.errors.KeyNotFoundError:
        return None
    return Entry(entry.value or b"", int(entry.revision or 0))


async def compare_and_set(kv: KeyValue, key: str, value: bytes, last: int | None) -> int:
    """Write ``value`` if the key is still at revision ``last`` (None: has no value); the new
    revision. Raises :class:`nats.js.errors.KeyWrongLastSequenceError` when another writer was
    first. Retried on transient errors (a retry of a stored write is recognised by its value)."""
    attempts = 0

    async def once() -> int:
        nonlocal attempts
        attempts += 1
        if last is None:
            return int(await kv.create(key, value))
        return int(await kv.update(key, value, last=last))

    try:
        return await retrying(once)
    except nats.js.errors.KeyWrongLastSequenceError:
        if attempts > 1:
            found = await read(kv, key)
            if found is not None and found.value == value:
                return found.revision
        raise


async def delete_if(kv: KeyValue, key: str, last: int) -> bool:
    """Delete the key if it is still at revision ``last``; False when another writer moved it
    (or a retried delete already went through)."""
    try:
        await retrying(lambda: kv.delete(key, last=last))
    except nats.js.errors.BadRequestError as e:
        if e.err_code == WRONG_LAST_SEQUENCE:
            return False
        raise
    return True
