"""``compaction serve [--host 127.0.0.1] [--port 8080] [--token-file F] [--max-body BYTES]``: the
library as an HTTP service over the store (``--store``), until SIGTERM or Ctrl-C.

The API is described in docs/service.md and by the OpenAPI document the service serves at
``/v1/openapi.json``. A non-loopback ``--host`` is refused without ``--token-file``. On SIGTERM
the service stops listening, lets the requests under way finish (their saves are never cut short)
and closes the store. JSON: ``{url, stopped, shutdown}`` once it has stopped.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from compaction.cli.command import Command, Context, Document
from compaction.cli.output import positive_int


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="the address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=8080, help="the port to bind (default 8080; 0: any free port)"
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="a file whose first line is the bearer token clients must send (required off loopback)",
    )
    parser.add_argument(
        "--max-body",
        type=positive_int,
        default=8 * 1024 * 1024,
        metavar="BYTES",
        help="the largest request body accepted (default 8 MiB; 413 above it)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM, how long the requests under way may take to finish (default 30)",
    )


def run(context: Context, args: argparse.Namespace) -> Document:
    from compaction.serve.server import Binding, read_token, serve  # loads aiohttp: only when serving

    token = read_token(args.token_file) if args.token_file is not None else None
    binding = Binding(args.host, args.port, token, args.max_body, args.grace)
    return serve(context.store_url, binding)


def render(document: Document, console: Console) -> None:
    """Nothing on stdout: the service logged where it listened on stderr."""


COMMAND = Command(
    name="serve",
    help="serve the store over HTTP (a JSON API for agents in any language)",
    configure=configure,
    run=run,
    render=render,
)
