"""The deterministic template summarizer: offline, extractive, the default.

It builds the eight sections of the instruction from the shadowed messages: the first user request
verbatim, the paths, commands, error strings and ids the agent touched, unanswered tool calls, and the
latest assistant text. A prior ``<compacted-summary>`` in the span is merged section by section
instead of being copied. The output is budgeted to a fraction of the input so it always shrinks
spans of any real size.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from compaction.checkpoint import framed_summary
from compaction.errors import EmptySummaryError
from compaction.fidelity import section_bodies
from compaction.identifiers import Identifiers, extract
from compaction.instruction import SECTIONS
from compaction.sessions.blocks import Message, ToolCallBlock, ToolResultBlock, text_of
from compaction.summarizers.base import Summarizer, SummaryOutput, SummaryRequest

REQUEST_CHARS = 600
CURRENT_CHARS = 400
MAX_ITEMS = 400
MAX_ERROR_LINES = 40
TOOLS_USED = "- Tools used: "
CURRENT_STATE = ("Current Work", "Next Step")  # replaced, not merged, by a fresh span's state


class TemplateSummarizer(Summarizer):
    provider = "template"
    model = "template-v1"

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        text = render_summary(request.messages)
        if not text.strip():
            raise EmptySummaryError("template summarizer produced no text (empty span)")
        return SummaryOutput(
            text=text, provider=self.provider, model=self.model, max_tokens=request.max_tokens
        )


def render_summary(messages: Iterable[Message]) -> str:
    messages = list(messages)
    prior = _prior_sections(messages)
    fresh = [m for m in messages if framed_summary(m) is None]
    found = extract(fresh)
    prior_tools = _tool_counts(prior.pop("Key Technical Concepts", []))
    sections = {
        "Primary Request and Intent": _requests(fresh),
        "Key Technical Concepts": _concepts(fresh, prior_tools),
        "Files and Code": _files(fresh, found),
        "Errors and Fixes": _errors(fresh, found),
        "Pending Jobs": _pending(fresh),
        "Current Work": _current(fresh),
        "Next Step": _next_step(fresh),
        "Critical Context": _critical(found),
    }
    lines: list[str] = []
    for name in SECTIONS:
        stale = name in CURRENT_STATE and bool(sections[name])  # the fresh span supersedes it
        bullets = _merge([] if stale else prior.get(name, []), sections[name])
        lines.append(f"## {name}")
        lines.extend(bullets or ["- (none)"])
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------- prior checkpoints


def _prior_sections(messages: list[Message]) -> dict[str, list[str]]:
    merged: dict[str, list[str]] = {}
    for message in messages:
        body = framed_summary(message)
        if body is None:
            continue
        for name, section in section_bodies(body).items():
            bullets = [
                ln for ln in section.splitlines() if ln.startswith("- ") and ln != "- (none)"
            ]
            merged.setdefault(name, []).extend(bullets)
    return merged


def _merge(old: list[str], new: list[str]) -> list[str]:
    return list(dict.fromkeys([*old, *new]))[:MAX_ITEMS]


# ---------------------------------------------------------------- sections


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _user_texts(messages: list[Message]) -> list[str]:
    return [
        text_of(m.content)
        for m in messages
        if m.role == "user" and m.source.kind != "tool" and text_of(m.content).strip()
    ]


def _requests(messages: list[Message]) -> list[str]:
    texts = _user_texts(messages)
    if not texts:
        return []
    bullets = [f"- Original request: {_clip(texts[0], REQUEST_CHARS)}"]
    bullets += [f"- Later instruction: {_clip(t, 200)}" for t in texts[1:4]]
    if len(texts) > 4:
        bullets.append(f"- ({len(texts) - 4} further user messages in this span)")
    return bullets


def _tool_calls(messages: list[Message]) -> list[ToolCallBlock]:
    return [b for m in messages for b in m.content if isinstance(b, ToolCallBlock)]


def _concepts(messages: list[Message], prior: Counter[str]) -> list[str]:
    counts = prior + Counter(call.name for call in _tool_calls(messages))
    if not counts:
        return []
    used = ", ".join(f"{name} x{n}" for name, n in counts.most_common())
    return [f"{TOOLS_USED}{used}"]


def _tool_counts(bullets: list[str]) -> Counter[str]:
    """Tool counts of a prior checkpoint's ``Tools used`` bullet, so a merge adds them up."""
    counts: Counter[str] = Counter()
    for bullet in bullets:
        if bullet.startswith(TOOLS_USED):
            for item in bullet[len(TOOLS_USED) :].split(", "):
                name, _, n = item.rpartition(" x")
                if name and n.isdigit():
                    counts[name] += int(n)
    return counts


def _files(messages: list[Message], found: Identifiers) -> list[str]:
    edited = {
        path
        for call in _tool_calls(messages)
        if any(w in call.name.lower() for w in ("edit", "write", "create", "patch", "replace"))
        for path in found.paths
        if path in call.arguments
    }
    return [f"- `{p}`{' (edited)' if p in edited else ''}" for p in found.paths][:MAX_ITEMS]


def _errors(messages: list[Message], found: Identifiers) -> list[str]:
    bullets = [f"- `{line}`" for line in list(found.error_lines)[:MAX_ERROR_LINES]]
    listed = " ".join(bullets)
    names = [n for n in found.errors if n not in listed]
    if names:
        bullets.append("- Error names seen: " + ", ".join(f"`{n}`" for n in names))
    failed = _failed_calls(messages)
    if failed:
        bullets.append(f"- {len(failed)} tool calls returned errors: " + ", ".join(failed[:12]))
    return bullets


def _failed_calls(messages: list[Message]) -> list[str]:
    names = {c.id: c.name for c in _tool_calls(messages)}
    return [
        f"{names.get(b.tool_call_id, 'tool')} ({b.tool_call_id})"
        for m in messages
        for b in m.content
        if isinstance(b, ToolResultBlock) and b.is_error
    ]


def _pending(messages: list[Message]) -> list[str]:
    answered = {
        b.tool_call_id for m in messages for b in m.content if isinstance(b, ToolResultBlock)
    }
    return [
        f"- Unanswered tool call {c.id}: {c.name} {_clip(c.arguments, 160)}"
        for c in _tool_calls(messages)
        if c.id not in answered
    ]


def _assistant_texts(messages: list[Message]) -> list[str]:
    return [
        text_of(m.content) for m in messages if m.role == "assistant" and text_of(m.content).strip()
    ]


def _current(messages: list[Message]) -> list[str]:
    texts = _assistant_texts(messages)
    return [f"- {_clip(texts[-1], CURRENT_CHARS)}"] if texts else []


def _next_step(messages: list[Message]) -> list[str]:
    calls = _tool_calls(messages)
    if calls:
        last = calls[-1]
        return [f"- Continue after the last action: {last.name} {_clip(last.arguments, 160)}"]
    return []


def _critical(found: Identifiers) -> list[str]:
    bullets = [f"- Command: `{c}`" for c in found.commands]
    if found.ids:
        bullets.append("- Identifiers: " + ", ".join(f"`{i}`" for i in found.ids))
    return bullets[:MAX_ITEMS]
