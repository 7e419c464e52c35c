"""The errors a span met: failed tool results (``is_error``, OpenHands' ``ERROR:`` text, or an
output that says it failed), each with the call's command or path and whether a later call of the
same tool on the same command or path succeeded; the harness's feedback on the agent's tool use,
with tool :data:`HARNESS_TOOL`, fixed when the agent's next call succeeded; and, in a harness
without tool calls, the observations with a non-zero ``<returncode>`` (or a traceback). The
harness's synthesized results of interrupted calls and the user's rejections are not errors."""

from __future__ import annotations

import re
from dataclasses import dataclass

from compaction.handover.calls import result_text
from compaction.handover.outcomes import STRONG_RE, first_informative_line
from compaction.handover.walk import Step, Walk

HARNESS_TOOL = "harness"
"""The ``tool`` of an error the harness reported in a user-role message (there is no call to name)."""


@dataclass(frozen=True)
class ErrorFact:
    """A failed tool result: the tool, the command or input that produced it, its first
    informative line, and whether a later call with the same command or path succeeded."""

    tool: str
    command: str
    first_line: str
    fixed: bool


def span_errors(walk: Walk) -> list[ErrorFact]:
    """The failed results and the harness's feedback in the order met, then the failed
    observations of a harness without tool calls."""
    found = sorted(_tool_errors(walk) + _feedback_errors(walk), key=lambda pair: pair[0])
    return [error for _, error in found] + _observation_errors(walk)


def _tool_errors(walk: Walk) -> list[tuple[float, ErrorFact]]:
    """The failed results by step index, each ``fixed`` when a later call of the same tool on the
    same command or path succeeded: one backward pass (the succeeded ``(tool, key)`` pairs seen so
    far), each call's key computed once."""
    failures: list[tuple[int, Step, str, bool]] = []  # newest first
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


def _feedback_errors(walk: Walk) -> list[tuple[float, ErrorFact]]:
    """The harness's feedback, placed just before the step that followed it; ``fixed`` when that
    step (the agent's retry) succeeded."""
    errors: list[tuple[float, ErrorFact]] = []
    for index, text in walk.feedback:
        after = walk.steps[index] if index < len(walk.steps) else None
        fixed = after is not None and after.result is not None and not after.failed
        errors.append((index - 0.5, ErrorFact(HARNESS_TOOL, "", first_informative_line(text), fixed)))
    return errors


def _observation_errors(walk: Walk) -> list[ErrorFact]:
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
