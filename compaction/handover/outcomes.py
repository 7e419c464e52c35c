"""What a tool's output says of its outcome, for harnesses that report failure only there.

Claude Code flags a failed call (``is_error``); an OpenAI-style log (every framework adapter's, the
SWE-agent and mini-swe-agent trajectories) carries no flag: the tool printed its failure. These
patterns read it from the text, in the forms harnesses and tools print:

- a non-zero exit code: ``Exit code: 1``, ``exit code 2``, ``Command exited with code 1``,
  ``Process exited with code 1``, ``exit status 1``, ``<returncode>1</returncode>``,
  ``[Command failed with exit code 1]``;
- a Python traceback that ends in its exception line;
- test runners: pytest ``FAILED path::test`` and ``= 1 failed``, jest/vitest ``FAIL path`` and
  ``Tests: 1 failed``, go test ``--- FAIL:`` and ``FAIL\\tpkg``, cargo ``test result: FAILED``,
  mix ``3 tests, 1 failure``;
- compilers, linters and type checkers: ``file:line[:col]: error:`` (gcc, clang, mypy, go vet),
  ``error[E0308]:`` (rustc), ``error TS2322:`` (tsc), eslint's ``12:7  error  message  rule`` and
  ``✖ 2 problems``, ruff's ``Found 3 errors``, credo's ``[F] ↗ message`` issue lines;
- ``make: *** [target] Error N`` and ``npm ERR!``.

A step is "ok" only when something says it succeeded (:func:`output_succeeded`): exit code 0, a
passing test summary, a linter's all clear, a tool's own "successfully". Otherwise its outcome is
left unsaid. Of a failed output, :func:`first_informative_line` is the line a reader needs.
"""

from __future__ import annotations

import re

from compaction.handover.analysis import remembered, text_size
from compaction.handover.identifiers import ERROR_LINE_RE, clip_words
from compaction.sessions.memo import ValueMemo

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
"""A terminal's control sequences (colours, titles), removed from what is read of an output."""
LINE_CHARS = 160

EXIT_CODE_RE = re.compile(
    r"(?:\bexit(?:ed)?(?: with)?(?: code| status)|\breturn ?code|\bexit_code)[\s:=]*(-?\d+)"
    r"|<returncode>\s*(-?\d+)\s*</returncode>",
    re.I,
)
DIAGNOSTIC_RE = re.compile(
    r"^(?:FAILED [^\s]+.*"  # pytest short summary
    r"|[^\s:][^:\n]*:\d+(?::\d+)?:? (?:fatal )?error:.*"  # file:line:col: error: (gcc, mypy)
    r"|error(?:\[E\d+\]|\s+TS\d+)?:.+"  # rustc, tsc without a file, plain "error: ..."
    r"|[^\s(]+\(\d+,\d+\): error TS\d+:.*"  # tsc: file(line,col): error TS2322:
    r"|\d+:\d+\s+error\s+.+"  # eslint: 12:7  error  message  rule
    r"|--- FAIL: .+"  # go test
    r"|(?:┃\s*)?\[[FWCRD]\] [↗↘→↑↓].+"  # credo issue lines
    r")$",
    re.MULTILINE,
)
"""A line that names one failure of a tool (its most informative line when it has one)."""
BUILD_FAILURE_RE = re.compile(r"^(?:npm ERR! .+|make(?:\[\d+\])?: \*\*\* .+)$", re.MULTILINE)
"""A build tool's closing failure line: what failed when no line names the cause."""
FAILURE_RE = re.compile(
    r"^=+ .*\b\d+ (?:failed|errors?)\b.*=+$"  # pytest closing banner
    r"|^FAIL\s+\S+"  # jest/vitest file line, go test package line
    r"|^\s*Tests?:?\s+.*\b\d+ failed\b"  # jest/vitest totals
    r"|\btest result: FAILED\b"  # cargo test
    r"|^\d+ (?:tests?|doctests?|propert(?:y|ies))(?:, \d+ \w+)*, [1-9]\d* failures?\b"  # mix
    r"|^✖ \d+ problems?\b"  # eslint
    r"|^Found [1-9]\d* errors?\b"  # ruff, mypy
    r"|^\[Command failed with exit code"
    r"|^(?:Error|ERROR): "
    r"|^fatal: ",
    re.MULTILINE,
)
"""A failure summary or a marker of one, without the informative line itself."""
SUCCESS_RE = re.compile(
    r"^=+ .*\b\d+ passed\b(?!.*\b(?:failed|errors?)\b).*=+$"  # pytest
    r"|^\s*Tests?:?\s+(?!.*failed).*\b\d+ passed\b"  # jest/vitest
    r"|\btest result: ok\b"  # cargo
    r"|^ok\s+\S+"  # go test
    r"|^PASS$"
    r"|^\d+ tests?(?:, \d+ \w+)*, 0 failures\b"  # mix
    r"|^All checks passed!?$"  # ruff
    r"|^Success: no issues found"  # mypy
    r"|^Found 0 errors?\b"  # tsc --watch, mypy
    r"|\bno (?:issues|problems|errors) (?:found|detected)\b"
    r"|\b(?:successfully|succeeded)\b"
    r"|^(?:File|Directory) created\b"
    r"|\bhas been (?:updated|edited|created|written)\b",
    re.MULTILINE | re.I,
)
"""What a tool prints when it succeeded."""
NUMBERED_LINE_RE = re.compile(r"^\s*\d+(?:→|\t| \|)")
"""A line of a file shown with its line number (a file view, whose content is not an outcome)."""


def exit_code(text: str) -> int | None:
    """The exit code the output reports (the last one), or None."""
    lowered = text.lower()
    if "exit" not in lowered and "return" not in lowered:  # every form names one of them
        return None
    found = None
    for match in EXIT_CODE_RE.finditer(text):
        found = match
    if found is None:
        return None
    return int(found.group(1) or found.group(2))


def file_view(text: str) -> bool:
    """Whether the output is a file shown with line numbers (most of its first lines numbered)."""
    lines = [ln for ln in text.splitlines()[:20] if ln.strip()]
    return len(lines) >= 3 and sum(bool(NUMBERED_LINE_RE.match(ln)) for ln in lines) * 2 > len(lines)


def output_failed(text: str) -> bool:
    """Whether a tool's output says it failed: a non-zero exit code, a traceback, a test runner's
    failures, a compiler's, linter's or type checker's error, ``make``'s or ``npm``'s error. An
    output that reports exit code 0 did not fail, whatever it printed on the way."""
    if file_view(text):
        return False
    code = exit_code(text)
    if code is not None:
        return code != 0
    if may_name_a_failure(text) and any(
        p.search(text) is not None for p in (DIAGNOSTIC_RE, FAILURE_RE, BUILD_FAILURE_RE)
    ):
        return True
    return raised(text)


FAILURE_WORDS = (
    *("fail", "FAIL", "error", "Error: ", "ERROR: ", "✖", "fatal: ", "npm ERR! ", "***"),
    *("↗", "↘", "→", "↑", "↓"),
)
"""Every line DIAGNOSTIC_RE, FAILURE_RE or BUILD_FAILURE_RE matches holds one of these (credo's
issue lines their arrow): an output with none of them is not searched with the patterns."""


def may_name_a_failure(text: str) -> bool:
    """Whether ``text`` holds a word every failure line holds (a fast test before the patterns)."""
    return any(word in text for word in FAILURE_WORDS)


TRACEBACK = "Traceback (most recent call last):"


def raised(text: str) -> bool:
    """Whether the output holds a Python traceback that ends in its exception line (a traceback
    cut short, or quoted without its exception, says nothing of this call)."""
    start = text.find(TRACEBACK)
    return start >= 0 and ERROR_LINE_RE.search(text, start + len(TRACEBACK)) is not None


def output_succeeded(text: str) -> bool:
    """Whether a tool's output says it succeeded (exit code 0, a passing summary, an all clear)."""
    code = exit_code(text)
    if code is not None:
        return code == 0
    return bool(SUCCESS_RE.search(text))


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


@remembered(lambda budget: ValueMemo(budget, text_size))
def first_informative_line(text: str) -> str:
    """The line of an error output a reader needs: an exception line, else the first line naming
    an error, else the first naming a failure, else the last substantive line (with an active
    analysis once per text)."""
    lines = []
    for raw in TAG_RE.sub("\n", ANSI_RE.sub("", text)).splitlines():
        line = raw.strip()
        if line and DECORATION_RE.sub("", line).strip():
            lines.append(line)
    useful = [ln for ln in lines if not BOILERPLATE_RE.match(ln)]
    for pattern in (DIAGNOSTIC_RE, ERROR_LINE_RE, STRONG_RE, WEAK_RE, BUILD_FAILURE_RE):
        for line in useful:
            if pattern.search(line):
                return clip_words(line, LINE_CHARS)
    banners = [ln for ln in useful if DECORATION_RE.search(ln)]
    if banners:  # a test runner's closing banner ("=== 205 deselected in 0.58s ===")
        return clip_words(DECORATION_RE.sub("", banners[-1]).strip(), LINE_CHARS)
    return clip_words((useful or lines or [""])[0], LINE_CHARS)
