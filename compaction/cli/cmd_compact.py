"""``compaction compact SESSION``: compact now, or until the session fits under its threshold.

Strategies: ``summary`` (the default: BasicCompactService with the chosen summarizer), ``prune``
(tool-result pruning, model-free) and ``checkpoint`` (rebuild from the typed scratchpad, seed 002).
``--manual`` compacts once, keeping only the newest unit; otherwise the session is compacted until its
request total is under ``--threshold`` x ``--window`` (or nothing more can be compacted).

JSON: ``{session_id, strategy, compactions: [{compaction_id, start_seq, summary_seq, end_seq,
shadowed_seqs, shadowed_tokens, summary_tokens}], pruned: [...], tokens_before, tokens_after}``.
"""

from __future__ import annotations

import argparse
import asyncio
from contextlib import AsyncExitStack
from typing import Any

from rich.console import Console

from compaction.basic import BasicCompactService
from compaction.cli.command import Command, Context, Document
from compaction.cli.output import positive_int, table
from compaction.config import BasicConfig
from compaction.contract import CompactionResult
from compaction.errors import CompactionConfigError
from compaction.meters import HeuristicMeter, Meter, TiktokenMeter
from compaction.sessions.session import Session
from compaction.strategies.checkpoint import CheckpointCompactService
from compaction.strategies.prune import PruneConfig, prune_session
from compaction.summarizers.base import Summarizer
from compaction.summarizers.template import TemplateSummarizer

SUMMARIZERS = ("template", "openai", "anthropic", "local")
LOCAL_MAX_TOKENS = 512


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", metavar="SESSION", help="session id or a unique prefix")
    parser.add_argument("--strategy", choices=("summary", "prune", "checkpoint"), default="summary")
    parser.add_argument("--window", type=positive_int, metavar="N", help="context window in tokens")
    parser.add_argument(
        "--threshold", type=float, default=0.8, metavar="R", help="threshold ratio (default 0.8)"
    )
    parser.add_argument(
        "--retain-tokens", type=int, metavar="N", help="tokens of recent history kept verbatim"
    )
    parser.add_argument("--summarizer", choices=SUMMARIZERS, default="template")
    parser.add_argument("--base-url", metavar="URL", help="provider base URL (openai, anthropic)")
    parser.add_argument("--model", metavar="M", help="summarization model name (or a GGUF path for local)")
    parser.add_argument(
        "--max-tokens",
        type=positive_int,
        metavar="N",
        help=f"generation cap (default 8192; {LOCAL_MAX_TOKENS} with --summarizer local)",
    )
    parser.add_argument(
        "--min-ratio",
        type=float,
        default=0.9,
        metavar="R",
        help="fidelity gate: identifier retention required (default 0.9)",
    )
    parser.add_argument("--meter", choices=("heuristic", "tiktoken"), default="heuristic")
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
    results, pruned = asyncio.run(_compact(session, args, context, meter))
    return {
        "session_id": str(session.id),
        "strategy": args.strategy,
        "compactions": [_result_json(r) for r in results],
        "pruned": pruned,
        "tokens_before": before,
        "tokens_after": meter.measure(session).total_tokens,
        "meter": meter.name,
    }


async def _compact(
    session: Session, args: argparse.Namespace, context: Context, meter: Meter
) -> tuple[list[CompactionResult], list[dict[str, Any]]]:
    store = context.store
    if args.strategy == "prune":
        report = prune_session(session, meter, PruneConfig(), store=store)
        return [], [
            {
                "original_seq": p.original_seq,
                "replacement_seq": p.replacement_seq,
                "call_id": p.call_id,
                "chars_before": p.chars_before,
                "chars_after": p.chars_after,
            }
            for p in report.pruned
        ]
    config = _config(args)
    if args.strategy == "checkpoint":
        result = await CheckpointCompactService(config, meter=meter).compact_now(
            session, store=store, next_instruction=args.instruction
        )
        return ([result] if result else []), []
    async with AsyncExitStack() as stack:
        summarizer = await _summarizer(args, stack)
        service = BasicCompactService(config, summarizer=summarizer, meter=meter)
        if args.manual:
            result = await service.compact_now(session, store=store)
            return ([result] if result else []), []
        return await service.compact_to_threshold(session, store=store), []


def _config(args: argparse.Namespace) -> BasicConfig:
    values: dict[str, Any] = {
        "threshold_ratio": args.threshold,
        "max_tokens": args.max_tokens or (LOCAL_MAX_TOKENS if args.summarizer == "local" else 8192),
        "min_identifier_ratio": args.min_ratio,
    }
    if args.window is not None:
        values["context_window"] = args.window
    if args.retain_tokens is not None:
        values["retain_tokens"] = args.retain_tokens
    return BasicConfig(**values)


async def _summarizer(args: argparse.Namespace, stack: AsyncExitStack) -> Summarizer:
    if args.summarizer == "template":
        return TemplateSummarizer()
    if args.summarizer == "local":
        from compaction.summarizers.chunking import ChunkingSummarizer
        from compaction.summarizers.local import LocalModelServer, checkpoint_grammar

        # A grammar holds the small embedded model to the eight-section checkpoint structure, short
        # enough (8 one-line bullets of <= 40 characters) that it always ends under the default cap.
        server = await stack.enter_async_context(
            LocalModelServer(
                args.model,
                context_tokens=4096,
                grammar=checkpoint_grammar(bullets=1, bullet_chars=40),
                sampling={"temp": 0.0, "seed": 7},
                threads=1,
            )
        )
        # The embedded model's window is small: summarize oversize spans in balanced chunks.
        summarizer: Summarizer = ChunkingSummarizer(
            server.summarizer(), server.context_tokens, HeuristicMeter().message
        )
    elif args.summarizer == "openai":
        from compaction.summarizers.openai import OpenAISummarizer

        summarizer = OpenAISummarizer(args.base_url, _model(args))
    else:
        from compaction.summarizers.anthropic import AnthropicSummarizer

        summarizer = AnthropicSummarizer(args.base_url, _model(args))
    stack.push_async_callback(summarizer.aclose)
    return summarizer


def _model(args: argparse.Namespace) -> str:
    if not args.model:
        raise CompactionConfigError(f"--summarizer {args.summarizer} needs --model NAME")
    return str(args.model)


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
            c["compaction_id"][:8],
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


COMMAND = Command(
    name="compact",
    help="compact a session now or until it fits",
    configure=configure,
    run=run,
    render=render,
)
