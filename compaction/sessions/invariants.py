"""Invariants a session opts into, by name, from a ``session/invariants`` marker in its log.

An invariant is a pre-commit rule (a :data:`~compaction.sessions.session.Validator`) about events
this package does not define, such as the ``compact/*`` brackets. The log names it, and
:data:`INVARIANT_TOPICS` says where its rule lives (``module:function``), resolved on first use the
way event types above the log are: a process that reads the log needs nothing above it until a
session asks for the rule. The marker makes the rule durable and dated: every event after the
marker is checked at append and on every load, and the events before it never are, so logs written
before the invariant existed (or imported from other harnesses) keep loading while the audit
reports what they would violate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from eventsourcing.utils import TopicError, resolve_topic

from compaction.errors import ConfigurationError

if TYPE_CHECKING:
    from compaction.sessions.events import SessionEvent
    from compaction.sessions.session import Session

Rule = Callable[["Session", "SessionEvent"], None]

COMPACT_BRACKETS = "compact-brackets"
UNIQUE_CALL_IDS = "unique-call-ids"

INVARIANT_TOPICS: dict[str, str] = {
    COMPACT_BRACKETS: "compaction.vocabulary.invariant:check_brackets",
    UNIQUE_CALL_IDS: "compaction.sessions.call_ids:check_unique_call_ids",
}
"""Invariant name -> the topic (``module:function``) of its rule."""

DEFAULT_INVARIANTS: tuple[str, ...] = (COMPACT_BRACKETS,)
"""What :meth:`SessionStore.create` puts in force for the sessions the library writes."""

STRICT_INVARIANTS: tuple[str, ...] = (*DEFAULT_INVARIANTS, UNIQUE_CALL_IDS)
"""Every invariant: what the importers put in force at the end of an imported session (their
builder keeps tool call ids unique). Not the default of sessions the agent-framework adapters
write: their call ids are the framework's, and a scripted model may repeat them."""


def register_invariant(name: str, topic: str) -> None:
    """Name the rule of invariant ``name`` by its topic (imported when a session first needs it)."""
    known = INVARIANT_TOPICS.get(name)
    if known is not None and known != topic:
        raise ValueError(f"invariant {name!r} already names topic {known!r}, not {topic!r}")
    INVARIANT_TOPICS[name] = topic


def invariant_rule(name: str) -> Rule:
    """The rule of invariant ``name``; :class:`ConfigurationError` when it is not known."""
    topic = INVARIANT_TOPICS.get(name)
    if topic is None:
        known = ", ".join(sorted(INVARIANT_TOPICS)) or "none"
        raise ConfigurationError(f"session invariant {name!r} is not known: expected one of {known}")
    try:
        rule = resolve_topic(topic)
    except TopicError as e:
        raise ConfigurationError(f"session invariant {name!r}: cannot resolve {topic!r}: {e}") from e
    if not callable(rule):
        raise ConfigurationError(f"session invariant {name!r}: {topic!r} names no function")
    return rule  # type: ignore[no-any-return]
