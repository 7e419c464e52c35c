"""``compaction audit SESSION|--all [--html PATH] [--request ID]``: re-check every compaction from
the stored log, tampered or not (see :mod:`compaction.audit` and docs/audit.md).

JSON: ``{sessions: [{session_id, events, passed, log_checks, compactions: [{compaction_id, outcome,
..., checks: [{name, passed, evidence, applies}]}]}], passed, totals}`` (plus ``html`` when a report
was written). The exit status is 1 when any check failed.

``--request COMPACTION_ID`` prints the summarization request of one compaction as it was sent,
rebuilt from the log plus the code: ``{kind: "request", session_id, compaction_id, provider, model,
shape, request, notes}``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from uuid import UUID

from rich.console import Console
from rich.text import Text

from compaction.audit.html import Limits, render_html
from compaction.audit.report import SessionAudit, audit_session, document_of, load_log, render_document
from compaction.audit.request import RebuiltRequest, find_bracket, rebuild_request
from compaction.cli.command import Command, Context, Document
from compaction.cli.output import positive_int
from compaction.errors import CompactionNotFoundError, UsageError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", nargs="?", metavar="SESSION", help="a session id or a unique prefix")
    parser.add_argument("--all", action="store_true", help="audit every session in the store")
    parser.add_argument("--html", type=Path, metavar="PATH", help="also write a self-contained HTML report")
    parser.add_argument(
        "--request", metavar="COMPACTION_ID",
        help="print the summarization request of one compaction (id or unique prefix) as it was sent",
    )
    parser.add_argument(
        "--min-ratio", type=_ratio, default=0.9, metavar="R",
        help="identifier retention required of this library's summaries (default 0.9)",
    )
    parser.add_argument(
        "--keep-first-user", action=argparse.BooleanOptionalAction, default=True,
        help="require the first user message to stay on the surface (default: required)",
    )
    parser.add_argument(
        "--window", type=positive_int, metavar="N",
        help="HTML: the context window to draw (default: the latest request/header's)",
    )
    parser.add_argument(
        "--threshold", type=_ratio, default=0.8, metavar="R", help="HTML: threshold ratio (default 0.8)"
    )
    parser.add_argument(
        "--max-tokens-field", choices=("max_tokens", "max_completion_tokens"), default="max_tokens",
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
    found: list[RebuiltRequest] = []
    full_id = len(args.request) >= 36  # a whole UUID: the first match is the only one
    with context.progress("looking for the compaction", total=len(candidates)) as advance:
        for session_id in candidates:
            rebuilt = _rebuild_in(context, session_id, args)
            advance()
            if rebuilt is not None:
                found.append(rebuilt)
                if full_id:
                    break
    if len(found) > 1:
        ids = ", ".join(f"{r.compaction_id} (session {r.session_id})" for r in found[:5])
        raise CompactionNotFoundError(
            f"compaction id prefix {args.request!r} is ambiguous: it matches {ids}; give more characters"
        )
    if found:
        return {"kind": "request", **found[0].as_json()}
    where = f"session {candidates[0]}" if args.session else f"any of the {len(candidates)} stored sessions"
    raise CompactionNotFoundError(
        f"no compaction {args.request!r} in {where}; expected a compaction id (or a unique prefix) "
        "as listed by `compaction audit SESSION`"
    )


def _rebuild_in(context: Context, session_id: UUID, args: argparse.Namespace) -> RebuiltRequest | None:
    events = load_log(context.store, session_id).events
    if find_bracket(events, args.request) is None:
        return None
    return rebuild_request(
        session_id, events, args.request,
        keep_first_user=args.keep_first_user, max_tokens_field=args.max_tokens_field,
    )


def render(document: Document, console: Console) -> None:
    if document.get("kind") == "request":
        _render_request(document, console)
        return
    render_document(document, console, verbose=bool(document.get("verbose")))
    if document.get("html"):
        console.print(Text(f"HTML report written to {document['html']}", style="bold"))


def _render_request(document: Document, console: Console) -> None:
    console.print(
        Text(
            f"compaction {document['compaction_id']} of session {document['session_id']}: "
            f"{document['shape']} request to {document['provider']}/{document['model']}",
            style="bold",
        )
    )
    for note in document["notes"]:
        console.print(Text(f"note: {note}", style="dim"))
    console.print_json(data=document["request"])


COMMAND = Command(
    name="audit",
    help="re-check every compaction of a session (or --all) from the stored log",
    configure=configure,
    run=run,
    render=render,
    exit_status=lambda document: 0 if document.get("passed", True) else 1,
)
