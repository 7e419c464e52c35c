"""The fuzzer: hostile transcripts and native exports from a fixed seed, fed to ``compaction import``.

:func:`corpus` derives ``count`` cases from the small real transcripts and the golden native
exports with a ``random.Random(seed)``: truncations, byte flips, invalid UTF-8, a BOM, deleted,
repeated and swapped lines, hostile JSON values (huge numbers, deep nesting, wrong types, long
strings), edited native lines (payload, seq, hash, header). The same seed gives the same cases.

:func:`run_case` imports one case into a store in-process under a time limit and classifies it:

* ``clean-import``: exit 0, and the store still lists every session and loads every imported one;
* ``clean-refusal``: exit 1 with a ``compaction: error:`` line, nothing half-stored;
* ``traceback``: any exception escaped the command line, or a listed session does not load;
* ``hang``: the case ran past its time limit;
* ``lost-events``: exit 0, but fewer events are stored than the import reported.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SEEDS: tuple[Path, ...] = (
    ROOT / "tests/data/codex/function_call.jsonl",
    ROOT / "tests/data/codex/compacted.jsonl",
    ROOT / "tests/data/codex/local_shell_call.jsonl",
    ROOT / "tests/data/transcripts/mini-swe-agent/github_issue.traj.json",
    ROOT / "tests/data/transcripts/swe-agent/6e44b9__sweagenttestrepo-1c2844.traj",
    ROOT / "tests/data/transcripts/spotter/258c7280-ae70-4798-800f-63464d01a85d/subagents/"
    "agent-acompact-fffbd0.jsonl",
    ROOT / "tests/sessions/golden/orphan.v2.jsonl",
    ROOT / "tests/sessions/golden/pruned.v2.jsonl",
    ROOT / "tests/sessions/golden/compacted.v1.jsonl",
)
HEADS: tuple[Path, ...] = (  # large transcripts: their first lines only
    ROOT / "tests/data/transcripts/pi-mono/large-session.jsonl",
    ROOT / "tests/data/transcripts/claude-code-log/-Users-dain-workspace-claude-code-log-sample/"
    "37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl",
)
HEAD_LINES = 60
CASE_SECONDS = 30.0
OUTCOMES = ("clean-import", "clean-refusal", "traceback", "hang", "lost-events")


@dataclass(frozen=True)
class Case:
    name: str
    data: bytes


@dataclass
class Tally:
    """Counts per outcome, and the cases that were not clean (name: detail)."""

    runs: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    failures: list[str] = field(default_factory=list)

    def add(self, case: Case, outcome: str, detail: str = "") -> None:
        self.runs += 1
        self.counts[outcome] += 1
        if outcome in ("traceback", "hang", "lost-events"):
            self.failures.append(f"{case.name}: {outcome}: {detail[:400]}")


def _sources() -> list[tuple[str, bytes]]:
    found = [(p.name, p.read_bytes()) for p in SEEDS]
    for path in HEADS:
        with path.open("rb") as handle:
            head = b"".join(handle.readline() for _ in range(HEAD_LINES))
        found.append((f"{path.name}[:{HEAD_LINES}]", head))
    return found


# ---------------------------------------------------------------- mutations

Mutation = Callable[[random.Random, bytes], bytes]


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True) or [b""]


def truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data) + 1)]


def flip_bytes(rng: random.Random, data: bytes) -> bytes:
    mutable = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if mutable:
            mutable[rng.randrange(len(mutable))] = rng.randrange(256)
    return bytes(mutable)


def invalid_utf8(rng: random.Random, data: bytes) -> bytes:
    at = rng.randrange(len(data) + 1)
    return data[:at] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00"]) + data[at:]


def bom(rng: random.Random, data: bytes) -> bytes:
    return b"\xef\xbb\xbf" + data


def delete_line(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    del lines[rng.randrange(len(lines))]
    return b"".join(lines)


def repeat_line(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    at = rng.randrange(len(lines))
    lines.insert(at, lines[at])
    return b"".join(lines)


def swap_lines(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    a, b = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[a], lines[b] = lines[b], lines[a]
    return b"".join(lines)


DEEP = "__deep__"  # replaced by nested brackets after encoding (json cannot encode 1,200 levels)


def _hostile(rng: random.Random) -> object:
    return rng.choice(
        [
            None,
            True,
            -1,
            0,
            10**40,
            -(10**40),
            1.5e308,
            "",
            "x" * 100_000,
            "\u202e\ud7ff<script>",
            [],
            {},
            [[1]],
            {"type": None},
            DEEP,
        ]
    )


def _encode(rng: random.Random, value: object) -> bytes:
    text = json.dumps(value)
    depth = rng.choice([50, 900, 1200, 5000])
    return text.replace(f'"{DEEP}"', "[" * depth + "]" * depth).encode() + b"\n"


def _replace_somewhere(rng: random.Random, value: object) -> object:
    """``value`` with one nested value replaced by a hostile one."""
    if isinstance(value, dict) and value and rng.random() < 0.75:
        key = rng.choice(sorted(value, key=str))
        return {**value, key: _replace_somewhere(rng, value[key])}
    if isinstance(value, list) and value and rng.random() < 0.75:
        at = rng.randrange(len(value))
        return [*value[:at], _replace_somewhere(rng, value[at]), *value[at + 1 :]]
    return _hostile(rng)


def hostile_value(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    for _ in range(5):
        at = rng.randrange(len(lines))
        try:
            parsed = json.loads(lines[at])
        except (ValueError, RecursionError):  # not JSON, or nested deeper than json reads
            continue
        lines[at] = _encode(rng, _replace_somewhere(rng, parsed))
        break
    return b"".join(lines)


def edit_native_line(rng: random.Random, data: bytes) -> bytes:
    """An edit of a native export's event line: a payload text, its seq, its hash, its type."""
    lines = _lines(data)
    if len(lines) < 2:
        return data
    at = rng.randrange(1, len(lines))
    try:
        line = json.loads(lines[at])
    except (ValueError, RecursionError):
        return data
    if not isinstance(line, dict):
        return data
    field_ = rng.choice(["payload", "seq", "hash", "type", "time", "surface_op"])
    line[field_] = {
        "payload": _replace_somewhere(rng, line.get("payload")),
        "seq": rng.choice([-1, 0, 10**9, "1"]),
        "hash": "0" * 64,
        "type": rng.choice(["compact/start", "user/message", "from/the-future"]),
        "time": rng.choice(["2025-01-01T00:00:00", "yesterday", None]),
        "surface_op": rng.choice(["append", {"op": "replace", "start": 0, "end": 10**6}, 7]),
    }[field_]
    lines[at] = _encode(rng, line)
    return b"".join(lines)


def whole_file(rng: random.Random, data: bytes) -> bytes:
    return rng.choice(
        [
            b"",
            b"\n\n",
            b"{}",
            b"[]",
            b"null",
            b'"x"',
            b"{" * 5000,
            b"[" * 100_000,
            b"\x00" * 64,
            b'{"format": "compaction-events", "version": 2}\n',
            b'{"format": "compaction-events", "version": 99, "session_id": "x"}\n',
        ]
    )


MUTATIONS: tuple[Mutation, ...] = (
    truncate,
    flip_bytes,
    invalid_utf8,
    bom,
    delete_line,
    repeat_line,
    swap_lines,
    hostile_value,
    hostile_value,
    edit_native_line,
    whole_file,
)


def corpus(seed: int, count: int) -> Iterator[Case]:
    """``count`` hostile cases, the same ones for the same seed."""
    rng = random.Random(seed)
    sources = _sources()
    for index in range(count):
        name, data = rng.choice(sources)
        steps = [rng.choice(MUTATIONS) for _ in range(rng.choice([1, 1, 2, 3]))]
        for step in steps:
            data = step(rng, data)
        yield Case(f"seed{seed}#{index}:{name}:{'+'.join(s.__name__ for s in steps)}", data)


# ---------------------------------------------------------------- running one case


class Hang(BaseException):
    """Raised by the watchdog in the main thread when a case runs past its limit."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def cli(*argv: str) -> tuple[int, str, str]:
    """``compaction ARGV`` in-process: exit code, stdout, stderr (exceptions propagate)."""
    from compaction.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def run_case(case: Case, url: str, workdir: Path, tally: Tally, *, seconds: float = CASE_SECONDS) -> str:
    """Import ``case`` into the store at ``url``, check the store, count the outcome."""
    path = workdir / "case.jsonl"
    path.write_bytes(case.data)
    began = time.monotonic()
    try:
        with time_limit(seconds):
            code, out, err = cli("--store", url, "import", str(path), "--json")
            if code == 0:
                outcome, detail = _check_store(url, json.loads(out))
            elif code == 1 and _refused(out) and "Traceback" not in err:
                outcome, detail = "clean-refusal", ""
            else:
                outcome, detail = "traceback", f"exit {code}: {out[-300:]} {err[-400:]}"
    except Hang as e:
        outcome, detail = "hang", f"{e} ({time.monotonic() - began:.1f}s)"
    except Exception as e:  # escaped the command line: what users see as a traceback
        outcome, detail = "traceback", f"{type(e).__name__}: {e}"
    tally.add(case, outcome, detail)
    return outcome


def _refused(out: str) -> bool:
    """A refusal under ``--json``: one document whose error is one of the library's own."""
    from compaction import errors

    try:
        kind = json.loads(out)["error"]["type"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(getattr(errors, kind, None), type)


def _check_store(url: str, report: dict[str, Any]) -> tuple[str, str]:
    """After a clean import: every session still listed and readable, every imported event
    stored (the report's count equals the stored stream's length)."""
    from uuid import UUID

    from compaction.sessions.store import SessionStore

    code, out, err = cli("--store", url, "sessions", "--json")
    if code != 0:
        return "traceback", f"sessions after a clean import: exit {code}: {err[-300:]}"
    broken = [row for row in json.loads(out)["sessions"] if row.get("unreadable")]
    if broken:
        return "traceback", f"a clean import left an unreadable session: {broken[0]['unreadable']}"
    imported = [
        s for s in report.get("sessions", []) if isinstance(s, dict) and s.get("status") == "imported"
    ]
    with SessionStore.open(url) as store:
        for entry in imported:
            stored = store.stream_length(UUID(str(entry["session_id"])))
            if stored != entry["events"]:
                return "lost-events", f"{entry['session_id']}: reported {entry['events']}, stored {stored}"
    return "clean-import", ""
