"""What a handover needs from a span: the user's asks, the errors met, the open tasks, the agent's
stated intent, the files touched, and the verbatim identifiers.

:func:`span_facts` extracts them from the shadowed messages (the template summarizer renders them;
the completion of model summaries checks them); :func:`missing_from` lists which of them a summary
text lacks, by a tolerant match (whitespace and case normalized, a distinctive prefix).

Sources, never arbitrary strings:

- user asks: the user's own messages with harness wrappers (``<command-name>``, ``<system-reminder>``,
  ``<local-command-stdout>``, ``<task-notification>``, IDE notices, ANSI codes) and interruption
  markers removed; slash commands are kept apart; in a harness without tool calls (mini-swe-agent,
  SWE-agent text mode) a "user" message that answers the agent's fenced command is an observation;
  harness feedback delivered as a user-role message while the agent works (OpenHands' error
  observations of a rejected tool call: "Parameter 'command' is expected to be one of [...]") is an
  error, not an ask;
- errors: failed tool results (``is_error``, or OpenHands' ``ERROR:`` text, or a non-zero
  ``<returncode>`` observation), with the call's command or path and whether a later call with the
  same command or path succeeded; harness feedback, with tool :data:`HARNESS_TOOL`, fixed when the
  agent's next call succeeded; harness-synthesized results of interrupted calls and the user's
  rejections of a tool call are not errors;
- open tasks: the latest todo/plan tool input (Claude Code ``TodoWrite`` / ``TaskCreate`` /
  ``TaskUpdate``, Codex ``update_plan``, OpenHands ``task_tracker``, any tool with a list of items that
  carry a ``status``), its unfinished items;
- files: the path arguments of file tools, refined by the paths the tool reported
  ("File created successfully at: ...").

What is found of each message, call and result is kept by the session's analysis while one is
active (a compaction, the read-ahead: :mod:`compaction.handover.analysis`); without one, every
function here computes and keeps nothing.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import msgspec

from compaction.handover.analysis import active_analysis
from compaction.handover.identifiers import (
    ERROR_LINE_RE,
    Identifiers,
    clip_words,
    extract,
    merged,
    parsed_arguments,
    retained,
    whole_words,
)
from compaction.handover.outcomes import (
    BUILD_FAILURE_RE,
    DIAGNOSTIC_RE,
    output_failed,
    output_succeeded,
)
from compaction.sessions.blocks import (
    Message,
    OpaqueBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    text_of,
)
from compaction.sessions.interrupted import NOT_STARTED_TEXT, OUTCOME_UNKNOWN_TEXT
from compaction.vocabulary.checkpoint import framed_summary

MATCH_PREFIX = 60
"""Characters of a normalized ask, task or error line that must appear in a summary to count."""
LINE_CHARS = 160
LAST_STEPS = 3
COMMAND_CHARS = 160

# ---------------------------------------------------------------- public shapes


@dataclass(frozen=True)
class ErrorFact:
    """A failed tool result: the tool, the command or input that produced it, its first
    informative line, and whether a later call with the same command or path succeeded."""

    tool: str
    command: str
    first_line: str
    fixed: bool


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


@dataclass(frozen=True)
class Missing:
    user_asks: tuple[str, ...] = ()
    identifiers: tuple[str, ...] = ()
    open_tasks: tuple[str, ...] = ()
    errors: tuple[ErrorFact, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.user_asks or self.identifiers or self.open_tasks or self.errors)


# ---------------------------------------------------------------- matching


def normalized(text: str) -> str:
    return " ".join(text.split()).casefold()


def mentions(summary: str, text: str, *, prepared: bool = False) -> bool:
    """Whether ``text`` (an ask, task or error line) is in ``summary``: whitespace and case
    normalized, its first :data:`MATCH_PREFIX` characters (the whole text when shorter)."""
    haystack = summary if prepared else normalized(summary)
    needle = _needle(text)
    return bool(needle) and needle in haystack


def _needle(text: str) -> str:
    """What :func:`mentions` looks for: ``text`` normalized, its first :data:`MATCH_PREFIX`
    characters (with an active analysis once per text: the same asks and error lines are looked
    for in every summary)."""
    analysis = active_analysis()
    return _needle_of(text) if analysis is None else analysis.needles.get(text, _needle_of)


def _needle_of(text: str) -> str:
    return normalized(text)[:MATCH_PREFIX].rstrip()


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


# ---------------------------------------------------------------- user text

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
HARNESS_TAGS = (
    "system-reminder",
    "local-command-stdout",
    "local-command-stderr",
    "task-notification",
    "bash-stdout",
    "bash-stderr",
    "ide_opened_file",
    "ide_selection",
    "ide_diagnostics",
    "user-prompt-submit-hook",
    "command-message",
)
HARNESS_BLOCK_RE = re.compile(
    r"<(" + "|".join(re.escape(t) for t in HARNESS_TAGS) + r")\b[^>]*>.*?(?:</\1>|\Z)", re.DOTALL
)
COMMAND_NAME_RE = re.compile(r"<command-name>\s*(.*?)\s*</command-name>", re.DOTALL)
COMMAND_ARGS_RE = re.compile(r"<command-args>\s*(.*?)\s*</command-args>", re.DOTALL)
BASH_INPUT_RE = re.compile(r"<bash-input>\s*(.*?)\s*</bash-input>", re.DOTALL)
INTERRUPTED_RE = re.compile(r"\[Request interrupted by user[^\]]*\]")
HARNESS_LINES_RE = re.compile(
    r"^(?:Caveat: The messages below were generated by the user while running local commands\..*"
    r"|Read the output file to retrieve the result: .*)$",
    re.MULTILINE,
)
HARNESS_PREFIXES = ("Here is a demonstration of how to correctly accomplish this task.",)
SLASH_RE = re.compile(r"^/[A-Za-z][\w:.-]*(?:\s|$)")
HARNESS_TOOL = "harness"
HARNESS_SOURCE = "harness"
"""The source kind of a user-role message the harness wrote (Claude Code's ``isMeta`` lines)."""
"""The ``tool`` of an error the harness reported in a user-role message (there is no call to name)."""
FEEDBACK_RE = re.compile(
    r"(?:Parameter [`'\"]?\w+[`'\"]? (?:is expected to be one of|is required|must be)\b"
    r"|Missing required (?:argument|parameter)s?\b"
    r"|(?:Tool|Function) [`'\"]?[\w.-]+[`'\"]? (?:is not registered|not found|does not exist)\b"
    r"|Failed to parse tool call arguments\b"
    r"|Invalid (?:JSON|arguments?|parameters?) (?:in|for) (?:the )?tool call\b"
    r"|The action has not been executed\b"
    r"|Agent got stuck in a loop\b)"
)
"""The harness's feedback on the agent's tool use, as OpenHands delivers it in a user-role message
(an error observation no call answers: a rejected tool argument, an unknown tool, an action the
runtime never ran, a detected loop)."""
REJECTED = "The user doesn't want to proceed with this tool use."
USER_SAID = "the user said:"


@dataclass(frozen=True)
class UserText:
    """A user message split into what the user asked, the slash commands, and interruptions."""

    ask: str
    slash_commands: tuple[str, ...] = ()
    interrupted: bool = False
    context: tuple[str, ...] = ()
    """What the harness wrote in the user's role, as a note ("skill X loaded with: ARGS")."""


def clean_user_text(text: str) -> UserText:
    """Separate the natural-language ask from harness wrappers, slash commands and interruption
    markers (Claude Code, pi, Codex conventions); with an active analysis once per text."""
    analysis = active_analysis()
    return _clean_user_text(text) if analysis is None else analysis.user_texts.get(text, _clean_user_text)


def _clean_user_text(text: str) -> UserText:
    text = ANSI_RE.sub("", text)
    note = skill_note(text)
    if note is not None:
        return UserText(ask="", context=(note,))
    commands = [
        " ".join(part for part in (name, _args(text)) if part) for name in COMMAND_NAME_RE.findall(text)
    ]
    commands += [f"!{c}" for c in BASH_INPUT_RE.findall(text)]
    text = COMMAND_NAME_RE.sub("", COMMAND_ARGS_RE.sub("", BASH_INPUT_RE.sub("", text)))
    text = HARNESS_BLOCK_RE.sub("", text)
    interrupted = bool(INTERRUPTED_RE.search(text))
    text = HARNESS_LINES_RE.sub("", INTERRUPTED_RE.sub("", text)).strip()
    if text.startswith(HARNESS_PREFIXES):
        text = ""
    if SLASH_RE.match(text) and "\n" not in text.strip():
        commands.append(text.strip())
        text = ""
    return UserText(ask=text, slash_commands=tuple(commands), interrupted=interrupted)


SKILL_RE = re.compile(r"\s*Base directory for this skill:[^\S\n]*(\S+)")
ARGUMENTS_RE = re.compile(r"^ARGUMENTS:[^\S\n]*(.*)$", re.MULTILINE)
NOTE_CHARS = 200


def skill_note(text: str) -> str | None:
    """A skill's body the harness injected in the user's role (Claude Code: "Base directory for
    this skill: .../skills/NAME ... ARGUMENTS: ...") as the note that stands for it, else None."""
    found = SKILL_RE.match(text)
    if found is None:
        return None
    name = found.group(1).rstrip("/").rsplit("/", 1)[-1]
    arguments = ARGUMENTS_RE.findall(text)
    given = arguments[-1].strip() if arguments else ""
    return f"skill {name} loaded" + (f" with: {clip_words(given, NOTE_CHARS)}" if given else "")


def harness_note(text: str) -> str | None:
    """What a harness-written user-role message (Claude Code's meta messages: a skill's body, a
    slash command's expansion, a reminder) leaves as context: the skill and its arguments, else
    its first line; None when nothing is left once the wrappers are removed."""
    cleaned = clean_user_text(text)
    if cleaned.context:
        return cleaned.context[0]
    line = next((ln.strip() for ln in cleaned.ask.splitlines() if ln.strip()), "")
    return f"harness message: {clip_words(line, NOTE_CHARS)}" if line else None


def _args(text: str) -> str:
    found = COMMAND_ARGS_RE.search(text)
    return found.group(1).strip() if found else ""


def harness_feedback(text: str, previous: Message | None = None) -> bool:
    """Whether a user-role message is the harness's feedback on the agent's tool use rather than
    something the user asked: it has the shape of :data:`FEEDBACK_RE` and arrives while the agent
    works (``previous``, the message before it, is not the agent's own words awaiting a reply)."""
    return not (previous is not None and awaits_reply(previous)) and feedback_shaped(text)


def awaits_reply(message: Message) -> bool:
    """Whether ``message`` is the agent's own words awaiting a reply (no tool call in it)."""
    return message.role == "assistant" and not any(isinstance(b, ToolCallBlock) for b in message.content)


def feedback_shaped(text: str) -> bool:
    """Whether a user-role text has the shape of the harness's feedback (:data:`FEEDBACK_RE`)."""
    return bool(FEEDBACK_RE.match(text.lstrip()))


# ---------------------------------------------------------------- tool calls

COMMAND_KEYS = ("command", "cmd", "script")
PATH_KEYS = ("file_path", "path", "notebook_path", "filename", "file")
OTHER_KEYS = ("pattern", "query", "url", "file_name", "search", "task_id", "description", "prompt")
EDIT_WORDS = ("edit", "replace", "patch", "insert", "str_replace")
READ_TOOLS = {"read", "view", "open", "cat", "read_file", "readfile"}
WRITE_TOOLS = {"write", "create", "write_file", "create_file", "writefile"}
CREATED_RE = re.compile(
    r"(?:File created successfully at|created (?:a )?(?:new )?file(?: at)?):?\s+(\S+)", re.I
)
UPDATED_RE = re.compile(
    r"The file (\S+) has been (?:updated|edited)|Successfully replaced text in (\S+?)\.?\s"
)
OPEN_FILE_RE = re.compile(r"\[File: (\S+) \(\d+ lines total\)\]")
PATCH_RE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+)$", re.MULTILINE)
DONE_STATUSES = {"completed", "complete", "done", "cancelled", "canceled", "deleted", "skipped"}
TASK_TEXT_KEYS = ("content", "step", "title", "subject", "task", "description", "text")


def arguments_of(call: ToolCallBlock) -> dict[str, object]:
    """The call's arguments as a JSON object (empty when they are not one)."""
    return dict(_arguments(call))


def _arguments(call: ToolCallBlock) -> dict[str, object]:
    """:func:`arguments_of`, shared with the identifiers (with an active analysis parsed once per
    argument string, :func:`~compaction.handover.identifiers.parsed_arguments`): never mutate the
    result."""
    value = parsed_arguments(call.arguments)
    return value if isinstance(value, dict) else {}


def _string(args: dict[str, object], keys: tuple[str, ...]) -> str:
    for key in keys:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return " ".join(str(v) for v in value)  # Codex: ["bash", "-lc", "..."]
    return ""


def call_key(call: ToolCallBlock) -> str:
    """What a call acted on: its command, else its path, else its compact arguments (with an active
    analysis once per call: a span's facts ask for it once per step, and the same calls again at
    every compaction)."""
    analysis = active_analysis()
    return _call_key(call) if analysis is None else analysis.call_keys.get(call, _call_key)


def _call_key(call: ToolCallBlock) -> str:
    args = _arguments(call)
    command = _string(args, COMMAND_KEYS)
    if command and not _is_editor(call, args):
        return whole_words(command.splitlines()[0], COMMAND_CHARS)
    path = _string(args, PATH_KEYS)
    if path and command:  # an editor's sub-command and its path
        return f"{command} {path}"
    if path:
        return path
    other = _string(args, OTHER_KEYS)
    return _clip(other or " ".join(call.arguments.split()), COMMAND_CHARS)


def _is_editor(call: ToolCallBlock, args: dict[str, object]) -> bool:
    """OpenHands ``str_replace_editor``: ``command`` is a sub-command (view, create, ...)."""
    return "editor" in call.name.lower() and isinstance(args.get("path"), str)


def result_text(block: ToolResultBlock) -> str:
    """A result's text, ANSI codes removed (with an active analysis once per block)."""
    analysis = active_analysis()
    return _result_text(block) if analysis is None else analysis.result_texts.get(block, _result_text)


def _result_text(block: ToolResultBlock) -> str:
    text = text_of(block.content)
    return ANSI_RE.sub("", text) if "\x1b" in text else text


def failed(block: ToolResultBlock) -> bool:
    """Whether a result is a failure (not a synthesized or rejected one); with an active analysis
    once per block."""
    analysis = active_analysis()
    return _failed(block) if analysis is None else analysis.failures.get(block, _failed)


def _failed(block: ToolResultBlock) -> bool:
    text = result_text(block)
    if is_synthesized(text) or text.startswith(REJECTED):
        return False
    return block.is_error or text.lstrip().startswith("ERROR:") or output_failed(text)


def is_synthesized(text: str) -> bool:
    return text.startswith((OUTCOME_UNKNOWN_TEXT[:60], NOT_STARTED_TEXT[:60]))


# ---------------------------------------------------------------- first informative line

BOILERPLATE_RE = re.compile(
    r"^(?:Exit code -?\d+|Command exited with code -?\d+|</?returncode>.*|</?output>|ERROR:"
    r"|Traceback \(most recent call last\):|File \".*\", line \d+.*|Debugger attached\.?"
    r"|Waiting for the debugger to disconnect\.*)$"
)
DECORATION_RE = re.compile(r"[=\-─━│┃|^~*#_>]{3,}|[│└├┌┐┘─]+")
STRONG_RE = re.compile(
    r"\b(?:error|ERROR|fatal|FATAL|panic|exception)\b|[a-z]Error\b|Error:|Exception\b"
)  # case-sensitive on purpose: ``RuntimeError`` and ``error:`` count, ``test_exception_handling`` not
WEAK_RE = re.compile(
    r"\b(?:fail(?:ed|ure|s)?|not found|no such|denied|cannot|can't|could not|unable|invalid|missing"
    r"|undefined|refused|aborted|timed? ?out|not allowed|rejected)\b",
    re.I,
)
TAG_RE = re.compile(r"</?(?:tool_use_error|error|returncode|output)>")


def first_informative_line(text: str) -> str:
    """The line of an error output a reader needs: an exception line, else the first line naming
    an error, else the first naming a failure, else the last substantive line (with an active
    analysis once per text)."""
    analysis = active_analysis()
    return _first_line(text) if analysis is None else analysis.first_lines.get(text, _first_line)


def _first_line(text: str) -> str:
    lines = []
    for raw in TAG_RE.sub("\n", ANSI_RE.sub("", text)).splitlines():
        line = raw.strip()
        if line and DECORATION_RE.sub("", line).strip():
            lines.append(line)
    useful = [ln for ln in lines if not BOILERPLATE_RE.match(ln)]
    for pattern in (DIAGNOSTIC_RE, ERROR_LINE_RE, STRONG_RE, WEAK_RE, BUILD_FAILURE_RE):
        for line in useful:
            if pattern.search(line):
                return _clip(line, LINE_CHARS)
    banners = [ln for ln in useful if DECORATION_RE.search(ln)]
    if banners:  # a test runner's closing banner ("=== 205 deselected in 0.58s ===")
        return _clip(DECORATION_RE.sub("", banners[-1]).strip(), LINE_CHARS)
    return _clip((useful or lines or [""])[0], LINE_CHARS)


def _clip(text: str, limit: int) -> str:
    return clip_words(text, limit)


# ---------------------------------------------------------------- the walk


@dataclass(slots=True)
class _Step:
    call: ToolCallBlock
    result: ToolResultBlock | None = None
    key: str = ""
    """:func:`call_key` of the call."""
    todo: list[tuple[str, str]] | None = None
    """The call's todo/plan items (:func:`_status_list` of its arguments)."""
    failed: bool = False
    """:func:`failed` of the result."""
    rejected: bool = False
    """The result is the user's rejection of the call."""


# ---------------------------------------------------------------- one message, read once


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call, read: what it acted on (:func:`call_key`) and its todo/plan items."""

    block: ToolCallBlock
    key: str
    todo: list[tuple[str, str]] | None


@dataclass(frozen=True, slots=True)
class Result:
    """A tool result, read: whether it failed, whether it is the user's rejection of the call."""

    block: ToolResultBlock
    failed: bool
    rejected: bool
    said: str | None
    """What the user said when rejecting the call."""


@dataclass(frozen=True, slots=True)
class Read:
    """What the walk needs of one message, found once per message (:func:`read`)."""

    checkpoint: bool
    role: str
    from_user: bool
    items: tuple[Call | Result, ...]
    has_call: bool
    text: str
    """The agent's text (stripped), or the user's or the harness's (as written); empty otherwise."""
    chars: int
    """Characters of the message's text blocks, tool calls (name and arguments) and results."""
    opaque: tuple[tuple[str, str], ...] = ()
    """The message's framework items (:class:`~compaction.sessions.blocks.OpaqueBlock`): kind
    and what a reader may see of each, whitespace collapsed."""


def read(message: Message) -> Read:
    """One message read for the walk; with an active analysis once per message object, so a
    compaction reads its span's messages again only when a message is new (the read-ahead reads
    them as they arrive, :meth:`~compaction.engine.service.CompactionEngine.observe`)."""
    analysis = active_analysis()
    return _read(message) if analysis is None else analysis.reads.get(message, _read)


def _read(message: Message) -> Read:
    """One message read for the walk (its calls' keys and todo items, its results' outcomes, its
    text)."""
    items: list[Call | Result] = []
    opaque: list[tuple[str, str]] = []
    chars = 0
    for block in message.content:
        if isinstance(block, ToolCallBlock):
            items.append(Call(block, call_key(block), _status_list(_arguments(block))))
            chars += len(block.name) + len(block.arguments)
        elif isinstance(block, ToolResultBlock):
            text = result_text(block)
            rejected = text.startswith(REJECTED)
            said = text.split(USER_SAID, 1) if rejected else []
            heard = said[1] if len(said) == 2 and said[1].strip() else None
            failure = failed(block)
            if failure:
                first_informative_line(text)  # found now (kept by text), for the errors
            items.append(Result(block, failure, rejected, heard))
            chars += len(text_of(block.content))
        elif isinstance(block, TextBlock):
            chars += len(block.text)
        elif isinstance(block, OpaqueBlock):
            opaque.append((block.kind, " ".join(block.text.split())))
    from_user = message.role == "user" and message.source.kind in ("user", HARNESS_SOURCE)
    text = ""
    if message.role == "assistant":
        text = text_of(message.content).strip()
    elif from_user:
        text = text_of(message.content)
        _needle(clean_user_text(text).ask)  # found now (kept by text), for the walk and the gate
    return Read(
        checkpoint=framed_summary(message) is not None,
        role=message.role,
        from_user=from_user,
        items=tuple(items),
        has_call=any(type(i) is Call for i in items),
        text=text,
        chars=chars,
        opaque=tuple(opaque),
    )


@dataclass
class _Walk:
    asks: list[str] = field(default_factory=list)
    slash: list[str] = field(default_factory=list)
    interruptions: int = 0
    steps: list[_Step] = field(default_factory=list)
    by_id: dict[str, _Step] = field(default_factory=dict)
    observations: list[tuple[str, str]] = field(default_factory=list)  # (command, text)
    feedback: list[tuple[int, str]] = field(default_factory=list)  # (index of the next step, text)
    text_harness: bool = False
    """No tool call in the span: a user message answering a fenced command is an observation."""
    agent_texts: list[tuple[int, str]] = field(default_factory=list)  # (position, text)
    last_ask_at: int = -1
    checkpoint_at: int = -1
    context: list[str] = field(default_factory=list)
    """Notes of what the harness wrote in the user's role (skills loaded, meta messages)."""


def _walk(messages: Sequence[Message], reads: Sequence[Read]) -> _Walk:
    """One pass over the span's messages, read (the hot loop of a compaction: kept flat)."""
    walk = _Walk()
    walk.text_harness = not any(r.has_call for r in reads)
    steps, by_id, agent_texts = walk.steps, walk.by_id, walk.agent_texts
    previous: Message | None = None
    for position, found in enumerate(reads):
        if found.checkpoint:
            walk.checkpoint_at = position  # a prior checkpoint carries the agent's later state
        else:
            for item in found.items:
                if type(item) is Call:
                    step = _Step(item.block, key=item.key, todo=item.todo)
                    steps.append(step)
                    by_id[item.block.id] = step
                else:
                    _result(walk, item, position)  # type: ignore[arg-type]
            if found.role == "assistant":
                if found.text:
                    agent_texts.append((position, found.text))
            elif found.from_user:
                if messages[position].source.kind == HARNESS_SOURCE:
                    _harness_message(walk, found.text)
                else:
                    _user_message(walk, found.text, previous, position)
        previous = messages[position]
    return walk


def _user_message(walk: _Walk, text: str, previous: Message | None, position: int) -> None:
    """A user-role message: an observation of a fenced command, the harness's feedback, or the
    user's own words."""
    command = _fenced_command(previous) if walk.text_harness else None
    if command is not None:
        walk.observations.append((command, text))
    elif harness_feedback(text, previous):
        walk.feedback.append((len(walk.steps), text))
    else:
        _user(walk, text, position)


def _harness_message(walk: _Walk, text: str) -> None:
    """A user-role message the harness wrote: context, never an ask."""
    note = harness_note(text)
    if note is not None:
        walk.context.append(note)


def _result(walk: _Walk, item: Result, position: int) -> None:
    step = walk.by_id.get(item.block.tool_call_id)
    if step is not None:
        step.result = item.block
        step.failed = item.failed
        step.rejected = item.rejected
    if item.rejected:
        walk.interruptions += 1
        if item.said is not None:
            _user(walk, item.said, position)


def _user(walk: _Walk, text: str, position: int) -> None:
    cleaned = clean_user_text(text)
    walk.context.extend(cleaned.context)
    walk.slash.extend(cleaned.slash_commands)
    walk.interruptions += cleaned.interrupted
    if cleaned.ask:
        walk.asks.append(cleaned.ask)
        walk.last_ask_at = position


FENCE_RE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)


def _fenced_command(previous: Message | None) -> str | None:
    """In a harness without tool calls, the command of the agent message a user message answers."""
    if previous is None or previous.role != "assistant":
        return None
    blocks = FENCE_RE.findall(text_of(previous.content))
    if not blocks:
        return None
    lines = blocks[-1].strip().splitlines()
    return lines[0][:COMMAND_CHARS] if lines else ""


# ---------------------------------------------------------------- facts


def span_facts(messages: Sequence[Message]) -> SpanFacts:
    """The handover facts of a span (a prior framed checkpoint in it is skipped: merge it apart).
    With an active analysis found once per span: the template, the completion and the gate of one
    compaction share them (recalled while the same message objects come again,
    :class:`~compaction.sessions.memo.SequenceMemo`)."""
    analysis = active_analysis()
    if analysis is None:
        return _span_facts(messages)
    recalled = analysis.spans.recall(messages)
    return recalled if recalled is not None else analysis.spans.remember(messages, _span_facts(messages))


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


def _reads(messages: Sequence[Message]) -> list[Read]:
    """:func:`read` of every message (the active analysis looked up once)."""
    analysis = active_analysis()
    if analysis is None:
        return list(map(_read, messages))
    recall = analysis.reads.get
    return [recall(message, _read) for message in messages]


def _span_facts(messages: Sequence[Message]) -> SpanFacts:
    reads = _reads(messages)
    walk = _walk(messages, reads)
    tasks, active, seen = _tasks(walk.steps)
    edited, created, opened = _files(walk.steps)
    checkpoints = any(r.checkpoint for r in reads)
    fresh = [m for m, r in zip(messages, reads, strict=True) if not r.checkpoint] if checkpoints else messages
    return SpanFacts(
        chars=sum(r.chars for r in reads),
        tools_used=tuple(Counter(s.call.name for s in walk.steps).items()),
        user_asks=tuple(walk.asks),
        errors=tuple(_errors(walk)),
        open_tasks=tuple(tasks),
        intent=_intent(walk),
        files_edited=tuple(edited),
        files_created=tuple(created),
        files_read=tuple(opened),
        identifiers=extract(fresh),
        slash_commands=tuple(dict.fromkeys(walk.slash)),
        context=tuple(dict.fromkeys(walk.context)),
        opaque_items=tuple(item for r in reads if not r.checkpoint for item in r.opaque),
        interruptions=walk.interruptions,
        active_task=active,
        todo_seen=seen,
        last_steps=tuple(_describe(s) for s in walk.steps[-LAST_STEPS:]),
        last_agent_text=walk.agent_texts[-1][1] if walk.agent_texts else None,
        unanswered=tuple(f"{s.call.name} `{s.key}`" for s in walk.steps if s.result is None),
        prior_checkpoint=walk.checkpoint_at >= 0,
        ends_with_ask=walk.last_ask_at > walk.checkpoint_at
        and all(p < walk.last_ask_at for p, _ in walk.agent_texts)
        and not any(s.result is None for s in walk.steps),
    )


def _errors(walk: _Walk) -> list[ErrorFact]:
    """The failed results and the harness's feedback in the order met, then the failed
    observations of a harness without tool calls."""
    found = sorted(_tool_errors(walk) + _feedback_errors(walk), key=lambda pair: pair[0])
    return [error for _, error in found] + _observation_errors(walk)


def _tool_errors(walk: _Walk) -> list[tuple[float, ErrorFact]]:
    """The failed results by step index, each ``fixed`` when a later call of the same tool on the
    same command or path succeeded: one backward pass (the succeeded ``(tool, key)`` pairs seen so
    far), each call's key computed once."""
    failures: list[tuple[int, _Step, str, bool]] = []  # newest first
    succeeded: set[tuple[str, str]] = set()
    for index in range(len(walk.steps) - 1, -1, -1):
        step = walk.steps[index]
        if step.result is None:
            continue
        key = step.key
        if step.failed:
            failures.append((index, step, key, (step.call.name, key) in succeeded))
        elif not step.rejected:
            succeeded.add((step.call.name, key))
    errors: list[tuple[float, ErrorFact]] = []
    for index, step, key, fixed in reversed(failures):
        assert step.result is not None
        line = first_informative_line(result_text(step.result))
        errors.append((index, ErrorFact(tool=step.call.name, command=key, first_line=line, fixed=fixed)))
    return errors


def _feedback_errors(walk: _Walk) -> list[tuple[float, ErrorFact]]:
    """The harness's feedback, placed just before the step that followed it; ``fixed`` when that
    step (the agent's retry) succeeded."""
    errors: list[tuple[float, ErrorFact]] = []
    for index, text in walk.feedback:
        after = walk.steps[index] if index < len(walk.steps) else None
        fixed = after is not None and after.result is not None and not after.failed
        errors.append((index - 0.5, ErrorFact(HARNESS_TOOL, "", first_informative_line(text), fixed)))
    return errors


def _observation_errors(walk: _Walk) -> list[ErrorFact]:
    """The failed observations of a harness without tool calls, ``fixed`` when the same command
    later passed."""
    observed: list[tuple[str, str, bool]] = []  # newest first
    passed: set[str] = set()
    for command, text in reversed(walk.observations):
        if _observation_failed(text):
            observed.append((command, text, command in passed))
        else:
            passed.add(command)
    return [
        ErrorFact("shell", command, first_informative_line(text), fixed)
        for command, text, fixed in reversed(observed)
    ]


RETURNCODE_RE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")


def _observation_failed(text: str) -> bool:
    code = RETURNCODE_RE.search(text)
    if code is not None:
        return code.group(1) != "0"
    head = "\n".join(text.splitlines()[:3])
    return "Traceback (most recent call last)" in text or bool(STRONG_RE.search(head))


def describe(call: ToolCallBlock, result: ToolResultBlock | None, failed: bool) -> str:
    """:func:`_describe` of a step: ``call``, its ``result`` if answered, whether that failed."""
    return _describe(_Step(call, result, key=call_key(call), failed=failed))


def _describe(step: _Step) -> str:
    """``Tool `command or path``` and its outcome: failed (with its line), interrupted, ok when
    something says it succeeded, else nothing (a command's silence is no success)."""
    outcome: str | None = "no result yet"
    if step.result is not None:
        text = result_text(step.result)
        if step.failed:
            outcome = "failed: " + first_informative_line(text)
        elif text.startswith(REJECTED) or is_synthesized(text):
            outcome = "interrupted"
        else:
            outcome = "ok" if _succeeded(step, text) else None
    described = f"{step.call.name} `{_step_key(step)}`"
    return described if outcome is None else f"{described} ({outcome})"


def _step_key(step: _Step) -> str:
    """What a last step names: a command whole (as the identifiers hold it, so a checkpoint that
    quotes the step need not list the command again), anything else clipped to 100 characters."""
    args = _arguments(step.call)
    if _string(args, COMMAND_KEYS) and not _is_editor(step.call, args):
        return step.key
    return _clip(step.key, 100)


def _succeeded(step: _Step, text: str) -> bool:
    """Whether a step's output says it succeeded: a command's only when its output says so; another
    tool's (a file read, an edit, a search) when it answered with something and no failure."""
    if _string(_arguments(step.call), COMMAND_KEYS) and not _is_editor(step.call, _arguments(step.call)):
        return output_succeeded(text)
    return bool(text.strip())


# ---------------------------------------------------------------- todo / plan state


class TodoOp(msgspec.Struct, array_like=True, frozen=True):
    """One change of the agent's todo/plan state: a whole list (``items``), a created task
    (``text``, with the ``task_id`` its result reported, if any) or an update (``task_id``, the new
    ``text`` when given, the new ``status`` when given)."""

    kind: str
    """``items``, ``create`` or ``update``."""
    items: tuple[tuple[str, str], ...] = ()
    task_id: str | None = None
    text: str = ""
    status: str | None = None


def _tasks(steps: list[_Step]) -> tuple[list[str], str | None, bool]:
    """The unfinished items of the agent's latest todo/plan state, the item in progress, and
    whether any todo/plan tool was used."""
    ops = []
    for step in steps:
        if step.result is not None and step.failed:
            continue
        op = todo_op(step.call, step.todo, step.result)
        if op is not None:
            ops.append(op)
    return open_tasks(ops)


def todo_op(
    call: ToolCallBlock, todo: list[tuple[str, str]] | None, result: ToolResultBlock | None
) -> TodoOp | None:
    """The todo/plan change a call makes (``todo``: its :func:`_status_list`), None for any other
    call; a created task's id is read from its ``result`` when there is one."""
    if todo is not None:
        return TodoOp("items", tuple(todo))
    if call.name == "TaskCreate":
        text = _string(_arguments(call), TASK_TEXT_KEYS)
        return TodoOp("create", task_id=created_task_id(result), text=text)
    if call.name == "TaskUpdate":
        args = _arguments(call)
        status = args.get("status")
        return TodoOp(
            "update",
            task_id=str(args.get("taskId", args.get("task_id", args.get("id", "")))),
            text=_string(args, ("subject", "content", "title")),
            status=status if isinstance(status, str) else None,
        )
    return None


def open_tasks(ops: Iterable[TodoOp]) -> tuple[list[str], str | None, bool]:
    """:func:`_tasks` of the todo/plan changes ``ops``, in the order made."""
    state: dict[str, tuple[str, str]] = {}  # id -> (text, status)
    seen = False
    for op in ops:
        if op.kind == "items":
            seen = True
            state = {str(i): item for i, item in enumerate(op.items)}
        elif op.kind == "create":
            seen = True
            state[op.task_id or str(len(state) + 1)] = (op.text, "pending")
        elif op.task_id in state:
            text, status = state[op.task_id]
            state[op.task_id] = (op.text or text, status if op.status is None else op.status)
    open_items = [(text, status) for text, status in state.values() if status.lower() not in DONE_STATUSES]
    active = next((text for text, status in open_items if status.lower() == "in_progress"), None)
    return [text for text, _ in open_items if text], active, seen


def _status_list(args: dict[str, object]) -> list[tuple[str, str]] | None:
    """A list argument whose items all carry a ``status`` and a text (TodoWrite ``todos``, Codex
    ``plan``, OpenHands ``task_list``)."""
    for value in args.values():
        if isinstance(value, list) and value and all(isinstance(v, dict) and "status" in v for v in value):
            items = [(_string(v, TASK_TEXT_KEYS), str(v.get("status", ""))) for v in value]
            return items
    return None


TASK_ID_RE = re.compile(r"Task #?(\w+)")


def created_task_id(result: ToolResultBlock | None) -> str | None:
    if result is None:
        return None
    found = TASK_ID_RE.search(result_text(result))
    return found.group(1) if found else None


# ---------------------------------------------------------------- files


def _files(steps: list[_Step]) -> tuple[list[str], list[str], list[str]]:
    return files_of(
        file_action(step.call, step.result) for step in steps if step.result is not None and not step.failed
    )


def files_of(actions: Iterable[tuple[str, Sequence[str]]]) -> tuple[list[str], list[str], list[str]]:
    """The files edited, created and read by the file ``actions`` (:func:`file_action` of each
    answered step that did not fail, in step order): a file read after it was edited or created
    is not listed as read, one created and then edited stays created."""
    edited: dict[str, None] = {}
    created: dict[str, None] = {}
    read: dict[str, None] = {}
    for kind, paths in actions:
        target = {"edited": edited, "created": created, "read": read}.get(kind)
        if target is None:
            continue
        for path in paths:
            if kind == "read" and (path in edited or path in created):
                continue
            if kind == "edited" and path in created:
                continue
            if kind != "read":
                read.pop(path, None)
            target[path] = None
    return list(edited), list(created), list(read)


def file_action(call: ToolCallBlock, result: ToolResultBlock) -> tuple[str, tuple[str, ...]]:
    """``(kind, paths)`` of a call and its result: ``edited``, ``created``, ``read`` or ``""`` (no
    file); with an active analysis once per pair of objects (the read-ahead finds it when the result
    arrives; neither block is hashed by value)."""
    analysis = active_analysis()
    if analysis is None:
        return _file_action_of(call, result)
    kept = analysis.file_actions.recall(result)
    if kept is not None and kept[0] is call:
        return kept[1]
    analysis.file_actions.computed += 1
    return analysis.file_actions.keep(result, (call, _file_action_of(call, result)))[1]


def _file_action_of(call: ToolCallBlock, result: ToolResultBlock) -> tuple[str, tuple[str, ...]]:
    """:func:`_file_action` of one call and its result."""
    kind, paths = _file_action(_Step(call, result))
    return kind, tuple(paths)


def _file_action(step: _Step) -> tuple[str, list[str]]:
    """``(kind, paths)``: ``edited``, ``created``, ``read`` or ``""``, from the call's path argument
    and the paths its result reported."""
    assert step.result is not None
    args = _arguments(step.call)
    name = step.call.name.lower()
    text = result_text(step.result)
    if name == "apply_patch" or "*** Begin Patch" in step.call.arguments:
        return _patch_action(args)
    sub = str(args.get("command", "")).lower() if _is_editor(step.call, args) else ""
    path = _string(args, PATH_KEYS)
    created = CREATED_RE.findall(text[:400])
    updated = [a or b for a, b in UPDATED_RE.findall(text[:400])]
    opened = OPEN_FILE_RE.findall(text[:400])
    if created:
        return "created", created
    if sub == "create":
        return "created", [path] if path else []
    if sub in ("view",) or name in READ_TOOLS:
        return "read", [path] if path else opened[:1]
    if updated or sub in ("str_replace", "insert", "undo_edit") or any(w in name for w in EDIT_WORDS):
        return "edited", updated or ([path] if path else opened[:1])
    if name in WRITE_TOOLS or "write" in name:
        return ("created", [path]) if path else ("", [])
    return "", []


def _patch_action(args: dict[str, object]) -> tuple[str, list[str]]:
    patch = next((v for v in args.values() if isinstance(v, str) and "*** " in v), "")
    found = PATCH_RE.findall(patch)
    added = [p.strip() for kind, p in found if kind == "Add"]
    changed = [p.strip() for kind, p in found if kind != "Add"]
    return ("created", added) if added and not changed else ("edited", changed + added)


# ---------------------------------------------------------------- intent

INTENT_RE = re.compile(
    r"^(?:(?:now|next|then|first|finally|so|ok(?:ay)?|great|good|perfect)[,!.]?\s+)*"
    r"(?:let me|let's|let us|i'll|i will|i'm going to|i am going to|i need to|we need to|i should"
    r"|we should|i'm now going to|(?:the )?next step\b|now i)\b",
    re.I,
)
SENTENCE_RE = re.compile(r"(?<=[.!?])\s+|\n+")


def _intent(walk: _Walk) -> str | None:
    """The agent's latest statement of what it does next, from its texts after the last ask."""
    for position, text in reversed(walk.agent_texts):
        if position < walk.last_ask_at:
            break
        found = intent_of(text)
        if found is not None:
            return found
    return None


def intent_of(text: str) -> str | None:
    """The last sentence of an agent's text that says what it does next ("Let me ...",
    "Next, I'll ..."), clipped; None when no sentence does."""
    sentences = [s.strip(" -*#") for s in SENTENCE_RE.split(FENCE_RE.sub(" ", text)) if s.strip()]
    for sentence in reversed(sentences):
        if INTENT_RE.match(sentence):
            return _clip(sentence, 300)
    return None
