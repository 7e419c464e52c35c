"""Checkpoint rebuild from a typed scratchpad (docs/operations.md).

At a boundary (a phase ending, an approval returning, a subtask finishing, a resume) the context is
rebuilt from verified state instead of edited: everything after the original request is replaced by one
message rendering the scratchpad values with their provenance, the phase conclusions, and the next
instruction. The original request stays verbatim because it came from the trigger, not the model.

The scratchpad lives in the log as ``scratchpad/set {key, value, source}`` events, where ``source`` names
the tool call (``tool:<call id>``) or event (``seq:<n>``) that produced the value; ``phase/end {name,
conclusion}`` is written by the phase that ends. A value without a tool source is flagged in the
rendering (the model wrote it, nothing verified it). The strategy never runs mid-step and refuses a
session without a scratchpad: a transcript summary would launder errors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from compaction.engine.brackets import committed_count
from compaction.engine.lock import UnreleasedLeases, busy_message, inspect_lock
from compaction.engine.meters import HeuristicMeter, Meter
from compaction.engine.selection import Span
from compaction.engine.transaction import Transaction
from compaction.errors import BusyError, CompactionError, SpanError
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.contract import CompactionResult, CompactService, Trigger
from compaction.vocabulary.events import PhaseEnd, ScratchpadSet
from compaction.vocabulary.summarizer import Summarizer, SummaryOutput, SummaryRequest

BOUNDARY_TYPES = ("phase/end", "session/resume", "approval/result", "subtask/end")


@dataclass(frozen=True)
class Scratchpad:
    values: dict[str, ScratchpadSet]
    phases: list[PhaseEnd]

    @property
    def unverified(self) -> list[str]:
        return [k for k, v in self.values.items() if not v.source.startswith(("tool:", "seq:"))]


def read_scratchpad(session: Session) -> Scratchpad:
    values: dict[str, ScratchpadSet] = {}
    phases: list[PhaseEnd] = []
    if not session.type_counts.get("scratchpad/set") and not session.type_counts.get("phase/end"):
        return Scratchpad(values, phases)
    for event in session.events():
        if isinstance(event, ScratchpadSet):
            values[event.key] = event
        elif isinstance(event, PhaseEnd):
            phases.append(event)
    return Scratchpad(values, phases)


def render_checkpoint(pad: Scratchpad, next_instruction: str, compactions: int) -> str:
    lines = ["## State (from the scratchpad)"]
    for key, item in pad.values.items():
        flag = (
            ""
            if item.source.startswith(("tool:", "seq:"))
            else "  [UNVERIFIED: written by the model, no tool source]"
        )
        source = item.source or "model"
        lines.append(f"- {key}: {_value(item.value)} (via {source}){flag}")
    if not pad.values:
        lines.append("- (none)")
    lines += ["", "## Phase conclusions"]
    lines += [f"- [{p.name}] {p.conclusion}" for p in pad.phases] or ["- (none)"]
    lines += ["", "## Next instruction", next_instruction.strip() or "(continue)"]
    lines += ["", f"(checkpoint rebuild #{compactions + 1} of this session)"]
    return "\n".join(lines) + "\n"


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


class _ScratchpadRenderer(Summarizer):
    provider = "checkpoint"
    model = "scratchpad-v1"

    def __init__(self, text: str) -> None:
        self.text = text

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        return SummaryOutput(text=self.text, provider=self.provider, model=self.model)


class CheckpointCompactService(CompactService):
    """Rebuilds the context at boundaries from the typed scratchpad."""

    def __init__(self, config: BasicConfig | None = None, *, meter: Meter | None = None) -> None:
        base = config or BasicConfig()
        # The rebuild keeps decisions and drops evidence by design: the summary gates do not apply,
        # and nothing is completed from the evidence.
        self.config = replace(base, min_identifier_ratio=0.0, require_sections=False, completion="off")
        self.meter = meter or HeuristicMeter()
        self.next_instruction = "Continue with the next phase."
        self.unreleased = UnreleasedLeases()  # failed rebuilds whose compact/end was not stored

    async def compact_if_needed(
        self, session: Session, *, store: SessionStore | None = None, trigger: Trigger = "pressure"
    ) -> CompactionResult | None:
        """Rebuild only right after a boundary event, never mid-step."""
        last = len(session) - 1
        if last < 0 or session.event(last).TYPE not in BOUNDARY_TYPES or session.open_step is not None:
            return None
        return await self.compact_now(session, store=store)

    async def compact_region(
        self,
        session: Session,
        start: int,
        end: int,
        *,
        store: SessionStore | None = None,
        manual: bool = False,
    ) -> CompactionResult:
        raise CompactionError(
            "checkpoint rebuild replaces everything after the original request; it does not take an "
            "explicit region (use BasicCompactService.compact_region)"
        )

    async def compact_now(
        self,
        session: Session,
        *,
        store: SessionStore | None = None,
        source_command_id: str | None = None,
        focus: str | None = None,
        next_instruction: str | None = None,
    ) -> CompactionResult | None:
        """The rebuild; a ``focus`` (``/compact <focus>``) is its next instruction unless one is
        given."""
        pad = read_scratchpad(session)
        span = self._span(session, pad)
        if span is None:
            return None
        lock = inspect_lock(session)
        text = render_checkpoint(
            pad, next_instruction or focus or self.next_instruction, committed_count(session)
        )
        transaction = Transaction(
            session=session,
            store=store,
            meter=self.meter,
            summarizer=_ScratchpadRenderer(text),
            config=self.config,
            span=span,
            owner=session.open_turn,
            stability="whole-surface",
            strategy="checkpoint",
            source_command_id=source_command_id,
            unreleased=self.unreleased,
            takeover=self.unreleased.takes_over(session, lock),
        )
        return await transaction.run()

    def _span(self, session: Session, pad: Scratchpad) -> Span | None:
        if session.open_step is not None:
            raise BusyError(
                f"checkpoint rebuild never runs mid-step: step {session.open_step} of turn "
                f"{session.open_turn} is open in session {session.id}"
            )
        lock = inspect_lock(session)
        if lock.live and self.unreleased.takes_over(session, lock) is None:
            raise BusyError(busy_message("checkpoint rebuild", session, lock))
        if not pad.values:
            raise CompactionError(
                f"checkpoint rebuild needs a typed scratchpad (scratchpad/set events) in session "
                f"{session.id}; without one it would summarize the transcript and launder its errors. "
                "Use the summary strategy instead."
            )
        first = session.first_user_seq
        position = session.surface.position(first) if first is not None else None
        if position is None:
            raise SpanError(
                f"checkpoint rebuild keeps the original request verbatim, but session {session.id} "
                "has no first user message on its surface"
            )
        nodes = session.nodes
        if position + 1 >= len(nodes):
            return None
        if not session.surface.balanced_before(nodes[position + 1]) or not session.surface.is_balanced():
            raise SpanError(
                f"checkpoint rebuild: the surface after seq {first} is not tool-pairing balanced "
                "(a tool call is still waiting for its result)"
            )
        return Span(position + 1, len(nodes) - 1, tuple(nodes[position + 1 :]))
