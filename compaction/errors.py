"""The library's error hierarchy: one root, every other error a subclass, all in this module.

    EventCompactionError                      the root; catch this to catch everything
    ├── ConfigurationError (ValueError)        bad store URL, unknown config key, bad knob value
    │   ├── CompactionConfigError              unknown compaction key or bad knob value
    │   │   └── UnknownSummarizerError (LookupError)  a summarizer name nobody registered
    │   ├── ProjectionConfigError              unknown projection, bad views path or option
    │   ├── RecoveryConfigError                a bad RecoveryConfig value
    │   ├── UsageError                         the command line itself is wrong (exit status 2)
    │   ├── AmbiguousSessionError (LookupError)  a SESSION prefix matches more than one session
    │   └── PluginError                        a plugin (entry point) could not be loaded
    ├── UnknownEventTypeError (LookupError)    a stored or imported event type nobody registered
    │   └── EventVersionError                  a stored shape its class cannot upcast (no upcaster, newer)
    ├── EventRuleError (ValueError)            an append broke a rule; carries rule, seq, values
    │   ├── SurfaceRuleError                   a surface rule (contiguity, eligibility, replace range, ...)
    │   ├── StructureRuleError                 a turn/step rule (docs/sessions.md)
    │   ├── BracketRuleError                   the compact/* bracket invariant a session put in force
    │   ├── CallIdRuleError                    the unique-call-ids invariant: a call id already on the surface
    │   └── MessageShapeError                  a message's role, source or tool-result block
    ├── CorruptSurfaceError                    tool-pairing balance went negative
    ├── SessionStateError (ValueError)         a rollback past saved events, adopting another session
    ├── SessionIdError (TypeError, ValueError)  a session id neither a UUID nor the text of one
    ├── StoreError                             the event store failed
    │   ├── StoreNotFoundError                 a read-only open found no store at the URL
    │   ├── StoreUnavailableError              the store did not answer in time (an election): retry
    │   ├── StoreDriverMissingError (ImportError)  the store's client package is not installed
    │   ├── SaveError                          a save failed; ``stored`` says whether its events are stored
    │   ├── ConcurrencyError                   another writer appended to the same session first
    │   ├── SessionNotFoundError (KeyError)    no such session in the store
    │   ├── UnreadableRowError                 a stored row of the notification log does not decode
    │   └── ViewStoreError                     a projection's view database failed
    ├── TranscriptError (ValueError)           an input transcript cannot be read; names file and line
    ├── AgentLoopError (RuntimeError)          the reference loop was misused or the model answered badly
    ├── IntegrationError (ValueError)          an agent framework's item cannot be recorded or rendered
    │   ├── FrameworkMissingError (ImportError)  the adapter's framework package is not installed
    │   ├── ForeignSessionError                a session one framework made, opened by another
    │   └── ConversationConflictError          another process kept writing the conversation
    ├── ScriptExhaustedError (LookupError)     a scripted model was called more often than scripted
    ├── CompactionError
    │   ├── SpanError (ValueError)             the region is not on the surface or not a balanced cut
    │   ├── BusyError                          a live compact/start holds the lock, or a turn is open
    │   ├── SurfaceChangedError                the surface changed while the summary was being made
    │   ├── ShrinkError                        the framed summary is not smaller than what it shadows
    │   │   └── SpanTooSmallError              declined before any model request: no checkpoint could be
    │   │                                      smaller than the span (CLI exit status 3)
    │   ├── FidelityError                      sections missing or identifier retention under the bar
    │   ├── ConvergenceError                   still above the threshold after every allowed attempt
    │   ├── CommitError                        the atomic commit failed (the store refused it)
    │   │   └── LockHeldError                  ... and the compaction's lock could not be released
    │   └── SummarizerError                    the summarizer failed; ``code`` says how
    │       ├── ContextLengthError             the prompt did not fit the model (``context_length``)
    │       ├── TruncatedError                 generation stopped at max_tokens (``max_tokens``)
    │       ├── EmptySummaryError              no text came back (``empty``)
    │       ├── UnsupportedOutputError         tool calls or images in the output
    │       └── LocalServerError               the local model server failed to start
    ├── ProjectionError
    │   ├── TrackingConflictError              another runner already applied the batch
    │   ├── ProjectionTimeoutError (TimeoutError)  a view did not reach a position in time
    │   ├── FollowerGaveUpError                a follower could not reach the store or its views
    │   └── ProjectionFoldError                a stored event does not fold (corrupt log)
    ├── RecoveryError
    │   ├── OrphanCorruptionError              an orphaned compact/start is not inert
    │   └── RepairConflictError                other writers kept appending while recovery tried
    ├── AuditError                             the audit cannot do what was asked of it
    │   ├── CompactionNotFoundError (LookupError)  no compaction with that id (or prefix)
    │   └── UnrebuildableError                 the log lacks what a request would be rebuilt from
    └── ServiceError                           an HTTP request to ``compaction serve`` is wrong
        ├── BadRequestError (ValueError)       the body is not JSON of the expected shape
        ├── UnauthorizedError                  no bearer token, or not the service's
        ├── PayloadTooLargeError               the body is over the service's size limit
        └── RouteNotFoundError (LookupError)   no route for that method and path

This module imports nothing of the library, so every layer (``compaction.sessions`` included) may
import it. Every message says what was expected, what was found, and where (session, seq, event
type). Every failure after ``compact/start`` is recorded as ``compact/end{error}`` with the message;
a failed projection batch leaves the view and its tracking record as they were.
"""

from __future__ import annotations

from collections.abc import Sequence
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
            "TYPE; install the package that defines it (its compaction.event_types entry point "
            "registers it in every process) or import it before reading this log"
        )


class EventVersionError(UnknownEventTypeError):
    """A stored event's ``class_version`` its class cannot read: newer than the class, or no
    ``upcast_vN_vN+1`` leads from it to the class's version."""

    def __init__(self, event_type: str, message: str) -> None:
        self.event_type = event_type
        EventCompactionError.__init__(self, message)


class EventRuleError(EventCompactionError, ValueError):
    """An event was rejected; the log and the surface are unchanged."""

    def __init__(self, rule: str, seq: int, message: str, **values: Any) -> None:
        self.rule = rule
        self.seq = seq
        self.values = values
        super().__init__(f"[{rule}] {message}")


class SurfaceRuleError(EventRuleError):
    """A surface validation rule rejected the event (docs/sessions.md)."""


class StructureRuleError(EventRuleError):
    """A turn/step structure rule rejected the event (docs/sessions.md)."""


class BracketRuleError(EventRuleError):
    """The ``compact/*`` bracket invariant rejected the event (a session that put it in force);
    the rule is ``compact-brackets`` and ``values`` holds ``expected`` and ``found``."""


class CallIdRuleError(EventRuleError):
    """The ``unique-call-ids`` invariant rejected the event (a session that put it in force): it
    would put a tool call id on the surface twice; ``values`` holds ``call_id``."""


class MessageShapeError(EventRuleError):
    """A surface event's message has the wrong shape for its type: role, source,
    tool-result block or call id; the rule is ``message-shape``."""


class CorruptSurfaceError(EventCompactionError):
    """The surface is not tool-pairing balanced in a way that cannot happen legally."""

    def __init__(self, message: str, seq: int) -> None:
        self.seq = seq
        super().__init__(message)


class SessionStateError(EventCompactionError, ValueError):
    """An operation on a session object that its state does not allow (nothing was changed)."""


class SessionIdError(EventCompactionError, TypeError, ValueError):
    """A session id given to a session or a store is neither a :class:`uuid.UUID` nor the text of one."""


class StoreError(EventCompactionError):
    """The event store failed."""


class PerhapsStoredError(StoreError):
    """A publish that was retried after an unanswered attempt was then refused for a wrong
    expected sequence: the unanswered attempt may be the message that moved the sequence (a
    clustered server checks the expected sequence before its de-duplication). Look for the
    message id before calling it a conflict."""

    def __init__(self, msg_id: str) -> None:
        super().__init__(f"the message {msg_id} may have been stored by an unanswered attempt")
        self.msg_id = msg_id


class StoreUnavailableError(StoreError):
    """The store could not answer a read within its bounded retries: a JetStream cluster electing a
    stream leader, a node restarting, no server reachable. Nothing is known to be missing (a
    session that exists is never reported missing instead): retry the same call later."""


class SaveError(StoreError):
    """A save failed in the database. ``stored`` says whether its events are in the store: False
    (the transaction was rolled back: nothing of it is stored), True (the events were stored; what
    failed came after them) or None (the connection was lost at the commit and the store could not
    be asked again: reload the session to see)."""

    def __init__(
        self, session_id: object, first_seq: int, last_seq: int, stored: bool | None, reason: str
    ) -> None:
        self.session_id = session_id
        self.first_seq = first_seq
        self.last_seq = last_seq
        self.stored = stored
        outcome = {
            False: "none of them were stored",
            True: "they were stored",
            None: "whether they were stored is unknown (the store did not answer again); reload "
            "the session to see",
        }[stored]
        super().__init__(
            f"session {session_id}: saving seqs {first_seq}..{last_seq} failed: {reason}; {outcome}"
        )


class StoreNotFoundError(StoreError):
    """A read-only open found no store where the URL points (a SQLite file that does not exist)."""


class StoreDriverMissingError(StoreError, ImportError):
    """A store URL needs a client package that is not installed; the message names the extra."""


class ConcurrencyError(StoreError):
    """Another writer appended to the same session first; nothing of this save was stored."""

    stored = False

    def __init__(self, session_id: object, first_seq: int, last_seq: int) -> None:
        self.session_id = session_id
        self.first_seq = first_seq
        self.last_seq = last_seq
        super().__init__(
            f"session {session_id}: another writer already stored seqs in {first_seq}..{last_seq}; "
            "none of this save's events were stored. Reload the session and retry."
        )


class LeaseTakenError(ConcurrencyError):
    """Another process holds the compaction lease of the session in a store that keeps leases
    outside the log (JetStream's ``<stream>_leases`` bucket): this compaction did not start and
    stored nothing. Names the holder, its compaction and the lease's expiry."""

    def __init__(self, session_id: object, compaction_id: str, host: str, pid: int, expires_at: str) -> None:
        StoreError.__init__(
            self,
            f"session {session_id}: compaction {compaction_id} holds the compaction lease (held "
            f"by {host} pid {pid} until {expires_at}); nothing was stored",
        )
        self.session_id = session_id
        self.first_seq = self.last_seq = -1
        self.compaction_id = compaction_id
        self.host = host
        self.pid = pid
        self.expires_at = expires_at


class SessionNotFoundError(StoreError, KeyError):
    """No session with that id exists in the store."""

    def __init__(self, session_id: object) -> None:
        self.session_id = session_id
        super().__init__(f"no session {session_id} in the store")

    def __str__(self) -> str:
        return str(self.args[0])


class UnreadableRowError(StoreError):
    """A stored row read from the notification log cannot be decoded; names the session, the seq,
    the notification id and the row's event type."""

    def __init__(
        self, session_id: object, seq: int, notification_id: int, event_type: str, reason: str
    ) -> None:
        self.session_id = session_id
        self.seq = seq
        self.notification_id = notification_id
        self.event_type = event_type
        self.reason = reason
        super().__init__(
            f"session {session_id} seq {seq} (notification {notification_id}): the stored "
            f"{event_type} row cannot be decoded: {reason}"
        )


class TranscriptError(EventCompactionError, ValueError):
    """An input transcript could not be read."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")


class AgentLoopError(EventCompactionError, RuntimeError):
    """The loop was used wrongly (a turn already open) or the model answered in a bad shape."""


class IntegrationError(EventCompactionError, ValueError):
    """An agent framework handed an adapter (``compaction.integrations``) something it cannot
    record, or the log holds something the framework's types cannot carry."""


class FrameworkMissingError(IntegrationError, ImportError):
    """An adapter's framework package is not installed; the message names the extra to install."""


class ForeignSessionError(IntegrationError):
    """An adapter was handed a session another framework made (its ``request/header`` names that
    framework); pass ``allow_foreign=True`` to the adapter to open it anyway."""


class ConversationConflictError(IntegrationError):
    """Another writer (another process) appended to the conversation's session between this
    adapter's read and its write, again after every allowed reload-and-retry."""


# ---------------------------------------------------------------- the command line


class UsageError(ConfigurationError):
    """The command line does not parse; ``usage`` is the usage line of the (sub)command."""

    def __init__(self, message: str, usage: str = "") -> None:
        self.usage = usage
        super().__init__(message)


class AmbiguousSessionError(ConfigurationError, LookupError):
    """A session id prefix names more than one session."""

    def __init__(self, prefix: str, matches: list[str]) -> None:
        self.prefix = prefix
        self.matches = matches
        shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
        super().__init__(
            f"session prefix {prefix!r} is ambiguous: it matches {len(matches)} sessions "
            f"({shown}); give more characters of the id"
        )


class PluginError(ConfigurationError):
    """A plugin (a command, a transcript format) could not be loaded; names it, its target and the cause."""


# ---------------------------------------------------------------- scripted models


class ScriptExhaustedError(EventCompactionError, LookupError):
    """A scripted model was called more times than it has responses."""


# ---------------------------------------------------------------- compaction


class CompactionError(EventCompactionError):
    """Root of compaction failures."""


class CompactionConfigError(CompactionError, ConfigurationError):
    pass


class UnknownSummarizerError(CompactionConfigError, LookupError):
    """No summarizer is registered under that name; the message lists the known ones."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        self.name = name
        self.known = tuple(known)
        super().__init__(
            f"unknown summarizer {name!r}; expected one of: {', '.join(self.known) or '(none registered)'}"
        )


class SpanError(CompactionError, ValueError):
    pass


class BusyError(CompactionError):
    pass


class SurfaceChangedError(CompactionError):
    pass


class ShrinkError(CompactionError):
    pass


class SpanTooSmallError(ShrinkError):
    """The span is smaller than the smallest checkpoint that could replace it (the frame, and the
    section headings the fidelity gate requires): declined before ``compact/start`` is written and
    before any summarizer is asked. ``span_tokens`` and ``floor_tokens`` say by how much."""

    def __init__(self, message: str, *, span_tokens: int, floor_tokens: int) -> None:
        super().__init__(message)
        self.span_tokens = span_tokens
        self.floor_tokens = floor_tokens


class FidelityError(CompactionError):
    pass


class ConvergenceError(CompactionError):
    pass


class CommitError(CompactionError):
    pass


class LockHeldError(CommitError):
    """A compaction failed after its ``compact/start`` was stored and its ``compact/end`` could
    not be stored either: the lock stays held. Names the compaction, the start's seq, the lease
    and what releases it (the same process's next compaction of the session takes the lock over;
    any other process waits for the lease to expire, then ``compaction recover --repair``)."""

    def __init__(
        self, compaction_id: str, session_id: object, start_seq: int, releases: str, failure: str
    ) -> None:
        self.compaction_id = compaction_id
        self.session_id = session_id
        self.start_seq = start_seq
        super().__init__(
            f"compaction {compaction_id} failed ({failure}) and its compact/end could not be "
            f"stored: the compaction lock of session {session_id} (compact/start seq {start_seq}) "
            f"stays held; {releases}"
        )


class SummarizerError(CompactionError):
    """A summarizer failed. ``retryable`` says whether the same request may succeed later."""

    code = "error"

    def __init__(self, message: str, *, code: str | None = None, retryable: bool = False) -> None:
        if code is not None:
            self.code = code
        self.retryable = retryable
        super().__init__(message)


class ContextLengthError(SummarizerError):
    code = "context_length"


class TruncatedError(SummarizerError):
    code = "max_tokens"


class EmptySummaryError(SummarizerError):
    code = "empty"


class UnsupportedOutputError(SummarizerError):
    code = "unsupported_content"


class LocalServerError(SummarizerError):
    """The local model server failed to start (code ``local_server``)."""

    code = "local_server"


def error_chain(error: BaseException) -> str:
    """``message: cause: cause ...`` (the name when a message is empty), as recorded on compact/end."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current) or type(current).__name__
        if not parts or parts[-1] != text:
            parts.append(text)
        current = current.__cause__
    return ": ".join(parts)


# ---------------------------------------------------------------- projections


class ProjectionError(EventCompactionError):
    """Root of projection failures."""


class ProjectionConfigError(ProjectionError, ConfigurationError):
    """An unknown projection name, an unusable views location, or a bad runner option."""


class ViewStoreError(ProjectionError, StoreError):
    """The view database refused a read or a write; the message names the view and the operation."""


class TrackingConflictError(ProjectionError):
    """The view's tracking record is already at or past the batch: another runner applied it."""

    def __init__(self, projection: str, expected: int, recorded: int | None) -> None:
        self.projection = projection
        self.expected = expected
        self.recorded = recorded
        super().__init__(
            f"projection {projection!r}: expected the view's tracking record at notification "
            f"{expected}, found {recorded} (another runner is writing this view, or it was "
            "rebuilt meanwhile); nothing of this batch was written. Run one runner per view; "
            "restart this one to resume from the tracking record."
        )


class ProjectionTimeoutError(ProjectionError, TimeoutError):
    """A view did not record the awaited notification before the timeout."""


class FollowerGaveUpError(ProjectionError):
    """A follower (``rebuild --follow``, :meth:`ProjectionRunner.run_forever`) failed to reach the
    store or its views as many times in a row as it was allowed to; names the last error and the
    position the views are at (a restart resumes from there)."""


class ProjectionFoldError(ProjectionError):
    """A stored event could not be folded; names the projection, session, seq and notification."""

    def __init__(
        self, projection: str, session_id: object, seq: int, notification_id: int, reason: str
    ) -> None:
        self.projection = projection
        self.session_id = session_id
        self.seq = seq
        self.notification_id = notification_id
        super().__init__(
            f"projection {projection!r}: session {session_id} seq {seq} (notification "
            f"{notification_id}) does not fold: {reason}; nothing of this batch was written"
        )


# ---------------------------------------------------------------- recovery


class RecoveryError(EventCompactionError):
    """Root of recovery failures."""


class RecoveryConfigError(RecoveryError, ConfigurationError):
    pass


class OrphanCorruptionError(RecoveryError):
    """One or more orphans are not inert; ``evidence`` holds one line per finding."""

    def __init__(self, message: str, evidence: Sequence[str]) -> None:
        self.evidence = tuple(evidence)
        detail = "".join(f"\n  - {line}" for line in self.evidence)
        super().__init__(f"{message}{detail}")


class RepairConflictError(RecoveryError):
    pass


# ---------------------------------------------------------------- the audit


class AuditError(EventCompactionError):
    """The audit cannot do what was asked of it."""


class CompactionNotFoundError(AuditError, LookupError):
    """No compaction with that id (or id prefix) in the log."""


class UnrebuildableError(AuditError):
    """The log does not hold what the request would be rebuilt from."""


# ---------------------------------------------------------------- the HTTP service


class ServiceError(EventCompactionError):
    """An HTTP request to the service (``compaction serve``) cannot be served as it was sent."""


class BadRequestError(ServiceError, ValueError):
    """The request body or a parameter is not what the route expects (not JSON, a missing or
    mistyped field, an unknown format); the message names the field and what was found."""


class UnauthorizedError(ServiceError):
    """The service requires a bearer token and the request carried none, or another one."""


class PayloadTooLargeError(ServiceError):
    """The request body is larger than the service accepts (``--max-body``)."""


class RouteNotFoundError(ServiceError, LookupError):
    """No route of the service answers that method and path."""
