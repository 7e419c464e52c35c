"""Compaction errors, under the library root :class:`~sessions.errors.EventCompactionError`.

    CompactionError
    ├── CompactionConfigError (ConfigurationError too)  unknown key or bad knob value
    ├── SpanError                 the requested region is not on the surface or not a balanced cut
    ├── BusyError                 a live compact/start holds the session lock, or a turn is open
    ├── SurfaceChangedError       the surface changed while the summary was being made
    ├── ShrinkError               the framed summary is not smaller than what it would shadow
    ├── FidelityError             sections missing or identifier retention under the bar
    ├── ConvergenceError          still above the threshold after every allowed attempt
    ├── CommitError               the atomic commit failed (the store refused it)
    └── SummarizerError           the summarizer failed; ``code`` says how
        ├── ContextLengthError    the prompt did not fit the model (code ``context_length``)
        ├── TruncatedError        generation stopped at max_tokens (code ``max_tokens``)
        ├── EmptySummaryError     no text came back (code ``empty``)
        └── UnsupportedOutputError  tool calls or images in the output (code ``unsupported_content``)

Every failure after ``compact/start`` is recorded as ``compact/end{error}`` with the message.
"""

from __future__ import annotations

from sessions.errors import ConfigurationError, EventCompactionError


class CompactionError(EventCompactionError):
    """Root of compaction failures."""


class CompactionConfigError(CompactionError, ConfigurationError):
    pass


class SpanError(CompactionError, ValueError):
    pass


class BusyError(CompactionError):
    pass


class SurfaceChangedError(CompactionError):
    pass


class ShrinkError(CompactionError):
    pass


class FidelityError(CompactionError):
    pass


class ConvergenceError(CompactionError):
    pass


class CommitError(CompactionError):
    pass


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
