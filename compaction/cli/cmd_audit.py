"""``compaction audit SESSION|--all [--html PATH] [--request ID]``: re-check every compaction from
the stored log, tampered or not (see :mod:`compaction.audit` and docs/audit.md).

JSON: ``{sessions: [{session_id, events, passed, log_checks, compactions: [{compaction_id, outcome,
..., checks: [{name, passed, evidence, applies}]}]}], passed, totals}`` (plus ``html`` when a report
was written). The exit status is 1 when any check failed.

``--request COMPACTION_ID`` prints the summarization request of one compaction as it was sent,
rebuilt from the log plus the code: ``{kind: "request", session_id, compaction_id, provider, model,
shape, request, digest, notes}``. ``digest`` is the recorded digest when the span was sent as one
(``compact/summary.digest``; the request is then the digested one), else null.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from uuid import UUID

from rich.console import Console
from rich.text import Text

from compaction.audit.html import Limits, render_html
from compaction.audit.report import SessionAudit, audit_session, document_of, load_log, render_document
from compaction.audit.request import RebuiltRequest, find_bracket, rebuild_request
from compaction.cli.command import Command, Context, Document
from compaction.cli.output import positive_int, write_json_value
from compaction.errors import CompactionNotFoundError, UsageError
from compaction.sessions.events import SessionEvent
from compaction.vocabulary.events import CompactPrune

PRUNE_PREFIX = "prune-"
"""The audit lists a ``compact/prune`` record as ``prune-SEQ`` (see ``compaction.audit.checks``)."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", nargs="?", metavar="SESSION", help="a session id or a unique prefix")
    parser.add_argument("--all", action="store_true", help="audit every session in the store")
    parser.add_argument("--html", type=Path, metavar="PATH", help="also write a self-contained HTML report")
    parser.add_argument(
        "--request",
        metavar="COMPACTION_ID",
        help="print the summarization request of one compaction (id or unique prefix) as it was sent",
    )
    parser.add_argument(
        "--min-ratio",
        type=_ratio,
        default=0.9,
        metavar="R",
        help="identifier retention required of this library's summaries (default 0.9)",
    )
    parser.add_argument(
        "--keep-first-user",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="require the first user message to stay on the surface (default: required)",
    )
    parser.add_argument(
        "--window",
        type=positive_int,
        metavar="N",
        help="HTML: the context window to draw (default: the latest request/header's)",
    )
    parser.add_argument(
        "--threshold", type=_ratio, default=0.8, metavar="R", help="HTML: threshold ratio (default 0.8)"
    )
    parser.add_argument(
        "--max-tokens-field",
        choices=("max_tokens", "max_completion_tokens"),
        default="max_tokens",
        help="--request, OpenAI-compatible providers: how max_tokens was spelled",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print every check's evidence")


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def run(context: Context, args: argparse.Namespace) -> Document:
    if args.request:
        return _request(context, args)
    if bool(args.all) == bool(args.session):
        raise UsageError("audit: expected either SESSION or --all (not both, not neither)")
    ids = context.store.session_ids() if args.all else [context.resolve_session(args.session)]
    audits: list[SessionAudit] = []
    documents: list[Document] = []
    with context.progress("auditing sessions", total=len(ids)) as advance:
        for session_id in ids:
            audit = audit_session(
                context.store, session_id, min_ratio=args.min_ratio, keep_first_user=args.keep_first_user
            )
            documents.append(audit.as_json())
            if args.html:
                audits.append(audit)  # the report needs the events; otherwise let them go
            advance()
    document = document_of(documents)
    if args.html:
        limits = Limits(args.window, args.threshold)
        args.html.parent.mkdir(parents=True, exist_ok=True)
        args.html.write_text(render_html(audits, limits=limits), encoding="utf-8")
        document["html"] = str(args.html)
    if args.verbose:
        document["verbose"] = True
    return document


def _request(context: Context, args: argparse.Namespace) -> Document:
    if args.all:
        raise UsageError("audit: --request takes one compaction id; it cannot be combined with --all")
    store = context.store
    candidates = [context.resolve_session(args.session)] if args.session else store.session_ids()
    found: list[Document] = []
    full_id = len(args.request) >= 36  # a whole UUID: the first match is the only one
    with context.progress("looking for the compaction", total=len(candidates)) as advance:
        for session_id in candidates:
            rebuilt = _request_in(context, session_id, args)
            advance()
            if rebuilt is not None:
                found.append(rebuilt)
                if full_id:
                    break
    if len(found) > 1:
        ids = ", ".join(f"{r['compaction_id']} (session {r['session_id']})" for r in found[:5])
        raise CompactionNotFoundError(
            f"compaction id {args.request!r} is ambiguous: it matches {ids}; give more characters "
            "of the id, or the SESSION it belongs to"
        )
    if found:
        return {"kind": "request", **found[0]}
    where = f"session {candidates[0]}" if args.session else f"any of the {len(candidates)} stored sessions"
    raise CompactionNotFoundError(
        f"no compaction {args.request!r} in {where}; expected a compaction id (or a unique prefix) "
        "as listed by `compaction audit SESSION`"
    )


def _request_in(context: Context, session_id: UUID, args: argparse.Namespace) -> Document | None:
    """The request of compaction ``args.request`` in this session, or None when it has none by
    that id. Every id ``audit`` lists is found: a bracket's id (or a unique prefix of it), or
    ``prune-SEQ`` for a tool-result pruning."""
    events = load_log(context.store, session_id).events
    pruning = _pruning(events, args.request)
    if pruning is not None:
        return _pruning_request(session_id, pruning, events)
    if find_bracket(events, args.request) is None:
        return None
    rebuilt: RebuiltRequest = rebuild_request(
        session_id,
        events,
        args.request,
        keep_first_user=args.keep_first_user,
        max_tokens_field=args.max_tokens_field,
    )
    return rebuilt.as_json()


def _pruning(events: Sequence[SessionEvent], compaction_id: str) -> CompactPrune | None:
    """The ``compact/prune`` record the audit lists as ``prune-SEQ`` (its own seq), if that is it."""
    prefix, _, seq = compaction_id.partition(PRUNE_PREFIX)
    if prefix or not seq.isdecimal() or int(seq) >= len(events):
        return None
    event = events[int(seq)]
    return event if isinstance(event, CompactPrune) else None


def _pruning_request(session_id: UUID, pruning: CompactPrune, events: Sequence[SessionEvent]) -> Document:
    """A pruning sends no request: the document says so, and what the pruning rewrote."""
    following = pruning.seq + 1
    rewritten = ", ".join(map(str, pruning.shadowed_seqs))
    at = f" at seq {following}" if following < len(events) else ""
    return {
        "session_id": str(session_id),
        "compaction_id": f"{PRUNE_PREFIX}{pruning.seq}",
        "start_seq": pruning.seq,
        "provider": None,
        "model": None,
        "shape": "none",
        "request": None,
        "digest": None,
        "notes": [
            f"{PRUNE_PREFIX}{pruning.seq} is a tool-result pruning (compact/prune seq {pruning.seq}): it "
            f"rewrote the content of seq {rewritten}{at} without a model, so no summarization "
            f"request was sent ({pruning.chars_before} -> {pruning.chars_after} characters)"
        ],
    }


def render(document: Document, console: Console) -> None:
    if document.get("kind") == "request":
        _render_request(document, console)
        return
    render_document(document, console, verbose=bool(document.get("verbose")))


def _render_request(document: Document, console: Console) -> None:
    """The request alone, as JSON (``> request.json`` writes a valid file): ``null`` for a pruning."""
    write_json_value(document["request"], console.file)


def comment(document: Document, err: Console) -> None:
    """On stderr: which request stdout holds and what the log could not tell; where the HTML went."""
    if document.get("kind") == "request":
        sent = (
            f"{document['shape']} request to {document['provider']}/{document['model']}"
            if document["request"] is not None
            else "no request (none was sent)"
        )
        digest = document.get("digest")
        if digest:
            sent += (
                f", the span as a digest of {digest['messages']} of its {digest['source_messages']} "
                "messages (see the notes)"
            )
        err.print(
            Text(f"compaction {document['compaction_id']} of session {document['session_id']}: {sent}",
                 style="bold"),
            soft_wrap=True,
        )  # fmt: skip
        for note in document["notes"]:
            err.print(Text(f"note: {note}", style="dim"), soft_wrap=True)
    elif document.get("html"):
        err.print(Text(f"HTML report written to {document['html']}", style="bold"), soft_wrap=True)


COMMAND = Command(
    name="audit",
    read_only=True,
    help="re-check every compaction of a session (or --all) from the stored log",
    configure=configure,
    run=run,
    render=render,
    comment=comment,
    exit_status=lambda document: 0 if document.get("passed", True) else 1,
)
