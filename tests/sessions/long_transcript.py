"""A long OpenAI-style chat transcript, written quickly: the session size a long agent run reaches.

:func:`write_transcript` writes a JSON list of messages: a system message, one user message, then
steps of an ``assistant`` message with one tool call and the ``tool`` message answering it (about
100 characters of output). ``messages`` of them import (``compaction import``, the ``openai``
format) as a session of about ``2.5 * messages`` events: 100,000 messages, 250,000 events.
Used by the JetStream cluster tests and ``benchmarks.bench_nats``, both at the full size.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_transcript(path: Path, messages: int) -> Path:
    """Write a transcript of about ``messages`` messages to ``path``; the path."""
    items: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "Find why the build fails and fix it."},
    ]
    for step in range(max(1, (messages - 2) // 2)):
        call_id = f"call_{step:07d}"
        items.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": "shell",
                            "arguments": json.dumps({"cmd": f"grep -n step{step} src/"}),
                        },
                    }
                ],
            }
        )
        items.append({
            "role": "tool",
            "tool_call_id": call_id,
            "content": f"src/module_{step % 97}.py:{step % 1000}: def handler_{step}(request): "
            f"return build(request, {step})",
        })  # fmt: skip
    path.write_text(json.dumps(items))
    return path
