"""The demo workspace: a small generated Python project with bugs, and the tools that work on it.

:class:`DemoWorkspace` holds ``src/app/module_N.py`` and ``tests/test_module_N.py``, some of them
carrying a bug (an off-by-one, a missing import, a ``KeyError``, a missing default, a ``None`` map).
The demo tools answer from it with realistic output (file listings, pytest failures with exact error
strings such as ``AssertionError: expected 3, got 2``), and edits really change the files, so a fixed
module's tests pass afterwards. Everything is a function of the seed.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compaction.sessions.loop import (
    ToolFunction,
    ToolOutput,
)

if TYPE_CHECKING:
    pass

# ---------------------------------------------------------------- the demo workspace

MODULES = 24
TOPICS = (
    "billing",
    "invoices",
    "users",
    "sessions",
    "orders",
    "inventory",
    "shipping",
    "reports",
    "auth",
    "cache",
    "events",
    "search",
    "payments",
    "notifications",
    "exports",
    "metrics",
    "pricing",
    "ledger",
    "audit",
    "webhooks",
    "catalog",
    "quotas",
    "sync",
    "scheduler",
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
        return Bug(
            kind,
            k,
            path,
            "    return total - 1",
            "    return total",
            f"AssertionError: expected {n}, got {n - 1}",
            "test_compute_totals",
            "def compute_totals",
        )
    if kind == "import":
        name = rng.choice(MISSING_MODULES)
        return Bug(
            kind,
            k,
            path,
            f"from {name} import chunked",
            "from app.utils import chunked",
            f"ModuleNotFoundError: No module named '{name}'",
            "<collection>",
            "import chunked",
        )
    if kind == "key":
        key = rng.choice(KEY_NAMES)
        return Bug(
            kind,
            k,
            path,
            f'    owner = data["{key}"]',
            f'    owner = data.get("{key}")',
            f"KeyError: '{key}'",
            "test_load_payload",
            key,
        )
    if kind == "signature":
        return Bug(
            kind,
            k,
            path,
            "def parse_record(raw: str, strict: bool) -> Record:",
            "def parse_record(raw: str, strict: bool = False) -> Record:",
            "TypeError: parse_record() missing 1 required positional argument: 'strict'",
            "test_parse_record_defaults",
            "def parse_record",
        )
    return Bug(
        kind,
        k,
        path,
        "    merged: dict[str, int] | None = None",
        "    merged: dict[str, int] = {}",
        "AttributeError: 'NoneType' object has no attribute 'get'",
        "test_merge_batches",
        "def merge_batches",
    )


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
    return "\n".join(
        [
            "import json",
            "",
            f"from app.module_{k} import Record, compute_totals, load_payload, merge_batches, parse_record",
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
        ]
    )


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
        rows = [
            f"{len(ws.files[p].splitlines()):>5} {p}"
            for p in sorted(ws.files, key=_path_key)
            if p.startswith("src/app/")
        ]
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
