"""The deterministic template summarizer: offline, extractive, the default.

It renders the handover facts of the shadowed span (:func:`compaction.handover.facts.span_facts`) into the
eight sections of the instruction: every natural-language user message (verbatim up to a budget,
then head and tail with the elision marked) apart from slash commands and interruptions; the errors
with their first informative line, the command that produced them and whether a later run fixed
them; the agent's own todo/plan state as Pending Jobs; Current Work and Next Step from the agent's
latest statement of intent and its last steps; the files edited, created and read (from tool inputs
and tool reports only); and the verbatim identifiers (paths, commands, error names, ids). A prior
``<compacted-summary>`` in the span is merged section by section instead of being copied. The output
is bounded so it shrinks spans of any real size.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from compaction.errors import EmptySummaryError
from compaction.handover.facts import SpanFacts, led_facts, led_span_facts, span_facts
from compaction.handover.failures import ErrorFact
from compaction.handover.fidelity import section_bodies
from compaction.handover.identifiers import ELLIPSIS, clip_words, word_head, word_tail
from compaction.handover.matching import mentions, normalized
from compaction.handover.reading import read
from compaction.handover.repeats import unrepeated
from compaction.sessions.blocks import Message, text_of
from compaction.vocabulary.checkpoint import framed_summary, is_checkpoint
from compaction.vocabulary.instruction import CLOSE_TAG, OPEN_TAG, PREAMBLE, SECTIONS
from compaction.vocabulary.summarizer import Summarizer, SummaryOutput, SummaryRequest

ASK_CHARS = 800
"""An ask longer than this is kept as head and tail."""
MIN_ASK_CHARS = 240
ASKS_BUDGET = 24_000
"""Characters for all of a span's asks together: with many asks, each gets a smaller share."""
CURRENT_CHARS = 400
FOREIGN_CHARS = 300
STATE_CHARS = 300
"""An ask, task or intent quoted in Current Work or Next Step."""
TERSE_FRACTION = 0.4
CHARS_PER_TOKEN = 4
TIGHT_ASK_CHARS = 100
"""The shortest an ask gets (head and tail): its head still holds the 60 characters matched."""
HEAD_ASK_CHARS = 72
"""Below :data:`TIGHT_ASK_CHARS` an ask keeps its head only (more than the 60 characters matched)."""
LEVELS = ((ASK_CHARS, False), (MIN_ASK_CHARS, True), (TIGHT_ASK_CHARS, True), (HEAD_ASK_CHARS, True))
FRAME_CHARS = len(PREAMBLE) + len(OPEN_TAG) + len(CLOSE_TAG)
"""A full rendering above this share of the span's characters is replaced by the terse one."""
MAX_ITEMS = 400
MAX_ERRORS = 40
MAX_ERROR_LINES = 20
TOOLS_USED = "- Tools used: "
FRAMEWORK_ITEMS = "- Framework items (kept in the log, not sent again): "
OPAQUE_SHOWN = 5
"""How many of a kind's framework items a checkpoint quotes (what a reader may see of each)."""
OPAQUE_CHARS = 100
ORIGINAL = "- Original request: "
HARNESS_CONTEXT = "- Harness context (not the user's words): "
TASK_MARK = "- [ ] "
RESOLVE = "- Resolve the error"
"""The lead of the pending bullet that points to the unfixed errors (``- Resolve the error of ...``
in checkpoints written before it became one bullet: superseded all the same)."""
RESOLVE_BULLET = "- Resolve the errors marked unfixed in Errors and Fixes; the latest: "
CURRENT_STATE = ("Current Work", "Next Step")  # replaced, not merged, by a fresh span's state


class TemplateSummarizer(Summarizer):
    provider = "template"
    model = "template-v1"

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        return self._output(request, render_summary(request.messages, request.max_tokens))

    async def summarize_facts(self, request: SummaryRequest, facts: SpanFacts) -> SummaryOutput | None:
        """The checkpoint of a span of ``facts`` with no prior checkpoint in it, led by
        ``request.messages`` (the protected task statement, or nothing): the same text
        :meth:`summarize` writes for the whole request (see
        :class:`~compaction.handover.completion.RendersFacts`). None for a subclass that
        overrides :meth:`summarize` (it is sent the whole request)."""
        overridden = type(self).summarize is not TemplateSummarizer.summarize
        if overridden or facts.prior_checkpoint or len(request.messages) > 1:
            return None
        led = facts
        span_chars = facts.chars
        if request.messages:
            lead = request.messages[0]
            if not _leads(lead):
                return None
            found = led_facts(lead, facts)
            if found is None:
                return None
            led = found
        return self._output(request, render_facts(led, span_chars, request.max_tokens))

    def _output(self, request: SummaryRequest, text: str) -> SummaryOutput:
        if not text.strip():
            raise EmptySummaryError("template summarizer produced no text (empty span)")
        return SummaryOutput(
            text=text, provider=self.provider, model=self.model, max_tokens=request.max_tokens
        )


def render_summary(messages: Iterable[Message], max_tokens: int | None = None) -> str:
    """The checkpoint text. On a span so small that the full rendering would not be well under its
    size, or when the full rendering exceeds ``max_tokens`` (priced at 4 characters a token), a
    terse one: no last steps or latest agent message, shorter asks; then tighter asks still."""
    messages = list(messages)
    # The request leads with the protected task statement, which stays on the surface: the span
    # that shrinks is what follows it (and its facts are the ones the completion checks).
    lead = 1 if messages and _leads(messages[0]) else 0
    facts = led_span_facts(messages[0], messages[1:]) if lead else span_facts(messages)
    span_chars = facts.chars - (read(messages[0]).chars if lead else 0)
    return render_facts(facts, span_chars, max_tokens, _prior_sections(messages))


def _leads(message: Message) -> bool:
    """Whether ``message``, first in a request, is the protected task statement leading it."""
    return message.role == "user" and message.source.kind == "user"


def render_facts(
    facts: SpanFacts,
    span_chars: int,
    max_tokens: int | None = None,
    prior: dict[str, list[str]] | None = None,
) -> str:
    """:func:`render_summary` of a span of ``facts`` (led, if it is, by the task statement) and
    ``span_chars`` characters (the lead's not counted), the bullets of its ``prior`` checkpoints
    by section merged in."""
    budget = None if max_tokens is None else max_tokens * CHARS_PER_TOKEN
    small = TERSE_FRACTION * span_chars - FRAME_CHARS
    text = ""
    for level, (ask_chars, terse) in enumerate(LEVELS):
        text = _render(dict(prior or {}), facts, ask_chars=ask_chars, terse=terse)
        if (level or len(text) <= small) and (budget is None or len(text) <= budget):
            break
    return text


def _render(prior: dict[str, list[str]], facts: SpanFacts, *, ask_chars: int, terse: bool) -> str:
    prior_tools = _tool_counts(prior.pop("Key Technical Concepts", []))
    superseded = (TASK_MARK, RESOLVE) if facts.todo_seen else (RESOLVE,)
    # the agent's current todo list supersedes the prior one; the span's latest unfixed errors
    # supersede the prior ones (which Errors and Fixes still lists, unfixed)
    prior["Pending Jobs"] = [b for b in prior.get("Pending Jobs", []) if not b.startswith(superseded)]
    requested = prior.get("Primary Request and Intent", [])
    sections = {
        "Primary Request and Intent": _requests(facts, requested, ask_chars),
        "Key Technical Concepts": _concepts(facts, prior_tools),
        "Files and Code": _files(facts),
        "Errors and Fixes": _errors(facts),
        "Pending Jobs": _pending(facts),
        "Current Work": _current(facts, terse, min(ask_chars, STATE_CHARS)),
        "Next Step": _next_step(facts, min(ask_chars, STATE_CHARS)),
        "Critical Context": [*_critical(facts), *_framework_items(facts.opaque_items)],
    }
    bodies: dict[str, list[str]] = {}
    for name in SECTIONS:
        stale = name in CURRENT_STATE and bool(sections[name])  # the fresh span supersedes it
        merge = _merge_files if name == "Files and Code" else _merge
        bodies[name] = merge([] if stale else prior.get(name, []), sections[name])
    lines: list[str] = []
    for name, bullets in _once(bodies).items():
        lines.append(f"## {name}")
        lines.extend(bullets or ["- (none)"])
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------- each thing said once

NAMED_RE = re.compile(r"^- `([^`]+)`$")
COMMAND_RE = re.compile(r"^- Command: (?:`` (.+) ``|`([^`]+)`)$")
LISTS = ("- Identifiers: ", "- Error names seen: ")
FAILED_RE = re.compile(r" \(failed: (.+?)\)(?=; |$)")
LAST = ("- Last steps: ", "- Last step: ")


def _once(bodies: dict[str, list[str]]) -> dict[str, list[str]]:
    """The sections with what they repeat taken out: a last step's failure line that Errors and
    Fixes lists ("(failed)"), and a named path, command, id or error name listed for its own sake
    that the checkpoint already quotes whole (:func:`~compaction.handover.repeats.unrepeated`)."""
    errors = "\n".join(bodies.get("Errors and Fixes", []))
    bodies = {
        name: [FAILED_RE.sub(lambda m: _failed(m, errors), b) if b.startswith(LAST) else b for b in bullets]
        for name, bullets in bodies.items()
    }
    parsed = {name: [(b, _listed_items(b)) for b in bullets] for name, bullets in bodies.items()}
    listed = [i for pairs in parsed.values() for _, items in pairs if items is not None for i in items]
    rest = [b for pairs in parsed.values() for b, items in pairs if items is None]
    kept = set(unrepeated(listed, "\n".join(rest)))
    out: dict[str, list[str]] = {}
    for name, pairs in parsed.items():
        out[name] = []
        for bullet, items in pairs:
            if items is None:
                out[name].append(bullet)
            elif any(i in kept for i in items):
                out[name].append(_relisted(bullet, [i for i in items if i in kept]))
    return out


def _failed(found: re.Match[str], errors: str) -> str:
    return " (failed)" if found.group(1) in errors else found.group(0)


def _listed_items(bullet: str) -> list[str] | None:
    """The identifiers a bullet only lists (a named path, a command, the ids, the error names),
    else None (a bullet that says something of them)."""
    for pattern in (NAMED_RE, COMMAND_RE):
        found = pattern.match(bullet)
        if found:
            return [next(g for g in found.groups() if g)]
    for lead in LISTS:
        if bullet.startswith(lead):
            return [i.strip("` ") for i in bullet[len(lead) :].split(", ")]
    return None


def _relisted(bullet: str, items: list[str]) -> str:
    for lead in LISTS:
        if bullet.startswith(lead):
            return lead + ", ".join(f"`{i}`" for i in items)
    return bullet


# ---------------------------------------------------------------- prior checkpoints


def _prior_sections(messages: list[Message]) -> dict[str, list[str]]:
    """The bullets of the prior checkpoints in the span, by section: ours (framed), and another
    harness's imported one (Claude Code's numbered sections, nested bullets flattened)."""
    merged: dict[str, list[str]] = {}
    for message in messages:
        if message.source.kind != "plugin":  # checkpoints come from the compact plugin
            continue
        body = framed_summary(message)
        if body is not None:
            for name, section in section_bodies(body).items():
                bullets = [ln for ln in section.splitlines() if ln.startswith("- ") and ln != "- (none)"]
                merged.setdefault(name, []).extend(bullets)
        elif is_checkpoint(message):
            for name, section in section_bodies(text_of(message.content)).items():
                merged.setdefault(name, []).extend(_foreign_bullets(section))
    return merged


def _foreign_bullets(section: str) -> list[str]:
    """A foreign checkpoint's top-level list items as our one-line bullets (its nested details,
    code blocks and prose are not carried: the span's own facts are rendered beside them)."""
    items = [
        (len(line) - len(line.lstrip()), line.strip()[2:].strip())
        for line in section.splitlines()
        if line.strip().startswith(("- ", "* "))
    ]
    # A body's opening line lost its indentation (0): the shallowest indented item is top level;
    # deeper ones are nested details, which stay in the log.
    top = min((indent for indent, _ in items if indent > 0), default=0)
    return [
        f"- {_clip(text, FOREIGN_CHARS)}"
        for indent, text in items
        if indent <= top and text not in ("", "(none)")
    ]


def _merge(old: list[str], new: list[str]) -> list[str]:
    return list(dict.fromkeys([*old, *new]))[:MAX_ITEMS]


FILE_BULLET = re.compile(r"^- (?:(Edited|Created|Read) )?`([^`]+)`$")
FILE_RANK = {"": 0, "Read": 1, "Created": 2, "Edited": 3}


def _merge_files(old: list[str], new: list[str]) -> list[str]:
    """One bullet per path across a merge: edited or created beats read, read beats named."""
    best: dict[str, tuple[str, str]] = {}  # path or bullet -> (kind, bullet)
    for bullet in [*old, *new]:
        found = FILE_BULLET.match(bullet)
        key, kind = (found.group(2), found.group(1) or "") if found else (bullet, "")
        if key not in best or FILE_RANK[kind] > FILE_RANK[best[key][0]]:
            best[key] = (kind, bullet)
    return [bullet for _, bullet in best.values()][:MAX_ITEMS]


# ---------------------------------------------------------------- text shaping


def _clip(text: str, limit: int) -> str:
    return clip_words(text, limit)


def head_and_tail(text: str, limit: int) -> str:
    """``text`` on one line; beyond ``limit`` characters its head and tail, cut between words (no
    identifier cut short), with the elision marked."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    if limit < TIGHT_ASK_CHARS:
        return _clip(text, limit)
    head = word_head(text, limit * 2 // 3).removesuffix(" " + ELLIPSIS)  # a cut word keeps its mark
    tail = word_tail(text, limit // 3).removeprefix(ELLIPSIS + " ")
    return f"{head} […{len(text) - len(head) - len(tail):,} characters elided…] {tail}"


def _code(text: str) -> str:
    """Inline code that survives backticks inside ``text``."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


# ---------------------------------------------------------------- sections


def _requests(facts: SpanFacts, prior: list[str], most: int) -> list[str]:
    """The span's asks (those a prior checkpoint already lists are not repeated), the slash
    commands and the interruptions."""
    listed = normalized("\n".join(prior))
    asks = [a for a in dict.fromkeys(facts.user_asks) if not mentions(listed, a, prepared=True)]
    has_original = bool(prior)  # a prior checkpoint stated the original request
    limit = max(min(most, MIN_ASK_CHARS), min(most, ASKS_BUDGET // max(1, len(asks))))
    bullets = [
        f"{ORIGINAL if index == 0 and not has_original else '- User: '}{head_and_tail(ask, limit)}"
        for index, ask in enumerate(asks)
    ]
    if facts.slash_commands:
        bullets.append("- Slash commands run: " + ", ".join(_code(c) for c in facts.slash_commands))
    if facts.interruptions:
        bullets.append(f"- The user interrupted or rejected {facts.interruptions} agent action(s)")
    return bullets


def _concepts(facts: SpanFacts, prior: Counter[str]) -> list[str]:
    counts = prior + Counter(dict(facts.tools_used))
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


def _files(facts: SpanFacts) -> list[str]:
    classified = (
        [("Edited", p) for p in facts.files_edited]
        + [("Created", p) for p in facts.files_created]
        + [("Read", p) for p in facts.files_read]
    )
    named = {p for _, p in classified}
    bullets = [f"- {kind} `{path}`" for kind, path in classified]
    bullets += [f"- `{p}`" for p in facts.identifiers.paths if p not in named]  # named, not touched
    return bullets[:MAX_ITEMS]


def _errors(facts: SpanFacts) -> list[str]:
    """One bullet per failing call (tool and command or path): each distinct first line, how many
    times, and whether the same call later succeeded; then error lines and names seen elsewhere."""
    by_call: dict[tuple[str, str], dict[str, list[ErrorFact]]] = {}
    for error in facts.errors:
        by_call.setdefault((error.tool, error.command), {}).setdefault(error.first_line, []).append(error)
    bullets = [_error_bullet(tool, command, lines) for (tool, command), lines in by_call.items()]
    bullets = bullets[-MAX_ERRORS:]
    listed = " ".join(bullets)
    lines = [ln for ln in facts.identifiers.error_lines if ln not in listed][:MAX_ERROR_LINES]
    bullets += [f"- Error seen: {_code(ln)}" for ln in lines]
    listed = " ".join(bullets)
    names = [n for n in facts.identifiers.errors if n not in listed]
    if names:
        bullets.append("- Error names seen: " + ", ".join(f"`{n}`" for n in names))
    return bullets


def _error_bullet(tool: str, command: str, lines: dict[str, list[ErrorFact]]) -> str:
    """``tool `command`: line (outcome)``; the harness's feedback names no command, and its fix
    is the agent's next call succeeding."""
    fixed = "fixed later" if command else "fixed by the next call"
    parts = []
    for line, errors in lines.items():
        times = f" ×{len(errors)}" if len(errors) > 1 else ""
        parts.append(f"{line}{times} ({fixed if errors[-1].fixed else 'unfixed'})")
    quoted = bool(command) and all(command in line for line in lines)  # the line names the call
    return f"- {_call(tool, '' if quoted else command, 160)}: " + "; ".join(parts)


def _call(tool: str, command: str, limit: int) -> str:
    return f"{tool} {_code(_clip(command, limit))}" if command else tool


def _pending(facts: SpanFacts) -> list[str]:
    bullets = [
        f"{TASK_MARK}{_clip(task, 300)}{' (in progress)' if task == facts.active_task else ''}"
        for task in facts.open_tasks
    ]
    bullets += [f"- Unanswered tool call: {call}" for call in facts.unanswered]
    unfixed = [e for e in facts.errors[-3:] if not e.fixed]
    if unfixed:  # Errors and Fixes lists each with its line: one pointer, not the calls again
        latest = unfixed[-1]
        bullets.append(RESOLVE_BULLET + _call(latest.tool, latest.command, 120))
    return list(dict.fromkeys(bullets))


def _current(facts: SpanFacts, terse: bool, limit: int) -> list[str]:
    bullets: list[str] = []
    if facts.active_task:
        bullets.append(f"- Task in progress: {_clip(facts.active_task, limit)}")
    if len(facts.user_asks) > 1:  # a single ask is the original request, listed above
        bullets.append(f"- Latest user request: {_clip(facts.user_asks[-1], limit)}")
    if terse:
        if not bullets and facts.last_steps:
            bullets.append(f"- Last step: {facts.last_steps[-1]}")
        return bullets
    if facts.last_steps:
        bullets.append("- Last steps: " + "; ".join(facts.last_steps))
    message = _without_intent(facts)
    if message:
        bullets.append(f"- The agent's latest message: {_clip(message, CURRENT_CHARS)}")
    return bullets


def _without_intent(facts: SpanFacts) -> str:
    """The agent's latest message without the sentence Next Step quotes (said once, there)."""
    message = facts.last_agent_text or ""
    quoted = facts.intent if not facts.unanswered and not facts.ends_with_ask else None
    if quoted and quoted in message:
        return " ".join(message.replace(quoted, " ").split())
    return message


def _next_step(facts: SpanFacts, limit: int) -> list[str]:
    """One bullet: what the agent is to do next, from the state the span ends in."""
    if facts.unanswered:
        return [f"- Obtain the result of the unanswered call {facts.unanswered[0]}, then continue"]
    if facts.ends_with_ask:
        return [f"- Answer the user's latest message: {_clip(facts.user_asks[-1], limit)}"]
    if facts.intent:
        return [f"- As the agent last stated: {_clip(facts.intent, limit)}"]
    if facts.active_task:
        return [f"- Continue the task in progress: {_clip(facts.active_task, limit)}"]
    if facts.open_tasks:
        return [f"- Start the next open task: {_clip(facts.open_tasks[0], limit)}"]
    if facts.user_asks:
        return [f"- Check the latest user request is complete: {_clip(facts.user_asks[-1], limit)}"]
    return []


def _framework_items(items: tuple[tuple[str, str], ...]) -> list[str]:
    """One bullet naming the items of the span the library does not interpret (opaque blocks:
    reasoning with encrypted content, hosted tool calls, audio, ...): by kind, how many, and what
    a reader may see of the first few. They stay in the log; only their framework can send them."""
    seen: dict[str, list[str]] = {}
    for kind, text in items:
        seen.setdefault(kind, []).append(text)
    if not seen:
        return []
    kinds = []
    for kind, texts in seen.items():
        shown = [_code(_clip(t, OPAQUE_CHARS)) for t in dict.fromkeys(texts) if t][:OPAQUE_SHOWN]
        more = f" ({', '.join(shown)}{', …' if len(set(texts)) > len(shown) else ''})" if shown else ""
        kinds.append(f"{kind} x{len(texts)}{more}")
    return [f"{FRAMEWORK_ITEMS}{'; '.join(kinds)}"]


def _critical(facts: SpanFacts) -> list[str]:
    found = facts.identifiers
    bullets = [f"{HARNESS_CONTEXT}{note}" for note in facts.context]
    bullets += [f"- Command: {_code(c)}" for c in found.commands]
    if found.ids:
        bullets.append("- Identifiers: " + ", ".join(f"`{i}`" for i in found.ids))
    return bullets[:MAX_ITEMS]
