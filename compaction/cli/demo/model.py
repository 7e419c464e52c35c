"""The demo model: a deterministic fake coding agent working in a :class:`DemoWorkspace`.

Each step it says a short thought and calls 1-3 tools (``bash``, ``read_file``, ``grep``,
``edit_file``). After ``steps_per_turn - 1`` tool steps it answers without tools, which ends the
turn. Everything is a function of the seed: the same seed gives the same events (except their times).
:func:`run_demo_session` runs a whole demo session through the loop.
"""

from __future__ import annotations

import random
import re
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from compaction.cli.demo.workspace import (
    MODULES,
    Bug,
    DemoWorkspace,
    demo_tools,
    module_path,
    module_test_path,
)
from compaction.sessions.blocks import Message, Source, TextBlock, ToolCallBlock, ToolResultBlock
from compaction.sessions.events import ToolSpec, Usage
from compaction.sessions.loop import (
    AgentLoop,
    ModelErrorHook,
    ModelRequest,
    ModelResponse,
    PreStepHook,
)
from compaction.testing import tool_call

if TYPE_CHECKING:
    from compaction.sessions.session import Session
    from compaction.sessions.store import SessionStore

# ---------------------------------------------------------------- the demo model


@dataclass
class _Action:
    tool: str
    arguments: dict[str, object]
    intent: str


@dataclass
class _Plan:
    planned: list[Bug] = field(default_factory=list)


class DemoModel:
    """A deterministic fake coding agent over a :class:`DemoWorkspace` (see the module docstring).

    ``steps_per_turn`` counts every step of a turn, the final tool-free answer included.
    """

    def __init__(
        self,
        seed: int = 0,
        steps_per_turn: int = 30,
        *,
        workspace: DemoWorkspace | None = None,
        provider: str = "demo",
        model: str = "demo-coder-1",
        id_prefix: str = "",
    ) -> None:
        self.seed = seed
        self.steps_per_turn = max(1, steps_per_turn)
        self.workspace = workspace or DemoWorkspace(seed)
        self.source = Source(kind="model", provider=provider, model=model)
        self.id_prefix = id_prefix
        self._rng = random.Random(f"model:{seed}")
        self._queue: deque[_Action] = deque()
        self._todo = sorted(self.workspace.bugs, key=lambda k: self._rng.random())
        self._step = 0
        self._calls = 0
        self._turn = _Plan()
        self.completions = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.completions += 1
        self._step += 1
        calls: tuple[ToolCallBlock, ...] = ()
        if self._step >= self.steps_per_turn:
            text = self._final_answer()
        else:
            count = self._rng.choices((1, 2, 3), (5, 4, 2))[0]
            actions = [self._next_action() for _ in range(count)]
            text = " ".join(filter(None, [_observation(request), *(a.intent for a in actions)]))
            calls = tuple(self._call_block(a) for a in actions)
        message = Message(
            id=f"msg_{self.id_prefix}{self.completions:04d}",
            role="assistant",
            content=(TextBlock(text), *calls),
            source=self.source,
        )
        out_chars = len(text) + sum(len(c.arguments) + len(c.name) for c in calls)
        usage = Usage(input_tokens=_request_chars(request) // 4, output_tokens=out_chars // 4 + 1)
        return ModelResponse(message, usage=usage, chunks=_chunks(text))

    def _call_block(self, action: _Action) -> ToolCallBlock:
        self._calls += 1
        return tool_call(action.tool, action.arguments, f"call_{self.id_prefix}{self._calls:04d}")

    def _final_answer(self) -> str:
        self._step = 0
        planned, self._turn = self._turn.planned, _Plan()
        self._queue.clear()
        ws = self.workspace
        fixed = [b for b in planned if ws.failing(b.module) is None]
        unfinished = [b.module for b in planned if ws.failing(b.module) is not None]
        self._todo[:0] = unfinished  # pick them up again next turn
        remaining = [b for k in sorted(ws.bugs) if (b := ws.failing(k)) is not None]
        done = "; ".join(f"{b.path} ({b.error})" for b in fixed) or "nothing yet"
        left = "; ".join(f"{module_test_path(b.module)} ({b.error})" for b in remaining) or "none"
        return (
            f"Summary of this round. Fixed: {done}. Files changed so far: "
            f"{', '.join(sorted(ws.edited)) or 'none'}. Still failing: {left}. "
            "Run `pytest -q` to confirm the state of the suite."
        )

    def _next_action(self) -> _Action:
        if not self._queue:
            self._queue.extend(self._plan_more())
        return self._queue.popleft()

    def _plan_more(self) -> list[_Action]:
        rng = self._rng
        while self._todo:
            bug = self.workspace.failing(self._todo.pop(0))
            if bug is not None:
                return self._fix_plan(bug)
        k = rng.randint(1, MODULES)
        return [
            _Action(
                "read_file",
                {"path": module_path(k), "offset": 1, "limit": 60},
                f"Reviewing {module_path(k)} for leftovers of the same bug patterns.",
            ),
            _Action(
                "bash",
                {"command": f"ruff check {module_path(k)}"},
                f"Linting {module_path(k)} with `ruff check`.",
            ),
        ]

    def _fix_plan(self, bug: Bug) -> list[_Action]:
        rng, test = self._rng, module_test_path(bug.module)
        plan = [
            _Action(
                "bash",
                {"command": f"pytest {test} -q"},
                f"Running `pytest {test} -q` to reproduce the failure.",
            ),
            _Action(
                "read_file",
                {"path": bug.path, "offset": 1, "limit": rng.choice((60, 80))},
                f"Reading {bug.path} to find where `{bug.symbol}` goes wrong.",
            ),
            _Action(
                "grep",
                {"pattern": bug.symbol, "path": rng.choice(("src/app", "."))},
                f"Searching for `{bug.symbol}` to see how widespread it is.",
            ),
        ]
        if rng.random() < 0.3:
            plan.append(_Action("read_file", {"path": test}, f"Checking what {test} expects."))
        if rng.random() < 0.25:
            stale = bug.bad.replace(" ", "  ", 1)  # wrong spacing: the edit finds no exact match
            plan.append(self._edit(bug, stale, bug.good.strip(), "Applying the fix."))
            offset = max(1, self.workspace.line_of(bug) - 4)
            plan.append(
                _Action(
                    "read_file",
                    {"path": bug.path, "offset": offset, "limit": 10},
                    "The edit did not match; re-reading the exact lines.",
                )
            )
        plan.append(
            self._edit(
                bug, bug.bad, bug.good, f"Fixing it: `{bug.bad.strip()}` becomes `{bug.good.strip()}`."
            )
        )
        plan.append(
            _Action(
                "bash", {"command": f"pytest {test} -q"}, f"Re-running `pytest {test} -q` to confirm the fix."
            )
        )
        if rng.random() < 0.4:
            plan.append(_Action("bash", {"command": rng.choice(_EXTRAS)}, "Checking the tree."))
        self._turn.planned.append(bug)
        return plan

    @staticmethod
    def _edit(bug: Bug, old: str, new: str, intent: str) -> _Action:
        arguments: dict[str, object] = {"path": bug.path, "old_string": old, "new_string": new}
        return _Action("edit_file", arguments, intent)


_EXTRAS = ("git status --short", "git diff --stat", "ls src/app", "wc -l src/app/*.py", "pytest -q")
_ERROR_LINE = re.compile(r"^(?:E\s+|FAILED \S+ - )?([A-Za-z]+(?:Error|Exception): .+)$", re.M)


def _observation(request: ModelRequest) -> str:
    """What the last tool results showed, quoted (the first error line, or a pass)."""
    for message in reversed(request.messages):
        if message.role == "assistant":
            return ""
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                text = "\n".join(b.text for b in block.content if isinstance(b, TextBlock))
                match = _ERROR_LINE.search(text)
                if match:
                    return f"The last output shows `{match.group(1)}`."
                if " passed in " in text and "failed" not in text:
                    return "The tests pass now."
    return ""


def _chunks(text: str) -> tuple[str, ...]:
    words = text.split(" ")
    third = max(1, len(words) // 3)
    parts = [" ".join(words[i : i + third]) for i in range(0, len(words), third)]
    return tuple(p + (" " if i < len(parts) - 1 else "") for i, p in enumerate(parts))


def _request_chars(request: ModelRequest) -> int:
    total = len(request.system or "")
    for message in request.messages:
        total += len(msgspec.json.encode(message.content))
    return total


# ---------------------------------------------------------------- the demo session

DEMO_PROVIDER = "demo"
DEMO_MODEL = "demo-coder-1"
DEMO_SYSTEM_PROMPT = (
    "You are a careful coding agent working in a Python repository checked out at /work/demo. "
    "You can read files, search with grep, edit files by exact string replacement, and run shell "
    "commands with bash. Work in small steps: reproduce a failure before changing code, read the "
    "code you change, keep edits minimal, and re-run the relevant tests after every edit. Never "
    "change a test to make it pass. Quote exact error messages and file paths when you report. "
    "When the task is done, or you cannot make progress, stop calling tools and summarize what "
    "you changed, what you ran, and what still fails."
)

DEMO_TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "read_file",
        "Read a text file, with line numbers.",
        {
            "type": "object",
            "required": ["path"],
            "properties": {
                "path": {"type": "string"},
                "offset": {"type": "integer", "minimum": 1},
                "limit": {"type": "integer", "minimum": 1},
            },
        },
    ),
    ToolSpec(
        "grep",
        "Search files for a regular expression; prints path:line:text.",
        {
            "type": "object",
            "required": ["pattern"],
            "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
        },
    ),
    ToolSpec(
        "edit_file",
        "Replace exactly one occurrence of old_string with new_string.",
        {
            "type": "object",
            "required": ["path", "old_string", "new_string"],
            "properties": {
                "path": {"type": "string"},
                "old_string": {"type": "string"},
                "new_string": {"type": "string"},
            },
        },
    ),
    ToolSpec(
        "bash",
        "Run a shell command in the repository and return its output.",
        {"type": "object", "required": ["command"], "properties": {"command": {"type": "string"}}},
    ),
)

_PROMPTS = (
    "The test suite started failing after yesterday's refactor of src/app. Find the failing tests "
    "under tests/, fix the code (not the tests), and tell me what was wrong in each module.",
    "Thanks. Some modules still fail. Keep going until `pytest -q` is green, and run `ruff check` "
    "on every file you touch.",
    "Before we merge: review the modules you changed for other occurrences of the same bug "
    "patterns and summarize the diff (`git diff --stat`).",
)


class DemoTurn(msgspec.Struct, frozen=True):
    turn: int
    prompt: str


def demo_session_script(*, turns: int = 2, first_turn: int = 1) -> Iterator[DemoTurn]:
    """The user side of a demo session: one prompt per turn, numbered from ``first_turn``."""
    for turn in range(first_turn, first_turn + turns):
        yield DemoTurn(turn, _PROMPTS[(turn - 1) % len(_PROMPTS)])


async def run_demo_session(
    session: Session,
    store: SessionStore | None = None,
    *,
    turns: int = 2,
    steps_per_turn: int = 30,
    seed: int = 0,
    pre_step: Sequence[PreStepHook] = (),
    on_model_error: Sequence[ModelErrorHook] = (),
    context_window: int | None = None,
) -> Session:
    """Run ``turns`` demo turns of ``steps_per_turn`` steps each on ``session`` through the loop."""
    workspace = DemoWorkspace(seed)
    first_turn = session.structure.next_turn
    model = DemoModel(seed, steps_per_turn, workspace=workspace, id_prefix=f"t{first_turn}_")
    loop = AgentLoop(
        session,
        model,
        demo_tools(workspace),
        store=store,
        provider=DEMO_PROVIDER,
        model_name=DEMO_MODEL,
        system=DEMO_SYSTEM_PROMPT,
        tool_specs=DEMO_TOOL_SPECS,
        context_window=context_window,
        max_steps=max(50, steps_per_turn),
        pre_step=pre_step,
        on_model_error=on_model_error,
    )
    for item in demo_session_script(turns=turns, first_turn=first_turn):
        await loop.run_turn(item.prompt)
    return session
