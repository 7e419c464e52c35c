"""What a handover needs from a span: the user's asks, the errors met, the open tasks, the agent's
stated intent, the files touched, and the verbatim identifiers (:func:`span_facts`; the template
summarizer renders them, the completion of model summaries checks them,
:mod:`compaction.handover.retention` scores a summary against them).

Each is read by the module named for what it reads: a message once
(:mod:`~compaction.handover.reading`), the span's steps and user-role messages in one pass
(:mod:`~compaction.handover.walk`), the harness's wrappers (:mod:`~compaction.handover.harness_text`),
the tool calls and their results (:mod:`~compaction.handover.calls`,
:mod:`~compaction.handover.outcomes`), the errors (:mod:`~compaction.handover.failures`), the
todo/plan state (:mod:`~compaction.handover.tasks`), the files (:mod:`~compaction.handover.files`),
the intent (:mod:`~compaction.handover.intent`) and the identifiers
(:mod:`~compaction.handover.identifiers`).

What is found of each message, call and result is kept by the session's analysis while one is
active (a compaction, the read-ahead: :mod:`compaction.handover.analysis`); without one, every
reader computes and keeps nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from compaction.handover.analysis import chars, remembered
from compaction.handover.calls import describe
from compaction.handover.failures import ErrorFact, span_errors
from compaction.handover.files import file_action, files_of
from compaction.handover.identifiers import Identifiers, extract, identifiers_size, merged
from compaction.handover.intent import span_intent
from compaction.handover.reading import reads
from compaction.handover.tasks import open_tasks, todo_op
from compaction.handover.walk import Step, walk_span
from compaction.sessions.blocks import Message
from compaction.sessions.memo import ENTRY_BYTES, SequenceMemo
from compaction.vocabulary.checkpoint import framed_summary

LAST_STEPS = 3


@dataclass(frozen=True)
class SpanFacts:
    user_asks: tuple[str, ...] = ()
    errors: tuple[ErrorFact, ...] = ()
    open_tasks: tuple[str, ...] = ()
    intent: str | None = None
    files_edited: tuple[str, ...] = ()
    files_created: tuple[str, ...] = ()
    files_read: tuple[str, ...] = ()
    identifiers: Identifiers = field(default_factory=Identifiers)
    slash_commands: tuple[str, ...] = ()
    interruptions: int = 0
    active_task: str | None = None
    """The todo item marked in progress, if any (also in ``open_tasks``)."""
    todo_seen: bool = False
    """A todo/plan tool was used in the span (so ``open_tasks`` is the agent's own state)."""
    last_steps: tuple[str, ...] = ()
    """The last tool calls, each ``Tool `command or path``` with its outcome."""
    last_agent_text: str | None = None
    unanswered: tuple[str, ...] = ()
    ends_with_ask: bool = False
    """The span ends with a user ask the agent has not answered yet."""
    prior_checkpoint: bool = False
    """A prior framed checkpoint is in the span."""
    chars: int = 0
    """Characters of the span's text, tool calls (name and arguments) and results."""
    tools_used: tuple[tuple[str, int], ...] = ()
    """Calls per tool name, in the order first called (prior checkpoints not counted)."""
    context: tuple[str, ...] = ()
    """What the harness wrote in the user's role, as notes ("skill X loaded with: ARGS"): context,
    never an ask."""
    opaque_items: tuple[tuple[str, str], ...] = ()
    """The span's framework items (opaque blocks: encrypted reasoning, hosted tool calls, audio,
    ...) in order, each its kind and what a reader may see of it."""


def _facts_size(value: SpanFacts) -> int:
    texts = (*value.user_asks, *value.open_tasks, *value.last_steps, *value.unanswered)
    return (
        identifiers_size(value.identifiers)
        + chars(texts)
        + sum(ENTRY_BYTES + len(e.first_line) + len(e.command) for e in value.errors)
    )


@remembered(lambda budget: SequenceMemo(budget, _facts_size))
def span_facts(messages: Sequence[Message]) -> SpanFacts:
    """The handover facts of a span (a prior framed checkpoint in it is skipped: merge it apart).
    With an active analysis found once per span: the template, the completion and the gate of one
    compaction share them (recalled while the same message objects come again,
    :class:`~compaction.sessions.memo.SequenceMemo`)."""
    found = reads(messages)
    walk = walk_span(messages, found)
    tasks, active, seen = _tasks(walk.steps)
    edited, created, opened = _files(walk.steps)
    checkpoints = any(r.checkpoint for r in found)
    fresh = [m for m, r in zip(messages, found, strict=True) if not r.checkpoint] if checkpoints else messages
    return SpanFacts(
        chars=sum(r.chars for r in found),
        tools_used=tuple(Counter(s.call.name for s in walk.steps).items()),
        user_asks=tuple(walk.asks),
        errors=tuple(span_errors(walk)),
        open_tasks=tuple(tasks),
        intent=span_intent(walk),
        files_edited=tuple(edited),
        files_created=tuple(created),
        files_read=tuple(opened),
        identifiers=extract(fresh),
        slash_commands=tuple(dict.fromkeys(walk.slash)),
        context=tuple(dict.fromkeys(walk.context)),
        opaque_items=tuple(item for r in found if not r.checkpoint for item in r.opaque),
        interruptions=walk.interruptions,
        active_task=active,
        todo_seen=seen,
        last_steps=tuple(describe(s.call, s.result, s.failed) for s in walk.steps[-LAST_STEPS:]),
        last_agent_text=walk.agent_texts[-1][1] if walk.agent_texts else None,
        unanswered=tuple(f"{s.call.name} `{s.key}`" for s in walk.steps if s.result is None),
        prior_checkpoint=walk.checkpoint_at >= 0,
        ends_with_ask=walk.last_ask_at > walk.checkpoint_at
        and all(p < walk.last_ask_at for p, _ in walk.agent_texts)
        and not any(s.result is None for s in walk.steps),
    )


def _tasks(steps: list[Step]) -> tuple[list[str], str | None, bool]:
    """The unfinished items of the agent's latest todo/plan state, the item in progress, and
    whether any todo/plan tool was used (the steps that failed change nothing)."""
    ops = []
    for step in steps:
        if step.result is not None and step.failed:
            continue
        op = todo_op(step.call, step.todo, step.result)
        if op is not None:
            ops.append(op)
    return open_tasks(ops)


def _files(steps: list[Step]) -> tuple[list[str], list[str], list[str]]:
    return files_of(
        file_action(step.call, step.result) for step in steps if step.result is not None and not step.failed
    )


def led_span_facts(lead: Message, span: Sequence[Message]) -> SpanFacts:
    """``span_facts([lead, *span])`` for a user message leading the span (the protected task
    statement a summary request starts with), built from the span's own facts, which the
    completion of the same compaction asks for too (so they are found once), and the lead's
    (:func:`led_facts`)."""
    if not leads_apart(lead):
        return span_facts([lead, *span])
    return _led(lead, span_facts(span))


def leads_apart(lead: Message) -> bool:
    """Whether the facts of ``[lead, *span]`` are the lead's and the span's, joined
    (:func:`led_facts`). Exact, not an approximation: a user message changes nothing of how the
    messages after it are read (no call of its own, no result a later call could claim, and as
    ``previous`` it reads as no message at all). A lead that reads as the harness's feedback (an
    error fixed or not by the span's first step) or is a checkpoint is read with the span."""
    return lead.role == "user" and framed_summary(lead) is None and not span_facts([lead]).errors


def led_facts(lead: Message, facts: SpanFacts) -> SpanFacts | None:
    """``span_facts([lead, *span])`` from the span's ``facts`` and the lead's own: its asks,
    commands, interruptions and identifiers come first; its ask ends the span when the span
    itself has no ask, no agent text, no checkpoint and no open call. None when the lead must be
    read with the span's messages (:func:`leads_apart`)."""
    return _led(lead, facts) if leads_apart(lead) else None


def _led(lead: Message, facts: SpanFacts) -> SpanFacts:
    head = span_facts([lead])
    open_ask = (
        bool(head.user_asks)
        and not facts.user_asks
        and not facts.prior_checkpoint
        and facts.last_agent_text is None
        and not facts.unanswered
    )
    return replace(
        facts,
        user_asks=head.user_asks + facts.user_asks,
        identifiers=merged(head.identifiers, facts.identifiers),
        slash_commands=tuple(dict.fromkeys(head.slash_commands + facts.slash_commands)),
        context=tuple(dict.fromkeys(head.context + facts.context)),
        opaque_items=head.opaque_items + facts.opaque_items,
        interruptions=head.interruptions + facts.interruptions,
        ends_with_ask=facts.ends_with_ask or open_ask,
        chars=head.chars + facts.chars,
    )
