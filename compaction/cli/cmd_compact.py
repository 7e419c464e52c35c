"""``compaction compact SESSION``: compact now, or until the session fits under its threshold.

Strategies: ``summary`` (the default: BasicCompactService with the chosen summarizer), ``prune``
(tool-result pruning, model-free) and ``checkpoint`` (rebuild from the typed scratchpad, docs/operations.md).
``--manual`` compacts once, keeping only the newest unit; otherwise the session is compacted until its
request total is under ``--threshold`` x ``--window`` (or nothing more can be compacted).

JSON: ``{session_id, strategy, compactions: [{compaction_id, start_seq, summary_seq, end_seq,
shadowed_seqs, shadowed_tokens, summary_tokens}], pruned: [...], tokens_before, tokens_after, meter,
window, threshold, overhead_tokens, ratio, status, reason, failed_attempt, window_source}``.
``window_source`` says where the window came from (``--window``, recorded on the session's
request/header, or the known window of its model); people see it beside the window. ``tokens_*`` are the
request total as :meth:`Meter.measure <compaction.engine.meters.Meter.measure>` prices it (calibrated on the
session's provider usage when it has some): the figure ``sessions`` and ``show`` print too.
``status`` is ``under_threshold``, ``above_threshold`` or ``above_window`` (null when no window is
known); above the threshold, ``reason`` is ``{kind, message, tokens, seqs}`` with ``kind`` one of
``fixed_overhead``, ``unsplittable_unit``, ``retained_tail``, ``attempt_failed``. A compaction that
committed is always listed, even when a later attempt failed (``failed_attempt: {type, message}``).
Exit status 1 when the session is still above its context window, else 0. A window whose threshold
is not above the fixed overhead is refused before anything is written.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from typing import Any

from rich.console import Console

from compaction.cli.command import Command, Context, Document
from compaction.cli.output import positive_int, table
from compaction.cli.progress import ShowProgress
from compaction.engine.meters import HeuristicMeter, Meter, TiktokenMeter
from compaction.engine.prune import PruneConfig, prune_session
from compaction.errors import CompactionConfigError
from compaction.service import BasicCompactService
from compaction.sessions.session import Session
from compaction.strategies.checkpoint import CheckpointCompactService
from compaction.summarizers.registry import LOCAL_CONTEXT_TOKENS, SUMMARIZERS, SummarizerOptions
from compaction.vocabulary.config import COMPLETION_MODES, BasicConfig
from compaction.vocabulary.contract import CompactionResult, FitReport

DEFAULT_MAX_TOKENS = 8192


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", metavar="SESSION", help="session id or a unique prefix")
    parser.add_argument(
        "--strategy", choices=("summary", "prune", "checkpoint"), default="summary",
        help="summary (default): replace old history with a checkpoint summary (--summarizer); "
        "prune: shorten oversized tool results, no model; checkpoint: rebuild the context from the "
        "typed state the harness recorded (--instruction)",
    )  # fmt: skip
    parser.add_argument(
        "--window", type=positive_int, metavar="N",
        help="context window in tokens (default: recorded on the session's request/header, else the "
        "known window of its model; the output names the one used)",
    )  # fmt: skip
    parser.add_argument(
        "--threshold",
        type=float,
        metavar="R",
        help="threshold ratio (default: the --config file's policy for the session's model, else 0.8)",
    )
    parser.add_argument(
        "--retain-tokens", type=int, metavar="N", help="tokens of recent history kept verbatim"
    )
    parser.add_argument(
        "--summarizer",
        choices=SUMMARIZERS.names(),
        default="template",
        help="; ".join(f"{spec.name}: {spec.help}" for spec in SUMMARIZERS),
    )
    parser.add_argument("--base-url", metavar="URL", help="provider base URL (openai, anthropic)")
    parser.add_argument("--model", metavar="M", help="summarization model name (or a GGUF path for local)")
    parser.add_argument(
        "--summarizer-window",
        type=positive_int,
        metavar="N",
        help=f"the summarizer's own context window in tokens: larger spans are summarized in chunks "
        f"(local: the server's context, default {LOCAL_CONTEXT_TOKENS}; openai, anthropic: none)",
    )
    parser.add_argument(
        "--digest",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="send the span as a digest that fits an input budget: one model request per "
        "compaction, whatever the span's size (tool output cut to head and tail lines, older turns "
        "elided, the user's messages kept; the completion restores what the summary missed). "
        "Default: on for local (its window's room), off for openai and anthropic",
    )
    parser.add_argument(
        "--digest-tokens",
        type=positive_int,
        metavar="N",
        help="the digest's input budget in the summarizer's tokens (implies --digest; default: "
        "what one request of --summarizer-window leaves after the instruction and --max-tokens)",
    )
    parser.add_argument(
        "--completion",
        choices=COMPLETION_MODES,
        default="appendix",
        help="what the summary missed, before the fidelity gate: appendix (default, verbatim "
        "references appended), repair (one more model request), both, or off",
    )
    parser.add_argument(
        "--max-tokens",
        type=positive_int,
        metavar="N",
        help=f"generation cap (default {DEFAULT_MAX_TOKENS}; {_capped()})",
    )
    parser.add_argument(
        "--min-ratio",
        type=float,
        default=0.9,
        metavar="R",
        help="fidelity gate: identifier retention required (default 0.9)",
    )
    parser.add_argument(
        "--meter", choices=("heuristic", "tiktoken"), default="heuristic",
        help="how request tokens are counted: heuristic (default, characters per token, calibrated "
        "on the session's provider usage when it has some) or tiktoken (OpenAI's tokenizer)",
    )  # fmt: skip
    parser.add_argument("--manual", action="store_true", help="compact once, keeping only the newest unit")
    parser.add_argument(
        "--instruction",
        default="Continue with the next phase.",
        help="checkpoint strategy: the next instruction after the rebuilt state",
    )


def run(context: Context, args: argparse.Namespace) -> Document:
    store = context.store
    session = store.get(context.resolve_session(args.session))
    meter: Meter = TiktokenMeter() if args.meter == "tiktoken" else HeuristicMeter()
    before = meter.measure(session).total_tokens
    base = context.settings.config_for(session) if context.settings is not None else None
    results, pruned, report = asyncio.run(_compact(session, args, context, meter, base))
    if report is None:
        report = _report(session, args, meter, results, before, base=base)
    return {
        "session_id": str(session.id),
        "strategy": args.strategy,
        "compactions": [_result_json(r) for r in results],
        "pruned": pruned,
        "tokens_before": before,
        "tokens_after": meter.measure(session).total_tokens,
        "meter": meter.name,
        **_fit_json(report),
        "window_source": _window_source(session, args, meter),
    }


def _window_source(session: Session, args: argparse.Namespace, meter: Meter) -> str | None:
    """Where the window came from (``--window``, the session's header, the model's known window);
    None when none is known."""
    if args.window is not None:
        return "given with --window"
    try:
        return BasicCompactService(_config(args), meter=meter).window_and_source(session)[1]
    except CompactionConfigError:
        return None


def _report(
    session: Session,
    args: argparse.Namespace,
    meter: Meter,
    results: list[CompactionResult],
    before: int,
    *,
    base: BasicConfig | None = None,
) -> FitReport | None:
    """Where the session ended, for the strategies that do not aim at the threshold themselves;
    None when no context window is known for it."""
    service = BasicCompactService(_config(args, base), meter=meter)
    try:
        window = service.context_window(session)
    except CompactionConfigError:
        return None
    return service.fit_report(session, window, compactions=results, tokens_before=before)


def _fit_json(report: FitReport | None) -> dict[str, Any]:
    if report is None:
        return {
            "window": None, "threshold": None, "overhead_tokens": None, "ratio": None,
            "status": None, "reason": None, "failed_attempt": None,
        }  # fmt: skip
    shortfall = report.shortfall
    failure = report.failure
    return {
        "window": report.window,
        "threshold": report.threshold,
        "overhead_tokens": report.overhead_tokens,
        "ratio": round(report.ratio, 4),
        "status": report.status,
        "reason": None
        if shortfall is None
        else {
            "kind": shortfall.reason,
            "message": shortfall.message,
            "tokens": shortfall.tokens,
            "seqs": list(shortfall.seqs),
        },
        "failed_attempt": None
        if failure is None
        else {"type": type(failure).__name__, "message": str(failure)},
    }


def exit_status(document: Document) -> int:
    """1 when the session is still above its context window (the reason is in the document)."""
    return 1 if document.get("status") == "above_window" else 0


async def _compact(
    session: Session,
    args: argparse.Namespace,
    context: Context,
    meter: Meter,
    base: BasicConfig | None = None,
) -> tuple[list[CompactionResult], list[dict[str, Any]], FitReport | None]:
    store = context.store
    if args.strategy == "prune":
        pruner = context.settings.pruner if context.settings is not None else PruneConfig()
        report = prune_session(session, meter, pruner, store=store)
        return (
            [],
            [
                {
                    "original_seq": p.original_seq,
                    "replacement_seq": p.replacement_seq,
                    "call_id": p.call_id,
                    "chars_before": p.chars_before,
                    "chars_after": p.chars_after,
                }
                for p in report.pruned
            ],
            None,
        )
    config = _config(args, base)
    if args.strategy == "checkpoint":
        result = await CheckpointCompactService(config, meter=meter).compact_now(
            session, store=store, next_instruction=args.instruction
        )
        return ([result] if result else []), [], None
    options = SummarizerOptions(
        base_url=args.base_url,
        model=args.model,
        window_tokens=args.summarizer_window,
        digest=args.digest,
        digest_tokens=args.digest_tokens,
        abandon_on_cancel=True,  # Ctrl-C ends the process at once (compaction.cli.main)
    )
    async with SUMMARIZERS.open(args.summarizer, options) as opened:
        summarizer = opened if args.summarizer == "template" else ShowProgress(opened, context.err)
        service = BasicCompactService(config, summarizer=summarizer, meter=meter)
        if args.manual:
            result = await service.compact_now(session, store=store)
            return ([result] if result else []), [], None
        fit = await service.compact_to_fit(session, store=store)
        return list(fit.compactions), [], fit


def _config(args: argparse.Namespace, base: BasicConfig | None = None) -> BasicConfig:
    """The options given on the command line over ``base`` (the ``--config`` file's policy for the
    session's model), or over the defaults."""
    if base is not None:
        return _over_file(args, base)
    values: dict[str, Any] = {
        "threshold_ratio": 0.8 if args.threshold is None else args.threshold,
        "max_tokens": args.max_tokens
        or SUMMARIZERS.get(args.summarizer).default_max_tokens
        or DEFAULT_MAX_TOKENS,
        "min_identifier_ratio": args.min_ratio,
        "completion": args.completion,
    }
    if args.window is not None:
        values["context_window"] = args.window
    if args.retain_tokens is not None:
        values["retain_tokens"] = args.retain_tokens
    return BasicConfig(**values)


def _over_file(args: argparse.Namespace, base: BasicConfig) -> BasicConfig:
    values: dict[str, Any] = {
        "min_identifier_ratio": args.min_ratio,
        "completion": args.completion,
    }
    if args.threshold is not None:
        values["threshold_ratio"] = args.threshold
    if args.max_tokens:
        values["max_tokens"] = args.max_tokens
    if args.window is not None:
        values["context_window"] = args.window
    if args.retain_tokens is not None:
        values.update(retain_tokens=args.retain_tokens, retain_ratio=None)
    return dataclasses.replace(base, **values)


def _capped() -> str:
    """The summarizers with a cap of their own, for the help text."""
    capped = [
        f"{spec.default_max_tokens} with --summarizer {spec.name}"
        for spec in SUMMARIZERS
        if spec.default_max_tokens
    ]
    return "; ".join(capped) or "the same for every summarizer"


def _result_json(result: CompactionResult) -> dict[str, Any]:
    return {
        "compaction_id": result.compaction_id,
        "start_seq": result.start_seq,
        "summary_seq": result.summary_seq,
        "replacement_seq": result.replacement_seq,
        "end_seq": result.end_seq,
        "shadowed_seqs": list(result.shadowed_seqs),
        "shadowed_tokens": result.shadowed_token_count,
        "summary_tokens": result.summary_token_count,
    }


def render(document: Document, console: Console) -> None:
    rows = [
        [
            c["compaction_id"],
            c["start_seq"],
            c["end_seq"],
            len(c["shadowed_seqs"]),
            c["shadowed_tokens"],
            c["summary_tokens"],
        ]
        for c in document["compactions"]
    ]
    if rows:
        console.print(
            table(
                f"compactions of {document['session_id']}",
                (
                    "compaction",
                    "start",
                    "end",
                    "shadowed nodes",
                    "shadowed tokens",
                    "summary tokens",
                ),
                rows,
            )
        )
    if document["pruned"]:
        console.print(f"pruned {len(document['pruned'])} tool results", markup=False)
    if not rows and not document["pruned"]:
        console.print("nothing to compact", markup=False)
    console.print(
        f"tokens before {document['tokens_before']} -> after {document['tokens_after']} "
        f"({document['meter']})",
        markup=False,
    )
    if document.get("window") is not None:
        console.print(
            f"context window {document['window']:,} ({document.get('window_source') or 'given'}), "
            f"threshold {document['threshold']:,}: {document['status'].replace('_', ' ')}",
            markup=False,
        )
    reason = document.get("reason")
    if reason is not None:  # the message starts with the total and the limit it is above
        console.print(f"{reason['message']} ({reason['kind'].replace('_', ' ')})", markup=False)


COMMAND = Command(
    name="compact",
    read_only=True,  # compacts stored sessions: a store that does not exist is refused, not created
    help="compact a session now or until it fits",
    configure=configure,
    run=run,
    render=render,
    exit_status=exit_status,
)
