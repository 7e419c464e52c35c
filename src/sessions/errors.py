"""The library's error hierarchy: one root, every other error a subclass.

    EventCompactionError                      the root; catch this to catch everything
    ├── ConfigurationError (ValueError)        bad store URL, unknown config key, bad knob value
    ├── UnknownEventTypeError (LookupError)    a stored or imported event type nobody registered
    ├── EventRuleError (ValueError)            an append broke a rule; carries rule, seq, values
    │   ├── SurfaceRuleError                   a surface rule of spec §b.2 (contiguity, eligibility, ...)
    │   └── StructureRuleError                 a turn/step rule of spec §a.7
    ├── CorruptSurfaceError                    tool-pairing balance went negative (spec §c)
    ├── SessionStateError (ValueError)         a rollback past saved events, adopting another session
    ├── StoreError                             the event store failed
    │   ├── ConcurrencyError                   another writer appended to the same session first
    │   └── SessionNotFoundError (KeyError)    no such session in the store
    └── TranscriptError (ValueError)           an input transcript cannot be read; names file and line

Other layers (compaction, projections, recovery) subclass the root from their own modules.
Every message says what was expected, what was found, and where (session, seq, event type).
"""

from __future__ import annotations

from typing import Any


class EventCompactionError(Exception):
    """Root of every error this library raises on purpose."""


class ConfigurationError(EventCompactionError, ValueError):
    """A configuration value, URL or option is invalid."""


class UnknownEventTypeError(EventCompactionError, LookupError):
    """An event type is not registered (a reader without the package that defines it)."""

    def __init__(self, event_type: str, where: str = "") -> None:
        self.event_type = event_type
        location = f" at {where}" if where else ""
        super().__init__(
            f"unknown event type {event_type!r}{location}: no registered event class has this "
            "TYPE; import the package that defines it (for example `import compaction`) "
            "before reading this log"
        )


class EventRuleError(EventCompactionError, ValueError):
    """An event was rejected; the log and the surface are unchanged."""

    def __init__(self, rule: str, seq: int, message: str, **values: Any) -> None:
        self.rule = rule
        self.seq = seq
        self.values = values
        super().__init__(f"[{rule}] {message}")


class SurfaceRuleError(EventRuleError):
    """A surface validation rule (spec §b.2) rejected the event."""


class StructureRuleError(EventRuleError):
    """A turn/step structure rule (spec §a.7) rejected the event."""


class CorruptSurfaceError(EventCompactionError):
    """The surface is not tool-pairing balanced in a way that cannot happen legally."""

    def __init__(self, message: str, seq: int) -> None:
        self.seq = seq
        super().__init__(message)


class SessionStateError(EventCompactionError, ValueError):
    """An operation on a session object that its state does not allow (nothing was changed)."""


class StoreError(EventCompactionError):
    """The event store failed."""


class ConcurrencyError(StoreError):
    """Another writer appended to the same session first; nothing of this save was stored."""

    def __init__(self, session_id: object, first_seq: int, last_seq: int) -> None:
        self.session_id = session_id
        self.first_seq = first_seq
        self.last_seq = last_seq
        super().__init__(
            f"session {session_id}: another writer already stored seqs in {first_seq}..{last_seq}; "
            "none of this save's events were stored. Reload the session and retry."
        )


class SessionNotFoundError(StoreError, KeyError):
    """No session with that id exists in the store."""

    def __init__(self, session_id: object) -> None:
        self.session_id = session_id
        super().__init__(f"no session {session_id} in the store")

    def __str__(self) -> str:
        return str(self.args[0])


class TranscriptError(EventCompactionError, ValueError):
    """An input transcript could not be read."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")
