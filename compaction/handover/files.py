"""The files a span's tool calls touched: edited, created and read, from the path arguments of
file tools, refined by the paths the tool reported ("File created successfully at: ...") and the
files an ``apply_patch`` names."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from compaction.handover.analysis import Slot, SpanAnalysis, active_analysis, chars
from compaction.handover.calls import PATH_KEYS, call_arguments, is_editor, result_text, string_argument
from compaction.sessions.blocks import ToolCallBlock, ToolResultBlock
from compaction.sessions.memo import ENTRY_BYTES, IdentityMemo

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

FileAction = tuple[str, tuple[str, ...]]
"""What a call and its result did to files: ``(kind, paths)`` (:func:`file_action`)."""


def _file_action_size(key: object, value: tuple[ToolCallBlock, FileAction]) -> int:
    paths = value[1][1]
    return ENTRY_BYTES + (chars(paths) if paths else 0)


FILE_ACTIONS: Slot[IdentityMemo[ToolResultBlock, tuple[ToolCallBlock, FileAction]]] = Slot(
    lambda budget: IdentityMemo(budget, _file_action_size)
)
"""Each result's file action, with the call it was paired with (by identity: a result paired with
another call is read again)."""


def file_actions(analysis: SpanAnalysis) -> IdentityMemo[ToolResultBlock, tuple[ToolCallBlock, FileAction]]:
    """``analysis``'s file actions (:data:`FILE_ACTIONS`)."""
    return analysis.memo(FILE_ACTIONS)


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


def file_action(call: ToolCallBlock, result: ToolResultBlock) -> FileAction:
    """``(kind, paths)`` of a call and its result: ``edited``, ``created``, ``read`` or ``""`` (no
    file); with an active analysis once per pair of objects (the read-ahead finds it when the result
    arrives; neither block is hashed by value)."""
    analysis = active_analysis()
    if analysis is None:
        return _file_action(call, result)
    memo = file_actions(analysis)
    kept = memo.recall(result)
    if kept is not None and kept[0] is call:
        return kept[1]
    memo.computed += 1
    return memo.keep(result, (call, _file_action(call, result)))[1]


def _file_action(call: ToolCallBlock, result: ToolResultBlock) -> FileAction:
    """``(kind, paths)``: ``edited``, ``created``, ``read`` or ``""``, from the call's path argument
    and the paths its result reported."""
    args = call_arguments(call)
    name = call.name.lower()
    text = result_text(result)
    if name == "apply_patch" or "*** Begin Patch" in call.arguments:
        return _patch_action(args)
    sub = str(args.get("command", "")).lower() if is_editor(call, args) else ""
    path = string_argument(args, PATH_KEYS)
    created = CREATED_RE.findall(text[:400])
    updated = [a or b for a, b in UPDATED_RE.findall(text[:400])]
    opened = OPEN_FILE_RE.findall(text[:400])
    if created:
        return "created", tuple(created)
    if sub == "create":
        return "created", (path,) if path else ()
    if sub in ("view",) or name in READ_TOOLS:
        return "read", (path,) if path else tuple(opened[:1])
    if updated or sub in ("str_replace", "insert", "undo_edit") or any(w in name for w in EDIT_WORDS):
        return "edited", tuple(updated or ([path] if path else opened[:1]))
    if name in WRITE_TOOLS or "write" in name:
        return ("created", (path,)) if path else ("", ())
    return "", ()


def _patch_action(args: dict[str, object]) -> FileAction:
    patch = next((v for v in args.values() if isinstance(v, str) and "*** " in v), "")
    found = PATCH_RE.findall(patch)
    added = [p.strip() for kind, p in found if kind == "Add"]
    changed = [p.strip() for kind, p in found if kind != "Add"]
    return ("created", tuple(added)) if added and not changed else ("edited", tuple(changed + added))
