"""Session ids: a :class:`~uuid.UUID`, or its text where one comes from outside (a URL, a queue
message, a command line); anything else is refused before a query or a subject name is built."""

from __future__ import annotations

from uuid import UUID

from compaction.errors import SessionIdError

__all__ = ["SessionKey", "session_uuid"]


SessionKey = UUID | str
"""A session id as ``Session`` and the store's methods take it: the :class:`~uuid.UUID`, or its text."""


def session_uuid(value: object) -> UUID:
    """``value`` as a session id: a :class:`~uuid.UUID` as it is, a string parsed (any form
    :class:`~uuid.UUID` reads); anything else raises :class:`SessionIdError` saying what it got."""
    if isinstance(value, UUID):
        return value
    if isinstance(value, str):
        try:
            return UUID(value)
        except ValueError:
            raise SessionIdError(
                f"session id {value!r} is not a UUID (expected 32 hex digits, e.g. "
                "'0f8e0c2a-4b1d-4a57-9d0e-2c6b5f1e8a90')"
            ) from None
    raise SessionIdError(
        f"session id {value!r} ({type(value).__name__}) is neither a uuid.UUID nor its string form"
    )
