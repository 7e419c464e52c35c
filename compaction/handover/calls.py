"""What a tool call acted on and what its result says: the call's arguments and key (its command,
else its path, else its compact arguments), the result's text and whether it failed, and one
line per step for the last steps of a handover.

A result is a failure when it is flagged (``is_error``), starts with OpenHands' ``ERROR:``, or its
output says so (:func:`~compaction.handover.outcomes.output_failed`); the harness's synthesized
results of interrupted calls and the user's rejections of a call are not failures.
"""

from __future__ import annotations

from compaction.handover.analysis import remembered, text_size
from compaction.handover.harness_text import REJECTED, is_synthesized
from compaction.handover.identifiers import clip_words, parsed_arguments, whole_words
from compaction.handover.outcomes import ANSI_RE, first_informative_line, output_failed, output_succeeded
from compaction.sessions.blocks import ToolCallBlock, ToolResultBlock, text_of
from compaction.sessions.memo import ENTRY_BYTES, STRING_BYTES, IdentityMemo

COMMAND_KEYS = ("command", "cmd", "script")
PATH_KEYS = ("file_path", "path", "notebook_path", "filename", "file")
OTHER_KEYS = ("pattern", "query", "url", "file_name", "search", "task_id", "description", "prompt")
COMMAND_CHARS = 160


def arguments_of(call: ToolCallBlock) -> dict[str, object]:
    """The call's arguments as a JSON object (empty when they are not one)."""
    return dict(call_arguments(call))


def call_arguments(call: ToolCallBlock) -> dict[str, object]:
    """:func:`arguments_of`, shared with the identifiers (with an active analysis parsed once per
    argument string, :func:`~compaction.handover.identifiers.parsed_arguments`): never mutate the
    result."""
    value = parsed_arguments(call.arguments)
    return value if isinstance(value, dict) else {}


def string_argument(args: dict[str, object], keys: tuple[str, ...]) -> str:
    """The first of ``keys`` whose argument is a text (stripped) or a list of texts (joined)."""
    for key in keys:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return " ".join(str(v) for v in value)  # Codex: ["bash", "-lc", "..."]
    return ""


@remembered(lambda budget: IdentityMemo(budget, text_size))
def call_key(call: ToolCallBlock) -> str:
    """What a call acted on: its command, else its path, else its compact arguments (with an active
    analysis once per call: a span's facts ask for it once per step, and the same calls again at
    every compaction)."""
    args = call_arguments(call)
    command = string_argument(args, COMMAND_KEYS)
    if command and not is_editor(call, args):
        return whole_words(command.splitlines()[0], COMMAND_CHARS)
    path = string_argument(args, PATH_KEYS)
    if path and command:  # an editor's sub-command and its path
        return f"{command} {path}"
    if path:
        return path
    other = string_argument(args, OTHER_KEYS)
    return clip_words(other or " ".join(call.arguments.split()), COMMAND_CHARS)


def is_editor(call: ToolCallBlock, args: dict[str, object]) -> bool:
    """OpenHands ``str_replace_editor``: ``command`` is a sub-command (view, create, ...)."""
    return "editor" in call.name.lower() and isinstance(args.get("path"), str)


def _result_size(block: ToolResultBlock, value: str) -> int:
    """A result's text: nothing more when it is its one text block's own string."""
    for inner in block.content:
        if getattr(inner, "text", None) is value:
            return ENTRY_BYTES
    return ENTRY_BYTES + len(value) + STRING_BYTES


@remembered(lambda budget: IdentityMemo(budget, _result_size))
def result_text(block: ToolResultBlock) -> str:
    """A result's text, ANSI codes removed (with an active analysis once per block)."""
    text = text_of(block.content)
    return ANSI_RE.sub("", text) if "\x1b" in text else text


@remembered(lambda budget: IdentityMemo[ToolResultBlock, bool](budget, ENTRY_BYTES))
def failed(block: ToolResultBlock) -> bool:
    """Whether a result is a failure (not a synthesized or rejected one); with an active analysis
    once per block."""
    text = result_text(block)
    if is_synthesized(text) or text.startswith(REJECTED):
        return False
    return block.is_error or text.lstrip().startswith("ERROR:") or output_failed(text)


# ---------------------------------------------------------------- one step described


def describe(call: ToolCallBlock, result: ToolResultBlock | None, failed: bool) -> str:
    """``Tool `command or path``` of a step (``call``, its ``result`` if answered, whether that
    ``failed``) and its outcome: failed (with its line), interrupted, ok when something says it
    succeeded, else nothing (a command's silence is no success)."""
    outcome: str | None = "no result yet"
    if result is not None:
        text = result_text(result)
        if failed:
            outcome = "failed: " + first_informative_line(text)
        elif text.startswith(REJECTED) or is_synthesized(text):
            outcome = "interrupted"
        else:
            outcome = "ok" if _succeeded(call, text) else None
    described = f"{call.name} `{_step_key(call)}`"
    return described if outcome is None else f"{described} ({outcome})"


def _step_key(call: ToolCallBlock) -> str:
    """What a last step names: a command whole (as the identifiers hold it, so a checkpoint that
    quotes the step need not list the command again), anything else clipped to 100 characters."""
    args = call_arguments(call)
    if string_argument(args, COMMAND_KEYS) and not is_editor(call, args):
        return call_key(call)
    return clip_words(call_key(call), 100)


def _succeeded(call: ToolCallBlock, text: str) -> bool:
    """Whether a step's output says it succeeded: a command's only when its output says so; another
    tool's (a file read, an edit, a search) when it answered with something and no failure."""
    args = call_arguments(call)
    if string_argument(args, COMMAND_KEYS) and not is_editor(call, args):
        return output_succeeded(text)
    return bool(text.strip())
