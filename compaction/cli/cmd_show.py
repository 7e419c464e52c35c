"""``compaction show SESSION [--at SEQ] [--format openai|anthropic|text] [--log]``: the surface as the
model saw it, now or right after event SEQ.

JSON: ``{session_id, at, format, surface: [seq...], messages: [...], system}`` (``system``: the
system prompt on the latest ``request/header``, or null; the text format prints it first).
``messages`` is in the provider's shape; for ``text`` it is the OpenAI shape with a ``text``
rendering added (on the first item of each message; any further items a message expands to carry
``""``).

``tokens`` is the request total at that point, the figure ``sessions`` and ``compact`` report
(:meth:`HeuristicMeter.measure <compaction.engine.meters.Meter.measure>`, calibrated on provider usage).

``--log`` lists every event of the log instead, log-only ones included (those of plugin event
types too): ``{kind: "log", session_id, events: [{seq, type, known, fields}]}``; an event of a type
no installed package defines is listed with ``known: false`` and its stored fields, an unreadable
row with ``unreadable``: why.

``--diff A B`` compares what the model saw right after seqs A and B instead (see
:mod:`compaction.audit.diff`): ``{kind: "diff", session_id, a, b, surface_a, surface_b, removed,
added, replacements, appended}``.
"""

from __future__ import annotations

import argparse
from typing import Any

import msgspec
from rich.console import Console
from rich.text import Text

from compaction.audit.diff import render_diff, surface_diff
from compaction.audit.report import load_log
from compaction.cli.command import Command, Context, Document
from compaction.cli.output import write_json_lines, write_text
from compaction.engine.meters import HeuristicMeter
from compaction.sessions.blocks import Message
from compaction.sessions.events import UnknownEvent
from compaction.sessions.mapper import StoredRow, UnreadableRow
from compaction.sessions.render import to_anthropic, to_openai, to_text
from compaction.sessions.session import Session

SHAPES = ("text", "openai", "anthropic")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", metavar="SESSION", help="a session id or a unique prefix of one")
    parser.add_argument(
        "--at",
        type=int,
        metavar="SEQ",
        help="the surface right after event SEQ (default: after the latest event)",
    )
    parser.add_argument("--format", dest="shape", choices=SHAPES, default="text", help="message shape")
    parser.add_argument(
        "--log",
        action="store_true",
        help="every event of the log (log-only and plugin event types included), not the surface",
    )
    parser.add_argument(
        "--diff",
        type=int,
        nargs=2,
        metavar=("A", "B"),
        help="what the model saw after seq A and after seq B: shadowed spans beside their checkpoints",
    )


def run(context: Context, args: argparse.Namespace) -> Document:
    session_id = context.resolve_session(args.session)
    if args.diff:
        events = load_log(context.store, session_id).events
        return {"kind": "diff", **surface_diff(str(session_id), events, *args.diff)}
    if args.log:
        hi = None if args.at is None else args.at + 1
        rows = context.store.read_rows(session_id, 0, hi)
        return {"kind": "log", "session_id": str(session_id), "events": [log_entry(r) for r in rows]}
    session = context.store.get(session_id, at=args.at)  # a seq outside the log: StoreError
    return {
        "session_id": str(session_id),
        "at": len(session) - 1,
        "format": args.shape,
        "surface": list(session.nodes),
        "tokens": HeuristicMeter().measure(session).total_tokens,
        "messages": provider_messages(session.derive_messages(), args.shape),
        "system": _system_prompt(session),
    }


_ENVELOPE = ("seq", "time", "surface_op", "source_event_seqs")


def log_entry(row: StoredRow) -> dict[str, Any]:
    """One row of ``--log``: its seq, type, whether a class in this process knows it, fields."""
    if isinstance(row, UnreadableRow):
        return {"seq": row.seq, "type": row.type, "known": False, "unreadable": row.reason}
    if isinstance(row, UnknownEvent):
        fields = msgspec.json.decode(row.payload)
        for key in (*_ENVELOPE, "class_version"):
            fields.pop(key, None)
        return {"seq": row.seq, "type": row.event_type, "known": False, "fields": fields}
    fields = msgspec.to_builtins(row)
    for key in _ENVELOPE:
        fields.pop(key, None)
    return {"seq": row.seq, "type": row.TYPE, "known": True, "fields": fields}


def _system_prompt(session: Session) -> str | None:
    """The system prompt the latest request/header carries (what the model was given besides the
    surface), or None."""
    header = session.latest_header()
    return header.system if header is not None else None


def provider_messages(messages: list[Message], shape: str) -> list[dict[str, Any]]:
    if shape == "openai":
        return to_openai(messages)
    if shape == "anthropic":
        return to_anthropic(messages)
    rendered: list[dict[str, Any]] = []
    for message in messages:
        items = to_openai([message])
        for index, item in enumerate(items):
            item["text"] = to_text([message]) if index == 0 else ""
        rendered.extend(items)
    return rendered


def render(document: Document, console: Console) -> None:
    """The data alone on stdout (the header goes to stderr, :func:`comment`): the text rendering,
    or the messages as one JSON array, one message per line. Written message by message, straight
    to the stream (no rich layout), so a huge message costs one encoded copy at most."""
    if document.get("kind") == "diff":
        render_diff(document, console)
        return
    out = console.file
    if document.get("kind") == "log":
        for entry in document["events"]:
            detail = entry.get("unreadable") or msgspec.json.encode(entry["fields"]).decode()
            known = "" if entry["known"] else " (unknown type)"
            write_text(f"{entry['seq']:>6} {entry['type']}{known} {detail}", out)
        out.flush()
        return
    if document["format"] == "text":
        if document.get("system"):
            out.write("system prompt (request/header):\n")
            write_text(document["system"], out)
        for item in document["messages"]:
            if item["text"]:
                write_text(item["text"], out)
        out.flush()
    else:
        write_json_lines(document["messages"], out)


def comment(document: Document, err: Console) -> None:
    if document.get("kind") == "log":
        unknown = sum(1 for e in document["events"] if not e["known"])
        err.print(
            f"session {document['session_id']}: {len(document['events'])} events"
            f"{f', {unknown} of types no installed package defines' if unknown else ''}",
            style="bold",
        )
        return
    if document.get("kind") == "diff":
        return
    err.print(
        Text(
            f"session {document['session_id']} at seq {document['at']}: "
            f"{len(document['surface'])} surface nodes, {len(document['messages'])} messages, "
            f"{document['tokens']} tokens ({document['format']} format on stdout)",
            style="bold",
        ),
        soft_wrap=True,
    )


COMMAND = Command(
    name="show",
    read_only=True,
    help="the surface of a session as the model saw it",
    configure=configure,
    run=run,
    render=render,
    comment=comment,
)
