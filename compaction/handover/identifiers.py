"""Verbatim identifiers of a span: the file paths, commands, error names and ids the agent touched.

One extractor serves the template summarizer (what to keep), the fidelity gate (what was kept) and the
audit (the retention ratio). Paths and commands come from the agent's own tool-call arguments and text;
error names and error lines come from tool results and assistant text. Each message's are kept by the
session's analysis while one is active (:mod:`compaction.handover.analysis`), else found anew.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from compaction.handover.analysis import SpanAnalysis, active_analysis, remembered
from compaction.handover.starts import Starts
from compaction.sessions.blocks import Message, TextBlock, ToolCallBlock, ToolResultBlock
from compaction.sessions.memo import (
    ENTRY_BYTES,
    STRING_BYTES,
    IdentityMemo,
    LatestOnly,
    SequenceMemo,
    ValueMemo,
)

PATH_RE = re.compile(
    r"(?<![\w/.…-])(?:~/|\.{1,2}/|/)?(?:[\w.-]+/)+[\w.-]*[\w-]\.[A-Za-z0-9]{1,8}"  # a/b.py, /x/y.txt
    r"(?![\w/…-]|\.\w)"  # whole: not a directory (a/b.d/), a longer name (x.me-next), a clipped one (x.p…)
    r"|(?<![\w/.…-])(?:/[\w.-]+){2,}/?(?![\w.…-])"  # absolute directories /usr/lib/python3
)
ERROR_NAME_RE = re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception|Warning|Failure|Fault)\b")
# ``[^\S\n]`` (whitespace but not a newline) keeps every attempt inside one line: ``\s*`` at each
# line start would scan a whole run of blank lines, quadratic in the run's length.
ERROR_LINE_RE = re.compile(
    r"^[^\S\n]*(?:E[^\S\n]+)?([A-Z][A-Za-z0-9]*(?:Error|Exception)(?::[^\n]{0,140})?)[^\S\n]*$",
    re.MULTILINE,
)
ID_RE = re.compile(r"\b(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{12,40})\b")
# Faster equivalents, the same matches in the same order (tests/compaction/test_fact_caches.py checks
# them against the patterns above): an error name is found from its suffix and extended back over
# its word; a path is searched for only inside a run of path characters that holds a slash.
ERROR_SUFFIX_RE = re.compile(r"(?:Error|Exception|Warning|Failure|Fault)\b")
PATH_RUN_RE = re.compile(r"(?<![\w./~-])[\w.~-]*/[\w./~…-]*")
HEX_RUN_RE = re.compile(r"[0-9a-f]{8}")
"""What every id holds (a UUID's first group, or 12 to 40 hex digits): a text without it has none."""
_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
COMMAND_KEYS = ("command", "cmd", "script")
MAX_COMMAND = 160
MAX_PATH = 200


@dataclass
class Identifiers:
    """Ordered, de-duplicated identifiers by kind."""

    paths: dict[str, None] = field(default_factory=dict)
    commands: dict[str, None] = field(default_factory=dict)
    errors: dict[str, None] = field(default_factory=dict)
    error_lines: dict[str, None] = field(default_factory=dict)
    ids: dict[str, None] = field(default_factory=dict)

    def all(self) -> list[str]:
        """Every identifier that counts toward retention (error lines are context, not counted)."""
        return [*self.paths, *self.commands, *self.errors, *self.ids]

    def __len__(self) -> int:
        return len(self.all())


Kinds = tuple[dict[str, None], dict[str, None], dict[str, None], dict[str, None], dict[str, None]]
"""One message's identifiers by kind: paths, commands, errors, error lines, ids."""
_NONE: Kinds = ({}, {}, {}, {}, {})


def identifiers_size(value: Identifiers) -> int:
    """A union of identifiers: new tables of strings the messages' own tables hold too."""
    groups = (value.paths, value.commands, value.errors, value.error_lines, value.ids)
    return sum(ENTRY_BYTES + 16 * len(group) for group in groups)


def extract(messages: Iterable[Message]) -> Identifiers:
    """The identifiers of ``messages``: the union, in order, of each message's own
    (:func:`message_kinds`). With an active analysis (:mod:`compaction.handover.analysis`) each
    message's are found once and shared by the template summarizer, the completion and the fidelity
    gate, and the union of a list or tuple is recalled when the same message objects come again.
    Never mutate the result."""
    return _span_union(messages) if isinstance(messages, list | tuple) else _union(messages)


def _union(messages: Iterable[Message]) -> Identifiers:
    found = Identifiers()
    paths, commands, errors, lines, ids = (
        found.paths,
        found.commands,
        found.errors,
        found.error_lines,
        found.ids,
    )
    analysis = active_analysis()
    compute = message_kinds.compute
    found_kinds = (
        compute if analysis is None else functools.partial(message_kinds.memo(analysis).get, compute=compute)
    )
    for kinds in map(found_kinds, messages):
        if kinds is _NONE:
            continue
        paths.update(kinds[0])
        commands.update(kinds[1])
        errors.update(kinds[2])
        lines.update(kinds[3])
        ids.update(kinds[4])
    return found


def merged(*groups: Identifiers) -> Identifiers:
    """The identifiers of every group, by kind, in order, each once (a group passed twice, as the
    span's own extraction and its facts' often are the same object, is read once)."""
    out = Identifiers()
    for group in {id(g): g for g in groups}.values():
        for kind in ("paths", "commands", "errors", "error_lines", "ids"):
            getattr(out, kind).update(getattr(group, kind))
    return out


_span_union = remembered(lambda budget: SequenceMemo(budget, identifiers_size))(_union)
"""The union of a span's messages, recalled while the same message objects come again."""


def span_unions(analysis: SpanAnalysis) -> SequenceMemo[Identifiers]:
    """``analysis``'s unions of spans (:func:`extract` of a list or tuple), where a span's
    identifiers found another way (the read-ahead's fold) are kept for its messages."""
    return _span_union.memo(analysis)


IDENTIFIER_BYTES = 128
"""One identifier of a message, approximately: its string (most are paths and commands of a few dozen
characters) and its table slot (counted, not measured: a message's identifiers are many and short)."""


def _kinds_size(message: Message, value: Kinds) -> int:
    paths, commands, errors, lines, ids = value
    return ENTRY_BYTES + IDENTIFIER_BYTES * (len(paths) + len(commands) + len(errors) + len(lines) + len(ids))


@remembered(lambda budget: IdentityMemo(budget, _kinds_size))
def message_kinds(message: Message) -> Kinds:
    """One message's identifiers by kind (paths, commands, errors, error lines, ids). With an active
    analysis, found once per message object (no hashing of its content: messages of a real session
    differ by id, so a copy equal by value never comes), else found anew."""
    found = Identifiers()
    for block in message.content:
        if isinstance(block, ToolCallBlock):
            _from_arguments(block.arguments, found)
        elif isinstance(block, ToolResultBlock):
            _from_result(block, found)
        elif isinstance(block, TextBlock):
            _from_text(block.text, found, agent=message.role == "assistant")
    if not len(found) and not found.error_lines:
        return _NONE
    return found.paths, found.commands, found.errors, found.error_lines, found.ids


def _arguments_size(key: str, value: object) -> int:
    """A parsed JSON value: about twice its text in objects."""
    return ENTRY_BYTES + 2 * len(key)


@remembered(lambda budget: ValueMemo(budget, _arguments_size))
def parsed_arguments(arguments: str) -> object:
    """A tool call's arguments parsed as JSON (``{}`` when blank, the string itself when it is not
    JSON); with an active analysis once per string, shared by every reader: never mutate the
    result."""
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return arguments


def _from_arguments(arguments: str, found: Identifiers) -> None:
    value = parsed_arguments(arguments)
    for key, text in _strings(value):
        if key in COMMAND_KEYS:
            command = whole_words(text.strip().splitlines()[0], MAX_COMMAND) if text.strip() else ""
            if command:
                found.commands[command] = None
        for path in _paths(text):
            found.paths[path] = None
        if HEX_RUN_RE.search(text) is not None:  # (a cheaper scan than the ids' own when none)
            for ident in ID_RE.findall(text):
                found.ids[ident] = None


def _from_result(block: ToolResultBlock, found: Identifiers) -> None:
    for inner in block.content:
        if isinstance(inner, TextBlock):
            _errors(inner.text, found)


def _from_text(text: str, found: Identifiers, *, agent: bool) -> None:
    _errors(text, found)
    if agent:
        for path in _paths(text):
            found.paths[path] = None


def _errors(text: str, found: Identifiers) -> None:
    if "rror" not in text and "xception" not in text and "arning" not in text and "ail" not in text:
        return
    for name in error_names(text):
        found.errors[name] = None
    if "Error" not in text and "Exception" not in text:
        return  # an error line names one of the two
    for line in ERROR_LINE_RE.findall(text):
        found.error_lines[line.strip()] = None


def error_names(text: str) -> list[str]:
    """``ERROR_NAME_RE.findall(text)``: from each suffix back to the start of its word, which must
    be a capital letter after a non-word character and hold only ASCII letters and digits."""
    names: list[str] = []
    for match in ERROR_SUFFIX_RE.finditer(text):
        end = match.start()
        start = end
        while start and text[start - 1] in _ALNUM:
            start -= 1
        if start == end or not "A" <= text[start] <= "Z":
            continue
        if start and (text[start - 1].isalnum() or text[start - 1] == "_"):
            continue  # inside a longer word: no boundary before the capital
        names.append(text[start : match.end()])
    return names


def _paths(text: str) -> Iterator[str]:
    if "/" not in text:
        return
    for run in PATH_RUN_RE.finditer(text):  # a match never leaves a run of path characters
        for match in PATH_RE.finditer(text, run.start(), run.end()):
            path = match.group(0).rstrip(".,:;")
            if (
                3 <= len(path) <= MAX_PATH
                and not path.startswith("//")
                and "://" not in text[max(0, match.start() - 8) : match.end()]
            ):
                yield path


def _strings(value: object, key: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, str(k))
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item, key)


def retained(identifiers: Iterable[str], summary: str) -> tuple[list[str], list[str]]:
    """``(kept, missing)``: identifiers found verbatim in the summary, and the rest. With an active
    analysis the answers for the latest summary are kept: a compaction asks about the same text
    from the completion, the gate and the handover measures (each search is a scan of the whole
    summary)."""
    wanted = list(identifiers)
    found = _found_in(summary)
    _search([ident for ident in dict.fromkeys(wanted) if ident not in found], summary, found)
    kept: list[str] = []
    missing: list[str] = []
    for ident in wanted:
        (kept if found[ident] else missing).append(ident)
    return kept, missing


SEARCHED_ONE_BY_ONE = 64
"""Up to this many identifiers are each searched in the summary on their own; more are looked up
among the places of the summary where one of them may start (:class:`Starts`), so a checkpoint
that lists tens of thousands of identifiers is not scanned once per identifier."""


def _search(pending: list[str], summary: str, found: dict[str, bool]) -> None:
    """Record in ``found`` whether each of ``pending`` is in ``summary``."""
    if len(pending) <= SEARCHED_ONE_BY_ONE:
        for ident in pending:
            # From the end: a checkpoint lists its references in its later sections, so the
            # search stops after a fraction of the text (half the time of ``in`` on the template's)
            found[ident] = summary.rfind(ident) >= 0
        return
    starts = Starts([summary], pending)
    for ident in pending:
        found[ident] = next(starts.where(ident), None) is not None


def _summary_size(summary: str, value: dict[str, bool]) -> int:
    """The latest summary searched (what is looked for in it are the span's identifiers, counted
    with the messages they came from)."""
    return ENTRY_BYTES + len(summary) + STRING_BYTES


@remembered(lambda budget: LatestOnly(budget, _summary_size))
def _found_in(summary: str) -> dict[str, bool]:
    """What was found in ``summary`` (ident -> found): nothing yet when first asked, then what
    :func:`retained` searched (kept for the latest summary while an analysis is active)."""
    return {}


# ---------------------------------------------------------------- quotations cut between words


ELLIPSIS = "…"


def clip_words(text: str, limit: int) -> str:
    """``text`` on one line; beyond ``limit`` characters its head, cut between words when a word
    ends in its second half (so no path or command is cut short) and marked clipped: `` …`` after
    a whole word, ``…`` right after a cut one (an identifier reader skips a word so marked)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return word_head(text, limit - 2)


def word_head(text: str, limit: int) -> str:
    """The first ``limit`` characters of one-line ``text``, back to the last space when one is in
    their second half; a word still cut ends with :data:`ELLIPSIS`."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    space = head.rfind(" ")
    if space >= limit // 2:
        return head[:space].rstrip() + " " + ELLIPSIS
    return head.rstrip() + ELLIPSIS


def word_tail(text: str, limit: int) -> str:
    """The last ``limit`` characters of one-line ``text``, on to the next space when one is in
    their first half; a word still cut starts with :data:`ELLIPSIS`."""
    if len(text) <= limit:
        return text
    tail = text[len(text) - limit :]
    space = tail.find(" ")
    if 0 <= space <= limit // 2:
        return ELLIPSIS + " " + tail[space:].lstrip()
    return ELLIPSIS + tail.lstrip()


def whole_words(text: str, limit: int) -> str:
    """The first ``limit`` characters of ``text`` cut back to the last space when one is in their
    second half (a verbatim prefix that ends with a whole word); a word still cut ends with
    :data:`ELLIPSIS`."""
    if len(text) <= limit:
        return text
    return word_head(text, limit).removesuffix(" " + ELLIPSIS)
