"""User commands (``/compact``): a prompt that names a registered command runs it instead of a
model step, and the log records it.

:func:`run_command` appends ``command/run {command_id, name, args, source}``, awaits the handler,
then appends ``command/done {command_id, kind, text}``; neither joins the surface. Whatever the
handler appends in between carries the command's id (a manual compaction's ``compact/*`` records
and checkpoint), so the audit can say who asked for it. The handlers live above the log (the
``/compact`` one in :mod:`compaction.vocabulary.command`) and are given to the loop, or to a
framework adapter, by name.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import msgspec

from compaction.errors import error_chain
from compaction.sessions.events import CommandDone, CommandRun

if TYPE_CHECKING:
    from compaction.sessions.session import Session
    from compaction.sessions.store import SessionStore


class CommandResult(msgspec.Struct, frozen=True):
    """A command's one-line answer (``kind`` success or error) and the event it points at."""

    kind: Literal["success", "error"]
    text: str
    source_event_seq: int | None = None


@dataclass(frozen=True)
class Invocation:
    """One run of a command: what the handler is given."""

    session: Session
    store: SessionStore | None
    command_id: str
    name: str
    args: str


CommandHandler = Callable[[Invocation], Awaitable[CommandResult]]


@dataclass(frozen=True)
class Command:
    """A registered command: its handler, the text its ``command/done`` records when the run is
    cancelled, and a one-line description for listings."""

    handle: CommandHandler
    cancelled: str = "Command cancelled."
    description: str = ""


def parse_command(text: str) -> tuple[str, str] | None:
    """``("compact", "focus text")`` for ``"/compact focus text"``; None when ``text`` is not a
    slash command (it does not start with ``/`` followed by a name)."""
    stripped = text.strip()
    if not stripped.startswith("/") or len(stripped) < 2 or stripped[1].isspace():
        return None
    name, _, args = stripped[1:].partition(" ")
    return name, args.strip()


def command_for(text: str, commands: Mapping[str, Command]) -> tuple[str, str] | None:
    """The registered command ``text`` invokes (its name and arguments), or None."""
    parsed = parse_command(text)
    return parsed if parsed is not None and parsed[0] in commands else None


async def run_command(
    session: Session,
    store: SessionStore | None,
    command: Command,
    name: str,
    args: str,
    *,
    source: str = "user",
) -> CommandResult:
    """Run one command between turns, logged as ``command/run`` ... ``command/done``.

    A cancellation records ``command/done`` with the command's cancelled text and is re-raised;
    any other exception of the handler records its message the same way and propagates."""
    command_id = str(uuid.uuid4())
    session.append(CommandRun(command_id=command_id, name=name, args=args, source=source))
    _save(session, store)
    invocation = Invocation(session, store, command_id, name, args)
    try:
        result = await command.handle(invocation)
    except asyncio.CancelledError:
        _done(session, store, command_id, CommandResult("error", command.cancelled))
        raise
    except Exception as e:
        _done(session, store, command_id, CommandResult("error", error_chain(e)))
        raise
    _done(session, store, command_id, result)
    return result


def _done(session: Session, store: SessionStore | None, command_id: str, result: CommandResult) -> None:
    session.append(
        CommandDone(
            command_id=command_id,
            kind=result.kind,
            text=result.text,
            source_event_seq=result.source_event_seq,
        )
    )
    _save(session, store)


def _save(session: Session, store: SessionStore | None) -> None:
    if store is not None:
        store.save(session)
