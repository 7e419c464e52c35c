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
from itertools import pairwise

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
WRAPPER_RE = re.compile(r"^\s*<(tool_use_error|error)>\s*")
"""A harness's error wrapper (Claude Code's ``<tool_use_error>``): its first line is the message."""
ECHO_LABEL_RE = re.compile(
    r"^(?:String|Pattern|Type|Got|Expected|Received|Input|Value|code|left|right|arguments?"
    r"|old_str(?:ing)?|new_str(?:ing)?|The following arguments were given to .+)\s*:"
)
"""A label under which a tool or the harness echoes input or data back (Claude Code's ``String:``
of an Edit, dialyzer's ``Pattern:`` and ``Type:``, ExUnit's ``code:``, ``left:``, ``right:`` and
its arguments): the labelled line and the lines up to the next blank line are echoed text."""
WARNING_HEADER_RE = re.compile(r"^[^\s:]+\.[A-Za-z]+:\d+(?::\d+)?:[a-z][a-z_]+$")
"""A checker's warning header whose sentence is on the next line (dialyzer's
``lib/app/otel.ex:23:pattern_match`` then ``The pattern can never match the type.``)."""
WORD_RE = re.compile(r"[A-Za-z]{2,}")
DUMP_RE = re.compile(r"^(?:[\[{%]|[\w.]+\{)|[{\[][^}\]]*[{\[]")
"""The start of a data dump (a list, map or struct printed back) or two nested brackets."""


@remembered(lambda budget: ValueMemo(budget, text_size))
def first_informative_line(text: str) -> str:
    """The line of an error output a reader needs (with an active analysis once per text).

    A harness's error wrapper says it on its first line. Otherwise, of the lines that are not
    echoed back (:data:`ECHO_LABEL_RE`): a diagnostic, an exception line, a warning header with
    its sentence, else the first sentence naming an error, else one naming a failure; only when no
    sentence does, a shorter line naming one (never a bare token such as ``:error``); else the last
    substantive line."""
    wrapped = WRAPPER_RE.match(text)
    if wrapped is not None:
        message = _lines(text[wrapped.end() :])
        if message and readable(message[0]):
            return clip_words(message[0], LINE_CHARS)
    lines = _lines(text)
    useful = [ln for ln in _not_echoed(lines) if not BOILERPLATE_RE.match(ln)]
    for pattern in (DIAGNOSTIC_RE, ERROR_LINE_RE):
        for line in useful:
            if pattern.search(line):
                return clip_words(line, LINE_CHARS)
    warned = _warning(useful)
    if warned:
        return clip_words(warned, LINE_CHARS)
    named = [ln for ln in useful if not bare(ln)]
    for lines_of in ([ln for ln in named if readable(ln)], named):
        for pattern in (STRONG_RE, WEAK_RE, BUILD_FAILURE_RE):
            for line in lines_of:
                if pattern.search(line):
                    return clip_words(line, LINE_CHARS)
    banners = [ln for ln in useful if DECORATION_RE.search(ln)]
    if banners:  # a test runner's closing banner ("=== 205 deselected in 0.58s ===")
        return clip_words(DECORATION_RE.sub("", banners[-1]).strip(), LINE_CHARS)
    said = [ln for ln in useful if readable(ln)]
    return clip_words((said or useful or lines or [""])[0], LINE_CHARS)


def _lines(text: str) -> list[str]:
    """The output's stripped lines without tags, terminal codes and pure decoration; an empty
    string stands for a blank line (where an echoed block ends)."""
    lines: list[str] = []
    for raw in TAG_RE.sub("\n", ANSI_RE.sub("", text)).splitlines():
        line = raw.strip()
        if not line:
            if lines and lines[-1]:
                lines.append("")
        elif DECORATION_RE.sub("", line).strip():
            lines.append(line)
    return lines


def _not_echoed(lines: list[str]) -> list[str]:
    """The lines outside echoed blocks (a label of :data:`ECHO_LABEL_RE` up to a blank line)."""
    kept: list[str] = []
    echoing = False
    for line in lines:
        if not line:
            echoing = False
        elif ECHO_LABEL_RE.match(line):
            echoing = True
        elif not echoing:
            kept.append(line)
    return kept


def _warning(lines: list[str]) -> str:
    """A warning header and its sentence (``lib/a.ex:23:pattern_match: The pattern can ...``)."""
    for header, after in pairwise(lines):
        if WARNING_HEADER_RE.match(header) and readable(after):
            return f"{header}: {after}"
    return ""


def bare(line: str) -> bool:
    """Whether a line is a bare token or a data dump (``:error``, ``error``, ``[do: %Plug.Conn{...``),
    not something a reader understands without the output."""
    return len(WORD_RE.findall(line)) < 2 or DUMP_RE.search(line) is not None


def readable(line: str) -> bool:
    """Whether a line reads as a sentence: three words or more, mostly letters, no data dump."""
    words = WORD_RE.findall(line)
    letters = sum(map(len, words))
    return len(words) >= 3 and letters * 2 >= len(line.replace(" ", "")) and not bare(line)
