"""The summarization instruction and the checkpoint framing (docs/compaction.md).

This module is the one place the instruction text lives: every summarizer sends it, the fidelity gate
checks its eight sections, and the audit rebuilds requests from it.
"""

from __future__ import annotations

SECTIONS: tuple[str, ...] = (
    "Primary Request and Intent",
    "Key Technical Concepts",
    "Files and Code",
    "Errors and Fixes",
    "Pending Jobs",
    "Current Work",
    "Next Step",
    "Critical Context",
)

_GUIDANCE: dict[str, str] = {
    "Primary Request and Intent": "The user's explicit requests and intent, quoted where possible.",
    "Key Technical Concepts": "Technologies, frameworks, and concepts that matter for the work.",
    "Files and Code": "Exact file paths examined or changed, with what changed and why.",
    "Errors and Fixes": "Exact error strings met and how each was fixed or left.",
    "Pending Jobs": "Tasks asked for and not yet done, including unanswered tool calls.",
    "Current Work": "What was being worked on immediately before this checkpoint.",
    "Next Step": "The next action that follows directly from the most recent work.",
    "Critical Context": "Commands, identifiers, values, and constraints needed to continue.",
}

INSTRUCTION_PLUGIN = "compaction-basic"

INSTRUCTION: str = "\n".join(
    [
        "You are now acting as a compaction engine for this AI coding assistant. Condense the "
        "conversation ABOVE into a structured checkpoint that lets another model resume the work "
        "with no loss of essential context.",
        "",
        "Output exactly the Markdown structure below, every section in order. Use terse bullets, "
        'not prose. Write "(none)" for an empty section; never drop a section.',
        "",
        *(line for name in SECTIONS for line in (f"## {name}", f"- [{_GUIDANCE[name]}]", "")),
        "Rules:",
        "- Write concise English engineering prose. Preserve exact file paths, commands, error "
        "strings, identifiers, numeric values, function signatures, and syntax fragments.",
        "- Capture user feedback and explicit instructions faithfully, especially corrections.",
        "- Do not mention the summarization request or that context was compacted.",
        "- Output only the checkpoint text; do not call any tool.",
        "- If the conversation already contains a <compacted-summary> block, it is a prior "
        "checkpoint: do not copy it verbatim; keep still-true facts, drop stale ones, and merge "
        "everything into one consolidated summary under the same structure.",
    ]
)

PREAMBLE = (
    "This is an automatically generated checkpoint condensing an earlier span of the conversation "
    "to free up context. Treat the captured context as established background and build on it "
    "without restating it. Continue the task directly from the messages that follow, without "
    "acknowledging this checkpoint."
)
OPEN_TAG = "<compacted-summary>"
CLOSE_TAG = "</compacted-summary>"

FOCUS_LEAD = "Additional focus requested by the user for this checkpoint (keep the structure above):"


def instruction_with_focus(focus: str | None) -> str:
    """The instruction, followed by the user's focus when one was given (``/compact <focus>``,
    recorded on the ``compact/start`` so the audit rebuilds the same request)."""
    if not focus:
        return INSTRUCTION
    return f"{INSTRUCTION}\n\n{FOCUS_LEAD}\n{focus}"
