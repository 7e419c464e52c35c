"""The agent's todo/plan state: the latest todo/plan tool input (Claude Code ``TodoWrite`` /
``TaskCreate`` / ``TaskUpdate``, Codex ``update_plan``, OpenHands ``task_tracker``, any tool with a
list of items that carry a ``status``), read as changes (:class:`TodoOp`) and folded into the
unfinished items, the item in progress, and whether any todo/plan tool was used."""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

from compaction.handover.calls import call_arguments, result_text, string_argument
from compaction.sessions.blocks import ToolCallBlock, ToolResultBlock

DONE_STATUSES = {"completed", "complete", "done", "cancelled", "canceled", "deleted", "skipped"}
TASK_TEXT_KEYS = ("content", "step", "title", "subject", "task", "description", "text")
TASK_ID_RE = re.compile(r"Task #?(\w+)")


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


def todo_op(
    call: ToolCallBlock, todo: list[tuple[str, str]] | None, result: ToolResultBlock | None
) -> TodoOp | None:
    """The todo/plan change a call makes (``todo``: its :func:`status_list`), None for any other
    call; a created task's id is read from its ``result`` when there is one."""
    if todo is not None:
        return TodoOp("items", tuple(todo))
    if call.name == "TaskCreate":
        text = string_argument(call_arguments(call), TASK_TEXT_KEYS)
        return TodoOp("create", task_id=created_task_id(result), text=text)
    if call.name == "TaskUpdate":
        args = call_arguments(call)
        status = args.get("status")
        return TodoOp(
            "update",
            task_id=str(args.get("taskId", args.get("task_id", args.get("id", "")))),
            text=string_argument(args, ("subject", "content", "title")),
            status=status if isinstance(status, str) else None,
        )
    return None


def open_tasks(ops: Iterable[TodoOp]) -> tuple[list[str], str | None, bool]:
    """The unfinished items of the todo/plan changes ``ops`` (in the order made), the item in
    progress, and whether any todo/plan tool was used."""
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


def status_list(args: dict[str, object]) -> list[tuple[str, str]] | None:
    """A list argument whose items all carry a ``status`` and a text (TodoWrite ``todos``, Codex
    ``plan``, OpenHands ``task_list``)."""
    for value in args.values():
        if isinstance(value, list) and value and all(isinstance(v, dict) and "status" in v for v in value):
            items = [(string_argument(v, TASK_TEXT_KEYS), str(v.get("status", ""))) for v in value]
            return items
    return None


def created_task_id(result: ToolResultBlock | None) -> str | None:
    if result is None:
        return None
    found = TASK_ID_RE.search(result_text(result))
    return found.group(1) if found else None
