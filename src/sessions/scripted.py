"""Scripted and demo models for the reference loop.

:class:`ScriptedModel` plays back a fixed list of responses (or callables, or exceptions to raise)
and records every request it receives; tests drive the loop with it.

:class:`DemoModel` is a deterministic fake coding agent working in a :class:`DemoWorkspace`: a small
generated Python project (``src/app/module_N.py`` and ``tests/test_module_N.py``) in which some
modules carry a bug (an off-by-one, a missing import, a ``KeyError``, a missing default, a ``None``
map). Each step it says a short thought and calls 1-3 tools (``bash``, ``read_file``, ``grep``,
``edit_file``); the demo tools answer from the workspace with realistic output (file listings,
pytest failures with exact error strings such as ``AssertionError: expected 3, got 2``), and edits
really change the files, so a fixed module's tests pass afterwards. After ``steps_per_turn - 1``
tool steps it answers without tools, which ends the turn. Everything is a function of the seed: the
same seed gives the same events (except their times). :func:`run_demo_session` runs a whole demo
session through the loop.
"""

from __future__ import annotations

import inspect
import json
import random
import re
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from sessions.blocks import Message, Source, TextBlock, ToolCallBlock, ToolResultBlock
from sessions.errors import EventCompactionError
from sessions.events import ToolSpec, Usage
from sessions.loop import (
    AgentLoop,
    ModelErrorHook,
    ModelRequest,
    ModelResponse,
    PreStepHook,
    ToolFunction,
    ToolOutput,
)

if TYPE_CHECKING:
    from sessions.session import Session
    from sessions.store import SessionStore

ScriptItem = (
    ModelResponse
    | Callable[[ModelRequest], ModelResponse | Awaitable[ModelResponse]]
    | BaseException
)


class ScriptExhaustedError(EventCompactionError, LookupError):
    """A scripted model was called more times than it has responses."""


# ---------------------------------------------------------------- the scripted model


class ScriptedModel:
    """Plays back ``responses`` in order; an exception item is raised, a callable is called."""

    def __init__(self, responses: Iterable[ScriptItem]) -> None:
        self._script: deque[ScriptItem] = deque(responses)
        self.requests: list[ModelRequest] = []

    @property
    def remaining(self) -> int:
        return len(self._script)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if not self._script:
            raise ScriptExhaustedError(
                f"scripted model: expected at most {len(self.requests) - 1} calls, got call "
                f"{len(self.requests)} with {len(request.messages)} messages"
            )
        item = self._script.popleft()
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, ModelResponse):
            return item
        result = item(request)
        return await result if inspect.isawaitable(result) else result


def tool_call(name: str, arguments: dict[str, object] | str, call_id: str) -> ToolCallBlock:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments, sort_keys=True)
    return ToolCallBlock(id=call_id, name=name, arguments=raw)


def reply(
    text: str = "",
    *calls: ToolCallBlock,
    message_id: str,
    chunks: Sequence[str] | None = None,
    usage: Usage | None = None,
    provider: str = "scripted",
    model: str = "scripted-1",
    stop_reason: str = "stop",
) -> ModelResponse:
    """An assistant response: optional text then tool calls; ``chunks`` default to the text."""
    content = ((TextBlock(text),) if text else ()) + calls
    source = Source(kind="model", provider=provider, model=model)
    streamed = tuple(chunks) if chunks is not None else ((text,) if text else ())
    return ModelResponse(
        Message(id=message_id, role="assistant", content=content, source=source),
        usage=usage,
        chunks=streamed,
        stop_reason=stop_reason,
    )


# ---------------------------------------------------------------- the demo workspace

MODULES = 24
TOPICS = (
    "billing", "invoices", "users", "sessions", "orders", "inventory", "shipping", "reports",
    "auth", "cache", "events", "search", "payments", "notifications", "exports", "metrics",
    "pricing", "ledger", "audit", "webhooks", "catalog", "quotas", "sync", "scheduler",
)
VERBS = ("load", "render", "filter", "collect", "group", "index", "score", "split", "expand")
NOUNS = ("rows", "window", "entries", "labels", "history", "buckets", "pages", "deltas", "ranks")
MISSING_MODULES = ("foo", "app.legacy_utils", "app.compat", "yaml_compat")
KEY_NAMES = ("user_id", "account_id", "order_id", "tenant")
BUG_KINDS = ("assertion", "import", "key", "signature", "none-map")


@dataclass(frozen=True)
class Bug:
    kind: str
    module: int
    path: str
    bad: str  # the buggy line, verbatim
    good: str  # the fixed line
    error: str  # the exact error string pytest reports
    test: str  # the failing test function
    symbol: str  # what an agent would grep for


def module_path(k: int) -> str:
    return f"src/app/module_{k}.py"


def module_test_path(k: int) -> str:
    return f"tests/test_module_{k}.py"


def _make_bug(kind: str, k: int, rng: random.Random) -> Bug:
    path = module_path(k)
    if kind == "assertion":
        n = rng.randint(2, 9)
        return Bug(kind, k, path, "    return total - 1", "    return total",
                   f"AssertionError: expected {n}, got {n - 1}", "test_compute_totals",
                   "def compute_totals")
    if kind == "import":
        name = rng.choice(MISSING_MODULES)
        return Bug(kind, k, path, f"from {name} import chunked", "from app.utils import chunked",
                   f"ModuleNotFoundError: No module named '{name}'", "<collection>",
                   "import chunked")
    if kind == "key":
        key = rng.choice(KEY_NAMES)
        return Bug(kind, k, path, f'    owner = data["{key}"]', f'    owner = data.get("{key}")',
                   f"KeyError: '{key}'", "test_load_payload", key)
    if kind == "signature":
        return Bug(kind, k, path, "def parse_record(raw: str, strict: bool) -> Record:",
                   "def parse_record(raw: str, strict: bool = False) -> Record:",
                   "TypeError: parse_record() missing 1 required positional argument: 'strict'",
                   "test_parse_record_defaults", "def parse_record")
    return Bug(kind, k, path, "    merged: dict[str, int] | None = None",
               "    merged: dict[str, int] = {}",
               "AttributeError: 'NoneType' object has no attribute 'get'", "test_merge_batches",
               "def merge_batches")


def _module_source(k: int, topic: str, bug: Bug | None, rng: random.Random) -> str:
    def line(kind: str, good: str) -> str:
        return bug.bad if bug is not None and bug.kind == kind else good

    key = rng.choice(KEY_NAMES)
    if bug is not None and bug.kind == "key":
        key = bug.symbol
    lines = [
        f'"""{topic.capitalize()} helpers for the app service (module {k})."""',
        "",
        "from __future__ import annotations",
        "",
        "import json",
        "import logging",
        "from collections.abc import Iterable",
        "from dataclasses import dataclass, field",
        "",
        line("import", "from app.utils import chunked"),
        "",
        "log = logging.getLogger(__name__)",
        "",
        f"DEFAULT_LIMIT = {rng.randint(10, 100)}",
        f'TOPIC = "{topic}"',
        "",
        "",
        "@dataclass",
        "class Record:",
        "    key: str",
        "    amount: int = 0",
        "    tags: list[str] = field(default_factory=list)",
        "",
        "",
        line("signature", "def parse_record(raw: str, strict: bool = False) -> Record:"),
        "    data = json.loads(raw)",
        '    if strict and "key" not in data:',
        '        raise ValueError(f"record without key: {raw!r}")',
        '    return Record(str(data.get("key", "")), int(data.get("amount", 0)))',
        "",
        "",
        "def compute_totals(records: Iterable[Record]) -> int:",
        "    total = 0",
        "    for record in records:",
        "        total += record.amount",
        line("assertion", "    return total"),
        "",
        "",
        "def load_payload(raw: str) -> dict[str, object]:",
        "    data = json.loads(raw)",
        line("key", f'    owner = data.get("{key}")'),
        '    log.debug("payload for %s with %d keys", owner, len(data))',
        '    return {"owner": owner, "items": data.get("items", [])}',
        "",
        "",
        "def merge_batches(batches: Iterable[dict[str, int]]) -> dict[str, int]:",
        line("none-map", "    merged: dict[str, int] = {}"),
        "    for batch in chunked(list(batches), DEFAULT_LIMIT):",
        "        for part in batch:",
        "            for name, value in part.items():",
        "                merged[name] = merged.get(name, 0) + value",
        "    return merged",
    ]
    for _ in range(rng.randint(1, 7)):
        lines += _filler(rng)
    return "\n".join(lines) + "\n"


def _filler(rng: random.Random) -> list[str]:
    name = f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}"
    limit = rng.randint(2, 50)
    return [
        "",
        "",
        f"def {name}(records: Iterable[Record], limit: int = {limit}) -> list[Record]:",
        f'    """Return at most ``limit`` records for {name.replace("_", " ")}."""',
        "    selected: list[Record] = []",
        "    for record in records:",
        f"        if record.amount > {rng.randint(0, 9)} and len(selected) < limit:",
        "            selected.append(record)",
        f'    log.info("{name}: kept %d of the records", len(selected))',
        "    return selected",
    ]


def _test_source(k: int, bug: Bug | None) -> str:
    expected = int(bug.error.split()[2].rstrip(",")) if bug and bug.kind == "assertion" else 3
    amounts = ", ".join(f"Record('r{i}', 1)" for i in range(expected))
    return "\n".join([
        "import json",
        "",
        f"from app.module_{k} import Record, compute_totals, load_payload, merge_batches, "
        "parse_record",
        "",
        "",
        "def test_compute_totals():",
        f"    records = [{amounts}]",
        "    total = compute_totals(records)",
        f"    assert total == {expected}, f'expected {expected}, got {{total}}'",
        "",
        "",
        "def test_load_payload():",
        "    assert load_payload(json.dumps({'items': [1]}))['items'] == [1]",
        "",
        "",
        "def test_parse_record_defaults():",
        "    assert parse_record('{\"key\": \"k\"}').key == 'k'",
        "",
        "",
        "def test_merge_batches():",
        "    assert merge_batches([{'x': 1}, {'x': 2}]) == {'x': 3}",
        "",
    ])


class DemoWorkspace:
    """A generated project in memory; the demo tools read and edit it. Deterministic per seed."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        rng = random.Random(f"workspace:{seed}")
        buggy = rng.sample(range(1, MODULES + 1), 16)
        self.bugs: dict[int, Bug] = {k: _make_bug(rng.choice(BUG_KINDS), k, rng) for k in buggy}
        self.files: dict[str, str] = {"src/app/__init__.py": "", "src/app/utils.py": _UTILS}
        for k in range(1, MODULES + 1):
            file_rng = random.Random(f"module:{seed}:{k}")
            topic = TOPICS[(k + seed) % len(TOPICS)]
            self.files[module_path(k)] = _module_source(k, topic, self.bugs.get(k), file_rng)
            self.files[module_test_path(k)] = _test_source(k, self.bugs.get(k))
        self.edited: dict[str, int] = {}  # path -> lines changed

    def line_of(self, bug: Bug) -> int:
        """The 1-based line of the bug's buggy line in its file (0 once fixed)."""
        lines = self.files[bug.path].splitlines()
        return lines.index(bug.bad) + 1 if bug.bad in lines else 0

    def failing(self, k: int) -> Bug | None:
        bug = self.bugs.get(k)
        return bug if bug is not None and bug.bad in self.files[bug.path] else None


_UTILS = '''"""Small shared helpers."""

from collections.abc import Iterator, Sequence


def chunked(items: Sequence[object], size: int) -> Iterator[Sequence[object]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
'''


# ---------------------------------------------------------------- the demo tools


def demo_tools(workspace: DemoWorkspace) -> dict[str, ToolFunction]:
    """The demo tools bound to ``workspace``: ``read_file``, ``grep``, ``edit_file``, ``bash``."""

    def bind(handler: Callable[[DemoWorkspace, dict[str, object]], ToolOutput]) -> ToolFunction:
        async def tool(arguments: str) -> ToolOutput:
            try:
                args = json.loads(arguments)
            except json.JSONDecodeError as e:
                return ToolOutput(f"invalid JSON arguments: {e}", is_error=True)
            if not isinstance(args, dict):
                return ToolOutput(f"expected a JSON object of arguments, got {arguments}", True)
            return handler(workspace, args)

        return tool

    return {
        "read_file": bind(_read_file),
        "grep": bind(_grep),
        "edit_file": bind(_edit_file),
        "bash": bind(_bash),
    }


def _read_file(ws: DemoWorkspace, args: dict[str, object]) -> ToolOutput:
    path = str(args.get("path", ""))
    if path not in ws.files:
        return ToolOutput(f"File does not exist: {path}", is_error=True)
    lines = ws.files[path].splitlines()
    offset = max(1, int(str(args.get("offset", 1))))
    limit = int(str(args.get("limit", 80)))
    shown = lines[offset - 1 : offset - 1 + limit]
    body = "\n".join(f"{offset + i:>5}\t{text}" for i, text in enumerate(shown))
    more = len(lines) - (offset - 1 + len(shown))
    tail = f"\n... ({more} more lines; use offset to read further)" if more > 0 else ""
    return ToolOutput(body + tail if body else f"{path}: no lines at offset {offset}")


def _grep(ws: DemoWorkspace, args: dict[str, object]) -> ToolOutput:
    pattern, where = str(args.get("pattern", "")), str(args.get("path", "."))
    try:
        regex = re.compile(pattern)
    except re.error as e:
        return ToolOutput(f"grep: invalid regular expression {pattern!r}: {e}", is_error=True)
    hits = [
        f"{path}:{n}:{text}"
        for path in sorted(ws.files, key=_path_key)
        if where in (".", "") or path == where or path.startswith(where.rstrip("/") + "/")
        for n, text in enumerate(ws.files[path].splitlines(), 1)
        if regex.search(text)
    ]
    if not hits:
        return ToolOutput(f"no matches for {pattern!r} in {where}")
    more = f"\n... ({len(hits) - 30} more matches)" if len(hits) > 30 else ""
    return ToolOutput("\n".join(hits[:30]) + more)


def _edit_file(ws: DemoWorkspace, args: dict[str, object]) -> ToolOutput:
    path, old, new = (str(args.get(k, "")) for k in ("path", "old_string", "new_string"))
    if path not in ws.files:
        return ToolOutput(f"edit_file: {path} does not exist", is_error=True)
    text = ws.files[path]
    count = text.count(old) if old else 0
    if count != 1:
        found = "was not found" if count == 0 else f"matches {count} places"
        return ToolOutput(
            f"edit_file: old_string {found} in {path}; expected exactly one match. Re-read the "
            "file and copy the exact text, including indentation.",
            is_error=True,
        )
    at = text[: text.index(old)].count("\n") + 1
    ws.files[path] = text.replace(old, new)
    ws.edited[path] = ws.edited.get(path, 0) + old.count("\n") + 1
    lines = ws.files[path].splitlines()
    around = range(max(1, at - 3), min(len(lines), at + 3) + 1)
    snippet = "\n".join(f"{n:>5}\t{lines[n - 1]}" for n in around)
    return ToolOutput(f"Edited {path}: replaced 1 occurrence at line {at}.\n{snippet}")


def _bash(ws: DemoWorkspace, args: dict[str, object]) -> ToolOutput:
    command = str(args.get("command", "")).strip()
    words = command.split()
    if not words:
        return ToolOutput("bash: empty command", is_error=True)
    if words[0] == "pytest":
        return ToolOutput(_pytest(ws, [w for w in words[1:] if w.startswith("tests/")]))
    if words[:2] == ["git", "status"]:
        return ToolOutput("\n".join(f" M {p}" for p in sorted(ws.edited)) or "(no output)")
    if words[:2] == ["git", "diff"]:
        return ToolOutput(_diff_stat(ws))
    if words[0] == "ls":
        folder = (words[1] if len(words) > 1 else ".").rstrip("/") + "/"
        names = sorted({p[len(folder) :].split("/")[0] for p in ws.files if p.startswith(folder)})
        return ToolOutput("\n".join(names) or f"ls: cannot access '{words[-1]}'", not names)
    if words[0] == "ruff":
        return ToolOutput(_ruff(ws, words[-1]))
    if words[:2] == ["wc", "-l"]:
        rows = [f"{len(ws.files[p].splitlines()):>5} {p}" for p in sorted(ws.files, key=_path_key)
                if p.startswith("src/app/")]
        return ToolOutput("\n".join(rows))
    return ToolOutput(f"bash: {words[0]}: command not found\nexit code: 127", is_error=True)


def _path_key(path: str) -> tuple[str, int]:
    match = re.search(r"(\d+)\.py$", path)
    return (path.rsplit("_", 1)[0] if match else path, int(match.group(1)) if match else 0)


def _pytest(ws: DemoWorkspace, targets: list[str]) -> str:
    modules = [int(m.group(1)) for t in targets if (m := re.search(r"test_module_(\d+)", t))]
    modules = modules or list(range(1, MODULES + 1))
    failures = [b for k in modules if (b := ws.failing(k)) is not None]
    passed = len(modules) * 4 - len(failures)
    head = [
        "============================= test session starts ==============================",
        f"collected {len(modules) * 4} items",
        "",
    ]
    for index, k in enumerate(modules, 1):
        bug = ws.failing(k)
        marks = "".join("F" if bug and bug.test == t else "." for t in _TESTS)
        head.append(f"{module_test_path(k)} {marks:<52} [{100 * index // len(modules):>3}%]")
    if not failures:
        return "\n".join([*head, "", _banner(f"{passed} passed in 0.{len(modules) + 11}s")])
    body = ["", "=" * 35 + " FAILURES " + "=" * 35]
    for bug in failures[:2]:
        body += _failure_detail(ws, bug)
    body.append("=" * 27 + " short test summary info " + "=" * 28)
    body += [f"FAILED {module_test_path(b.module)}::{b.test} - {b.error}" for b in failures]
    body.append(_banner(f"{len(failures)} failed, {passed} passed in 0.{len(modules) + 31}s"))
    return "\n".join([*head, *body, "exit code: 1"])


def _banner(text: str) -> str:
    return f" {text} ".center(80, "=")


_TESTS = (
    "test_compute_totals",
    "test_load_payload",
    "test_parse_record_defaults",
    "test_merge_batches",
)


def _failure_detail(ws: DemoWorkspace, bug: Bug) -> list[str]:
    where = "<module>" if bug.kind == "import" else bug.symbol.split()[-1]
    return [
        f"{'_' * 30} {bug.test} {'_' * 30}",
        "",
        f"{module_test_path(bug.module)}:{_test_line(ws, bug)}: in {bug.test}",
        f"{bug.path}:{ws.line_of(bug)}: in {where}",
        f"    {bug.bad.strip()}",
        f"E   {bug.error}",
        "",
    ]


def _test_line(ws: DemoWorkspace, bug: Bug) -> int:
    lines = ws.files[module_test_path(bug.module)].splitlines()
    marker = f"def {bug.test}():"
    return lines.index(marker) + 1 if marker in lines else 3


def _diff_stat(ws: DemoWorkspace) -> str:
    if not ws.edited:
        return "(no output)"
    rows = [f" {p} | {2 * n} {'+' * n}{'-' * n}" for p, n in sorted(ws.edited.items())]
    total = sum(ws.edited.values())
    rows.append(f" {len(rows)} files changed, {total} insertions(+), {total} deletions(-)")
    return "\n".join(rows)


def _ruff(ws: DemoWorkspace, path: str) -> str:
    if path not in ws.files:
        return f"error: Failed to read {path}: No such file or directory (os error 2)"
    rng = random.Random(f"ruff:{ws.seed}:{path}:{ws.files[path].count(chr(10))}")
    if rng.random() < 0.6:
        return "All checks passed!"
    n = rng.randint(11, 40)
    return (
        f"{path}:5:8: F401 [*] `json` imported but unused\n{path}:{n}:101: E501 Line too long "
        f"(104 > 100)\nFound 2 errors.\n[*] 1 fixable with the `--fix` option.\nexit code: 1"
    )


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
            _Action("read_file", {"path": module_path(k), "offset": 1, "limit": 60},
                    f"Reviewing {module_path(k)} for leftovers of the same bug patterns."),
            _Action("bash", {"command": f"ruff check {module_path(k)}"},
                    f"Linting {module_path(k)} with `ruff check`."),
        ]

    def _fix_plan(self, bug: Bug) -> list[_Action]:
        rng, test = self._rng, module_test_path(bug.module)
        plan = [
            _Action("bash", {"command": f"pytest {test} -q"},
                    f"Running `pytest {test} -q` to reproduce the failure."),
            _Action("read_file", {"path": bug.path, "offset": 1, "limit": rng.choice((60, 80))},
                    f"Reading {bug.path} to find where `{bug.symbol}` goes wrong."),
            _Action("grep", {"pattern": bug.symbol, "path": rng.choice(("src/app", "."))},
                    f"Searching for `{bug.symbol}` to see how widespread it is."),
        ]
        if rng.random() < 0.3:
            plan.append(_Action("read_file", {"path": test}, f"Checking what {test} expects."))
        if rng.random() < 0.25:
            stale = bug.bad.replace(" ", "  ", 1)  # wrong spacing: the edit finds no exact match
            plan.append(self._edit(bug, stale, bug.good.strip(), "Applying the fix."))
            offset = max(1, self.workspace.line_of(bug) - 4)
            plan.append(_Action("read_file", {"path": bug.path, "offset": offset, "limit": 10},
                                "The edit did not match; re-reading the exact lines."))
        plan.append(self._edit(bug, bug.bad, bug.good, f"Fixing it: `{bug.bad.strip()}` becomes "
                               f"`{bug.good.strip()}`."))
        plan.append(_Action("bash", {"command": f"pytest {test} -q"},
                            f"Re-running `pytest {test} -q` to confirm the fix."))
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
    ToolSpec("read_file", "Read a text file, with line numbers.", {
        "type": "object", "required": ["path"],
        "properties": {"path": {"type": "string"}, "offset": {"type": "integer", "minimum": 1},
                       "limit": {"type": "integer", "minimum": 1}}}),
    ToolSpec("grep", "Search files for a regular expression; prints path:line:text.", {
        "type": "object", "required": ["pattern"],
        "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}}}),
    ToolSpec("edit_file", "Replace exactly one occurrence of old_string with new_string.", {
        "type": "object", "required": ["path", "old_string", "new_string"],
        "properties": {"path": {"type": "string"}, "old_string": {"type": "string"},
                       "new_string": {"type": "string"}}}),
    ToolSpec("bash", "Run a shell command in the repository and return its output.", {
        "type": "object", "required": ["command"],
        "properties": {"command": {"type": "string"}}}),
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
