"""Items the library does not interpret, through compaction: an Agents SDK run whose model reasons
with encrypted content and searches the web (a hosted tool) before each function call. Each model
response is one assistant message of the log, so a compaction shadows it whole or keeps it whole:
what the model is sent never holds a reasoning item without the item it precedes, a call without its
output, or half a response; the shadowed responses stay in the log, and the checkpoint that stands
for them says what they searched."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.integrations.support import FILE, audit_passes, require_framework

require_framework("agents", "openai-agents")

from agents import Agent, function_tool  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseFunctionWebSearch,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_function_web_search import ActionSearch  # noqa: E402
from openai.types.responses.response_reasoning_item import Summary  # noqa: E402

from compaction.integrations.openai_agents import CompactingSession  # noqa: E402
from compaction.sessions.blocks import OpaqueBlock  # noqa: E402

READS = 8


def encrypted(n: int) -> str:
    return f"gAAAAB{n:03}" + "e" * 1200


class SearchingModel(Model):
    """Per call: a reasoning item with encrypted content, a web search (hosted, the SDK does not run
    it) and a ``read_file`` call; after ``READS`` calls, reasoning and the answer. Keeps what it
    was sent."""

    def __init__(self) -> None:
        self.inputs: list[list[dict[str, Any]]] = []
        self.outputs: list[list[dict[str, Any]]] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0)
        sent = (
            json.loads(json.dumps(input)) if isinstance(input, list) else [{"content": input, "role": "user"}]
        )
        self.inputs.append(sent)
        n = len(self.inputs)
        summary = [Summary(text=f"step {n}: look at the rounding", type="summary_text")]
        output: list[Any] = [
            ResponseReasoningItem(
                id=f"rs_{n}", type="reasoning", summary=summary, encrypted_content=encrypted(n)
            )
        ]
        if n <= READS:
            action = ActionSearch(type="search", query=f"python decimal rounding {n}")
            output.append(
                ResponseFunctionWebSearch(
                    id=f"ws_{n}", type="web_search_call", status="completed", action=action
                )
            )
            output.append(
                ResponseFunctionToolCall(
                    id=f"fc_{n}", call_id=f"call_{n}", type="function_call", name="read_file",
                    arguments=json.dumps({"path": FILE}), status="completed",
                )
            )  # fmt: skip
        else:
            text = ResponseOutputText(
                type="output_text", text="use Decimal with ROUND_HALF_EVEN", annotations=[]
            )
            output.append(
                ResponseOutputMessage(
                    id=f"msg_{n}", type="message", role="assistant", status="completed", content=[text]
                )
            )
        self.outputs.append([item.model_dump(exclude_unset=True) for item in output])
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the tests run the SDK without streaming")


@function_tool
def read_file(path: str) -> str:
    """Read a file of the workspace (about 3 kB)."""
    return f"{path}:\n" + "\n".join(f"{i:4}  total += round(price * qty, 2)  # line {i}" for i in range(80))


def assert_valid_for_the_sdk(sent: list[dict[str, Any]], responses: list[list[dict[str, Any]]]) -> None:
    """What a Responses API model accepts: each model response the input holds is whole and in its
    order (a reasoning item directly before the item that followed it, with its encrypted content),
    and each function call is answered after it."""
    by_id = {item["id"]: (k, i) for k, response in enumerate(responses) for i, item in enumerate(response)}
    held = [item for item in sent if item.get("id") in by_id]
    for k, response in enumerate(responses):
        mine = [item for item in held if by_id[item["id"]][0] == k]
        assert mine in ([], response), f"response {k} split: sent {[i['id'] for i in mine]}"
    for index, item in enumerate(sent):
        if item.get("type") == "reasoning":
            assert index + 1 < len(sent), "a reasoning item last, without its following item"
            k, i = by_id[item["id"]]
            assert sent[index + 1] == responses[k][i + 1], f"{item['id']} is not before its item"
            assert item["encrypted_content"] == responses[k][i]["encrypted_content"]
    calls = [i["call_id"] for i in sent if i.get("type") == "function_call"]
    answered = [i["call_id"] for i in sent if i.get("type") == "function_call_output"]
    assert calls == answered, (calls, answered)
    for call in calls:
        position = next(n for n, i in enumerate(sent) if i.get("call_id") == call)
        assert sent[position]["type"] == "function_call", f"{call} answered before it was made"


async def test_a_compacted_run_never_splits_reasoning_or_hosted_calls_from_their_response(url: str) -> None:
    session = CompactingSession("searcher", url, context_window=6000)
    model = SearchingModel()
    agent = Agent(name="fixer", instructions="You fix bugs.", model=model, tools=[read_file])
    result = await session.run(agent, "task 0: the cart total is off by a cent", max_turns=20)
    assert str(result.final_output).startswith("use Decimal")
    assert len(session.memory.compactions) >= 2, "the run compacted more than once"
    firsts = [str(sent[0].get("content", "")) for sent in model.inputs]
    assert all(first.startswith("task 0") for first in firsts), "the task statement is sent first"
    assert "ws_1" in json.dumps(model.inputs[1]) and "ws_1" not in json.dumps(model.inputs[-1]), (
        "the run's oldest responses were compacted while it ran"
    )
    for sent in model.inputs:
        assert_valid_for_the_sdk(sent, model.outputs)
    final = await session.get_items()
    assert_valid_for_the_sdk(final, model.outputs)
    assert final[-2:] == model.outputs[-1], "the newest response is kept whole: reasoning, then the answer"
    assert "ws_1" not in json.dumps(final), "the oldest responses were compacted"

    logged = await session.memory.load("searcher")
    opaque = [b for e in logged.events() if (m := getattr(e, "message", None)) for b in m.content
              if isinstance(b, OpaqueBlock)]  # fmt: skip
    assert len(opaque) == 2 * READS + 1, "every reasoning item and search stays in the log"
    checkpoints = [str(i.get("content")) for i in final if "python decimal rounding" in str(i.get("content"))]
    assert checkpoints, "the checkpoint mentions the searches it stands for"
    audit_passes(url)
