"""How much of a span's facts (:func:`~compaction.handover.facts.span_facts`) a summary keeps:
what it lacks (:func:`missing_from`, what the completion asks a model to add) and the share it
keeps of each kind (:func:`retention`, the fidelity measures of the benchmark and the handover
tests). Identifiers count verbatim, as the gate counts them; asks, error lines and open tasks by
the tolerant match (:mod:`compaction.handover.matching`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compaction.handover.facts import SpanFacts
from compaction.handover.failures import ErrorFact
from compaction.handover.identifiers import retained
from compaction.handover.matching import mentions, normalized


@dataclass(frozen=True)
class Missing:
    user_asks: tuple[str, ...] = ()
    identifiers: tuple[str, ...] = ()
    open_tasks: tuple[str, ...] = ()
    errors: tuple[ErrorFact, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.user_asks or self.identifiers or self.open_tasks or self.errors)


def missing_from(summary: str, facts: SpanFacts) -> Missing:
    """What ``summary`` lacks of ``facts``: user asks, identifiers (verbatim, as the gate counts
    them), open tasks, and every error whose first informative line it does not mention (the
    measure :func:`retention` scores; fixed or not, a later reader needs what was tried)."""
    haystack = normalized(summary)
    _, identifiers = retained(facts.identifiers.all(), summary)
    errors = [e for e in facts.errors if not mentions(haystack, e.first_line, prepared=True)]
    return Missing(
        user_asks=tuple(a for a in facts.user_asks if not mentions(haystack, a, prepared=True)),
        identifiers=tuple(identifiers),
        open_tasks=tuple(t for t in facts.open_tasks if not mentions(haystack, t, prepared=True)),
        errors=tuple(errors),
    )


@dataclass(frozen=True)
class Retention:
    """How much of a span's facts a summary keeps: ``(kept, total)`` per kind."""

    identifiers: tuple[int, int]
    user_asks: tuple[int, int]
    errors: tuple[int, int]
    open_tasks: tuple[int, int]

    @staticmethod
    def ratio(pair: tuple[int, int]) -> float:
        kept, total = pair
        return 1.0 if not total else kept / total


def retention(summary: str, facts: SpanFacts) -> Retention:
    """The fidelity measures of the benchmark and the handover tests, one function for every
    summary: verbatim identifiers (as the gate counts them); user asks, failed tool results (each
    one, by its first informative line) and unfinished todo items by the tolerant match."""
    haystack = normalized(summary)
    wanted = facts.identifiers.all()
    kept, _ = retained(wanted, summary)

    def share(items: Sequence[str]) -> tuple[int, int]:
        return sum(mentions(haystack, i, prepared=True) for i in items), len(items)

    return Retention(
        identifiers=(len(kept), len(wanted)),
        user_asks=share(facts.user_asks),
        errors=share([e.first_line for e in facts.errors]),
        open_tasks=share(facts.open_tasks),
    )
