"""The conversations the service tests append: an agent's turns with tool calls, in each provider
shape, long enough that a small window must be compacted."""

from __future__ import annotations

import json
from typing import Any

JSON = dict[str, Any]


def output(turn: int, size: int = 40) -> str:
    """A tool's output that names what the summary must keep (paths, an error) among filler."""
    lines = [
        f"src/module_{turn}.py:{n}: def handler_{turn}_{n}(request): return compute({n})" for n in range(size)
    ]
    return "\n".join([f"ERROR ValueError in src/module_{turn}.py line {turn}", *lines])


def openai_turn(turn: int) -> list[JSON]:
    """One turn in OpenAI chat shape: a prompt, a call, its result, the answer."""
    call = f"call_{turn}"
    return [
        {"role": "user", "content": f"Step {turn}: fix the failing test in src/module_{turn}.py"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call,
                    "type": "function",
                    "function": {
                        "name": "bash",
                        "arguments": json.dumps({"command": f"pytest src/module_{turn}.py"}),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": call, "content": output(turn)},
        {"role": "assistant", "content": f"Fixed src/module_{turn}.py: the handler now validates input."},
    ]


def anthropic_turn(turn: int) -> list[JSON]:
    call = f"toolu_{turn}"
    return [
        {"role": "user", "content": f"Step {turn}: fix the failing test in src/module_{turn}.py"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Running the tests."},
                {
                    "type": "tool_use",
                    "id": call,
                    "name": "bash",
                    "input": {"command": f"pytest src/module_{turn}.py"},
                },
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": output(turn)}]},
        {"role": "assistant", "content": [{"type": "text", "text": f"Fixed src/module_{turn}.py."}]},
    ]


def responses_turn(turn: int) -> list[JSON]:
    call = f"fc_{turn}"
    return [
        {"role": "user", "content": f"Step {turn}: fix the failing test in src/module_{turn}.py"},
        {
            "type": "function_call",
            "call_id": call,
            "name": "bash",
            "arguments": json.dumps({"command": f"pytest src/module_{turn}.py"}),
        },
        {"type": "function_call_output", "call_id": call, "output": output(turn)},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": f"Fixed {turn}."}],
        },
    ]


TURNS = {"openai": openai_turn, "anthropic": anthropic_turn, "responses": responses_turn}
