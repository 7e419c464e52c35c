"""Errors of the command line, under the library root (see :mod:`sessions.errors`).

    ConfigurationError
    ├── UsageError              the command line itself is wrong (exit status 2)
    └── AmbiguousSessionError   a SESSION prefix matches more than one stored session
"""

from __future__ import annotations

from sessions.errors import ConfigurationError


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
