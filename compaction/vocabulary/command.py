"""The ``/compact`` command: a manual compaction asked for by the user, answered in one line.

:func:`compact_command` makes the handler the agent loop (``AgentLoop(commands=...)``) and the
framework adapters register under the name ``compact``; :func:`handle_compact` is the same thing
as one call for an adapter that has the session, the store and the user's text in hand::

    result = await handle_compact(service, session, store, text)   # None: text is not /compact

Either way the log holds ``command/run``, the compaction's records carrying the command's id, then
``command/done`` with the answer (:mod:`compaction.sessions.commands`).
"""

from __future__ import annotations

import asyncio

from compaction.errors import (
    BusyError,
    CommitError,
    CompactionError,
    StoreError,
    SurfaceChangedError,
)
from compaction.sessions.commands import (
    Command,
    CommandResult,
    Invocation,
    command_for,
    run_command,
)
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.vocabulary.contract import CompactService

NAME = "compact"
DESCRIPTION = "Compact older conversation history"
USAGE = "Usage: /compact (no arguments)"
USAGE_WITH_FOCUS = "Usage: /compact [focus for the summary]"
NOTHING = "No compactable history yet."

FAILURES: dict[str, str] = {
    "busy": "Compaction is unavailable because this process has an active compaction, or the "
    "agent is not idle.",
    "cancelled": "Compaction cancelled.",
    "changed": "The history selected for compaction changed before it could be replaced. The "
    "conversation is unchanged; the attempt is recorded in the session log.",
    "summary": "Compaction could not produce a useful summary. The conversation is unchanged; "
    "the attempt is recorded in the session log.",
    "commit": "Compaction did not finish cleanly; some session history may have changed. "
    "Inspect the current session state before retrying.",
    "persistence": "Compaction finished, but the session could not be saved.",
}
"""The answer to each failure of a manual compaction, by code."""


def compacted(items: int, tokens: int) -> str:
    return f"Compacted {items} history items (~{tokens} tokens)."


def failure_code(error: BaseException) -> str | None:
    """The manual-compaction failure code of ``error`` (None: not a compaction failure, it
    propagates). A commit conflict is ``commit``; a store that refused a save outside the commit,
    ``persistence``; any other compaction error (the summarizer, the shrink check, the fidelity
    gate) is ``summary``."""
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    if isinstance(error, BusyError):
        return "busy"
    if isinstance(error, SurfaceChangedError):
        return "changed"
    if isinstance(error, CommitError):
        return "commit"
    if isinstance(error, StoreError):
        return "persistence"
    if isinstance(error, CompactionError):
        return "summary"
    return None


def compact_command(service: CompactService, *, custom_instructions: bool = False) -> Command:
    """The ``/compact`` handler over ``service``. With ``custom_instructions`` the arguments are
    the summarization focus (recorded on the ``compact/start``); without, any argument is refused
    with :data:`USAGE` before the service is called."""

    async def handle(invocation: Invocation) -> CommandResult:
        if invocation.args and not custom_instructions:
            return CommandResult("error", USAGE)
        try:
            result = await service.compact_now(
                invocation.session,
                store=invocation.store,
                source_command_id=invocation.command_id,
                focus=invocation.args or None,
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:
            code = failure_code(e)
            if code is None:
                raise
            return CommandResult("error", FAILURES[code])
        if result is None:
            return CommandResult("success", NOTHING)
        return CommandResult(
            "success",
            compacted(len(result.shadowed_seqs), result.shadowed_token_count),
            result.summary_seq,
        )

    return Command(handle, cancelled=FAILURES["cancelled"], description=DESCRIPTION)


async def handle_compact(
    service: CompactService,
    session: Session,
    store: SessionStore | None,
    text: str,
    *,
    custom_instructions: bool = False,
) -> CommandResult | None:
    """Run ``text`` as the ``/compact`` command when it is one (None otherwise: send it to the
    model). A cancellation is recorded (``command/done`` with the error) and re-raised."""
    commands = {NAME: compact_command(service, custom_instructions=custom_instructions)}
    found = command_for(text, commands)
    if found is None:
        return None
    name, args = found
    return await run_command(session, store, commands[name], name, args)
