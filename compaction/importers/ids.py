"""Imported session ids: derived from the format, the file's content and the session's index, so
importing the same file twice yields the same ids."""

from __future__ import annotations

import hashlib
import uuid

NAMESPACE = uuid.UUID("6b1f2c1e-9d1a-5c3e-8f47-0d6e1c2a9b30")
"""Namespace of imported session ids: ``uuid5(NAMESPACE, f"{format}:{sha256}:{index}")``."""


def session_id_for(format: str, digest: str, index: int) -> uuid.UUID:
    """The deterministic id of the ``index``-th session imported from a file with ``digest``."""
    return uuid.uuid5(NAMESPACE, f"{format}:{digest}:{index}")


def file_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
