"""``compaction config check [FILE]``: load a ``compaction.toml`` strictly and print what each model
resolves to (default FILE: ``./compaction.toml``).

JSON: ``{path, store, meter, pruner: {threshold_chars, head_chars, tail_chars}, models: [{model,
threshold_ratio, retain_ratio, retain_tokens, context_window, max_tokens, summarization}]}``; the
first model, ``*``, is the ``[engine]`` section's (any model without a policy). A file that does not
load fails with the section, the key and the rule.
"""

from __future__ import annotations

import argparse

from rich.console import Console

from compaction.cli.command import Command, Context, Document
from compaction.cli.output import table
from compaction.engine.settings import DEFAULT_FILE, load_settings
from compaction.errors import UsageError

COLUMNS = (
    "model",
    "threshold_ratio",
    "retain_ratio",
    "retain_tokens",
    "context_window",
    "max_tokens",
    "summarization",
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["check"], help="check: load FILE and print it resolved per model")
    parser.add_argument(
        "file", nargs="?", default=DEFAULT_FILE, metavar="FILE", help=f"default ./{DEFAULT_FILE}"
    )


def run(context: Context, args: argparse.Namespace) -> Document:
    if args.action != "check":
        raise UsageError(f"config: unknown action {args.action!r}; expected check")
    return load_settings(args.file).as_json()


def render(document: Document, console: Console) -> None:
    rows = [[_cell(m[c]) for c in COLUMNS] for m in document["models"]]
    console.print(table(f"{document['path']}: resolved per model", COLUMNS, rows))
    pruner = document["pruner"]
    console.print(
        f"store {document['store'] or '(the --store option or its default)'}; meter {document['meter']}; "
        f"pruner {pruner['threshold_chars']}/{pruner['head_chars']}/{pruner['tail_chars']} chars "
        "(threshold/head/tail)"
    )


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


COMMAND = Command(
    name="config",
    read_only=True,
    help="check a compaction.toml and print the configuration each model resolves to",
    configure=configure,
    run=run,
    render=render,
)
