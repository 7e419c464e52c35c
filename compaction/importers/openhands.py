"""OpenHands evaluation output (``output.jsonl``: one run per line, each with a ``history``).

Each run becomes a session (source ``FILE#run-N``). History events are actions and observations:

* the ``system`` action gives the request envelope (system prompt and tools; the model comes from
  ``metadata.llm_config.model``); the user ``message`` action is the task statement;
* agent actions with ``tool_call_metadata`` are tool calls; actions sharing one model response
  (``model_response.id``) form one step whose assistant message is that response (its text and the
  calls' raw arguments); observations with the same ``tool_call_id`` are the results;
* an observation with no ``tool_call_metadata`` (an ``error`` raised before any action existed, such
  as a rejected tool argument) is harness feedback: a ``context/message`` inside the turn;
* ``recall`` actions/observations (workspace context retrieval) are reported as skipped;
* the run's ``error`` (for example the iteration limit) ends the turn with reason ``error``.

The older output (resolver and evaluation runs before OpenHands' V1 event model, from agents that
did not use function calling) has no ``tool_call_metadata`` anywhere: flat event dicts (the resolver's,
often without ``id`` or ``source``, the arguments at the top level instead of under ``args``) or
``[action, observation]`` pairs (evaluation output). Such a run is read by :class:`_LegacyRun`: the
user's (or else the first) ``message`` action is the task, each other action (``run``,
``run_ipython``, ``browse``...) one model call whose tool call (named after the action, id
``legacy-R-E``) is answered by the observation that follows it, ``finish`` the final answer, and
``null`` events are reported as skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from compaction.errors import TranscriptError
from compaction.importers.builder import SessionBuilder
from compaction.importers.content import model_source, text_of_content, user_message
from compaction.importers.format import LOOKAHEAD, TranscriptFormat
from compaction.importers.ids import file_digest, session_id_for
from compaction.importers.json_input import (
    JSON,
    as_dict,
    as_int,
    as_list,
    as_str,
    compact_json,
    decode_json,
    json_lines,
)
from compaction.importers.records import RecordIds, record_id, timestamped, verbatim
from compaction.importers.result import ImportedSession
from compaction.sessions.blocks import Block, Message, ReasoningBlock, Source, TextBlock, ToolCallBlock
from compaction.sessions.events import ToolSpec, TurnEndReason, Usage

NAME = "openhands"


def import_file(path: Path, data: bytes) -> list[ImportedSession]:
    lines, truncated = _runs(path, data)
    digest = file_digest(data)
    sessions: list[ImportedSession] = []
    runs = RecordIds(str(path))
    repeats: list[str] = []
    for run, (number, record) in enumerate(lines, start=1):
        if not isinstance(record.get("history"), list):
            raise TranscriptError(str(path), number, "expected an OpenHands run with a `history` list")
        why = runs.repeat(f"line {number} (run {run})", verbatim(record), record)
        if why is not None:
            repeats.append(f"line {number} (run {run}): {why}")
            continue
        builder = SessionBuilder(
            session_id_for(NAME, digest, run - 1), source=f"{path}#run-{run}", format=NAME
        )
        if _is_legacy(_history(record)):
            _LegacyRun(builder, run, record).run()
        else:
            _RunImporter(builder, run, record).run()
        builder.note(f"line {number}: instance {_instance(record)}")
        sessions.append(builder.finish())
    if sessions:
        sessions[-1].skipped[:0] = truncated
        sessions[0].skipped[:0] = repeats
    return sessions


def _runs(path: Path, data: bytes) -> tuple[list[tuple[int, JSON]], list[str]]:
    """JSONL of runs, or one run written as a single (possibly pretty-printed) JSON object."""
    if data.lstrip()[:1] == b"{":
        try:
            document = decode_json(data)
        except msgspec.DecodeError:
            document = None
        if isinstance(document, dict):
            return [(1, document)], []
    return json_lines(path, data)


@dataclass
class _Step:
    response_id: str
    origin: str
    response: JSON
    calls: list[tuple[str, JSON]] = field(default_factory=list)  # (origin, action)
    results: list[tuple[str, JSON]] = field(default_factory=list)  # (origin, observation)


class _RunImporter:
    def __init__(self, builder: SessionBuilder, run: int, record: JSON) -> None:
        self.b = builder
        self.run_no = run
        self.record = record
        self.model = as_str(as_dict(as_dict(record.get("metadata")).get("llm_config")).get("model"))
        self.step: _Step | None = None

    def run(self) -> None:
        for event in _history(self.record):
            self.event(as_dict(event))
        self.flush()
        error = self.record.get("error")
        if error:
            self.b.turn_reason(TurnEndReason(kind="error", message=str(error)))

    def origin(self, event: JSON) -> str:
        return f"run {self.run_no} event {event.get('id')}"

    def event(self, event: JSON) -> None:
        origin = self.origin(event)
        if not self.b.first_time(origin, _event_key(event), event):
            return
        self.b.at(self.b.time_of(event.get("timestamp"), origin))
        metadata = as_dict(event.get("tool_call_metadata"))
        if "observation" in event:
            self.observation(event, origin, metadata)
        elif metadata:
            self.tool_action(event, origin, metadata)
        else:
            self.plain_action(event, origin)

    # ------------------------------------------------------------ actions

    def plain_action(self, event: JSON, origin: str) -> None:
        action, source = as_str(event.get("action")), as_str(event.get("source"))
        args = as_dict(event.get("args"))
        if action == "system":
            self.b.header(
                _provider(self.model),
                self.model or "unknown",
                system=as_str(args.get("content")) or as_str(event.get("message")),
                tools=_tools(args.get("tools")),
                origin=origin,
            )
        elif action == "message" and source == "user":
            self.flush()
            text = as_str(args.get("content")) or as_str(event.get("message"))
            self.b.user(user_message(_id(origin), (TextBlock(text),)), origin)
        elif action == "message" and source == "agent":
            self.flush()
            text = as_str(args.get("content")) or as_str(event.get("message"))
            message = Message(
                id=_id(origin),
                role="assistant",
                content=(TextBlock(text),),
                source=model_source(_provider(self.model), self.model),
            )
            self.b.assistant(message, origin)
        else:
            self.b.skip(origin, f"{source} action {action!r} without a tool call: not a model message")

    def tool_action(self, event: JSON, origin: str, metadata: JSON) -> None:
        response = as_dict(metadata.get("model_response"))
        response_id = as_str(response.get("id")) or _id(origin)
        if self.step is None or self.step.response_id != response_id:
            self.flush()
            self.step = _Step(response_id, origin, response)
        self.step.calls.append((origin, event))

    # ------------------------------------------------------------ observations

    def observation(self, event: JSON, origin: str, metadata: JSON) -> None:
        kind = as_str(event.get("observation"))
        call_id = as_str(metadata.get("tool_call_id"))
        if call_id and self.step is not None:
            self.step.results.append((origin, event))
        elif call_id:  # no step open: the builder reports it (and why)
            self.b.result(call_id, (), origin)
        elif kind == "recall":
            self.b.skip(origin, "recall observation (workspace context): not a conversation message")
        elif kind == "error":
            self.flush()
            text = as_str(event.get("content")) or as_str(event.get("message"))
            self.b.context(user_message(_id(origin), (TextBlock(text),)), f"{origin} error observation")
            self.b.note(f"{origin}: error observation with no tool call imported as a context message")
        else:
            self.b.skip(origin, f"{kind} observation without a tool call: not a conversation message")

    # ------------------------------------------------------------ steps

    def flush(self) -> None:
        step, self.step = self.step, None
        if step is None:
            return
        reply = _reply(step.response)
        raw_calls = {as_str(c.get("id")): c for c in map(as_dict, as_list(reply.get("tool_calls")))}
        blocks = _reply_blocks(reply)
        origins: dict[str, str] = {}
        for call_origin, action in step.calls:
            block = _call_block(action, raw_calls)
            blocks.append(block)
            origins[block.id] = call_origin
        model = as_str(step.response.get("model")) or self.model
        message = Message(
            id=step.response_id,
            role="assistant",
            content=tuple(blocks),
            source=model_source(_provider(self.model), model),
        )
        first_origin, first_action = step.calls[0] if step.calls else (step.origin, {})
        self.b.assistant(
            message,
            f"{step.origin} model response {step.response_id}",
            usage=_usage(as_dict(step.response.get("usage"))),
            call_origins=origins,
            time=self.b.time_of(first_action.get("timestamp"), first_origin),
        )
        for result_origin, observation in step.results:
            call_id = as_str(as_dict(observation.get("tool_call_metadata")).get("tool_call_id"))
            text = as_str(observation.get("content")) or as_str(observation.get("message"))
            self.b.result(
                call_id,
                (TextBlock(text),),
                result_origin,
                is_error=observation.get("observation") == "error",
                message_id=_id(result_origin),
                time=self.b.time_of(observation.get("timestamp"), result_origin),
            )


def _reply(response: JSON) -> JSON:
    """The assistant message of a chat-completion response (its first choice)."""
    choices = as_list(response.get("choices"))
    return as_dict(as_dict(choices[0]).get("message")) if choices else {}


def _reply_blocks(reply: JSON) -> list[Block]:
    blocks: list[Block] = []
    reasoning = as_str(reply.get("reasoning_content"))
    if reasoning:
        blocks.append(ReasoningBlock(reasoning))
    text = text_of_content(reply.get("content"))
    if text:
        blocks.append(TextBlock(text))
    return blocks


def _call_block(action: JSON, raw_calls: dict[str, JSON]) -> ToolCallBlock:
    """The call as the model wrote it when the response has it, else rebuilt from the action."""
    metadata = as_dict(action.get("tool_call_metadata"))
    call_id = as_str(metadata.get("tool_call_id"))
    function = as_dict(raw_calls.get(call_id, {}).get("function"))
    arguments = as_str(function.get("arguments")) or compact_json(action.get("args", {}))
    name = as_str(function.get("name")) or as_str(metadata.get("function_name"))
    return ToolCallBlock(id=call_id, name=name, arguments=arguments)


def _id(origin: str) -> str:
    return origin.replace(" ", "-")


def _provider(model: str) -> str:
    """LiteLLM-style ``provider/model`` names carry the provider; else unknown."""
    return model.split("/", 1)[0] if "/" in model else "unknown"


def _tools(raw: Any) -> tuple[ToolSpec, ...]:
    specs: list[ToolSpec] = []
    for item in as_list(raw):
        function = as_dict(as_dict(item).get("function"))
        if function.get("name"):
            specs.append(
                ToolSpec(
                    name=as_str(function.get("name")),
                    description=as_str(function.get("description")),
                    parameters=as_dict(function.get("parameters")),
                )
            )
    return tuple(specs)


def _usage(raw: JSON) -> Usage | None:
    if not raw:
        return None
    return Usage(
        input_tokens=as_int(raw.get("prompt_tokens")),
        output_tokens=as_int(raw.get("completion_tokens")),
    )


# ---------------------------------------------------------------- the older flat format

_ENVELOPE_KEYS = frozenset(
    {
        "id", "source", "args", "extras", "llm_metrics", "tool_call_metadata",
        "action", "observation", "thought", "message", "timestamp", "cause", "is_confirmed",
        "action_risk", "security_risk", "confirmation_state", "keep_prompt", "kernel_init_code",
        "images_urls", "wait_for_response",
    }
)  # fmt: skip


def _history(record: JSON) -> list[Any]:
    """The run's events in order (``[action, observation]`` pairs of older output flattened)."""
    events: list[Any] = []
    for item in as_list(record.get("history")):
        events.extend(item if isinstance(item, list) else [item])
    return events


def _is_legacy(history: list[Any]) -> bool:
    """Older output: actions and observations, none with ``tool_call_metadata``."""
    events = [e for e in history if isinstance(e, dict) and ("action" in e or "observation" in e)]
    return bool(events) and not any("tool_call_metadata" in e for e in events)


class _LegacyRun:
    """One run of the older output: actions paired with the observations that follow them."""

    def __init__(self, builder: SessionBuilder, run: int, record: JSON) -> None:
        self.b = builder
        self.run_no = run
        self.record = record
        self.model = as_str(as_dict(as_dict(record.get("metadata")).get("llm_config")).get("model"))
        self.pending: str | None = None  # the call id the next observation answers
        self.task_seen = False
        self.synthesized_ids = 0

    def run(self) -> None:
        for index, raw in enumerate(_history(self.record)):
            event = as_dict(raw)
            origin = f"run {self.run_no} event {index}"
            if not self.b.first_time(origin, _event_key(event), event):
                continue
            self.b.at(self.b.time_of(event.get("timestamp"), origin))
            if "observation" in event:
                self.observation(event, origin)
            elif "action" in event:
                self.action(event, origin, index)
            else:
                self.b.skip(origin, "history item with neither `action` nor `observation`")
        if self.synthesized_ids:
            self.b.note(
                f"run {self.run_no}: older OpenHands output (no event ids): {self.synthesized_ids} "
                "actions imported as tool calls with made-up ids (legacy-RUN-EVENT), each answered "
                "by the observation that follows it"
            )
        error = self.record.get("error")
        if error:
            self.b.turn_reason(TurnEndReason(kind="error", message=str(error)))

    def source(self) -> Source:
        return model_source(_provider(self.model), self.model)

    def action(self, event: JSON, origin: str, index: int) -> None:
        kind = as_str(event.get("action"))
        fields = as_dict(event.get("args")) or event  # flat resolver dicts: no `args` object
        thought = as_str(fields.get("thought")) or as_str(event.get("thought"))
        source = as_str(event.get("source"))
        self.pending = None
        if kind == "system":
            self.b.header(
                _provider(self.model), self.model or "unknown",
                system=as_str(fields.get("content")), tools=_tools(fields.get("tools")), origin=origin,
            )  # fmt: skip
        elif kind == "message" and (source == "user" or (not source and not self.task_seen)):
            self.task_seen = True
            text = as_str(fields.get("content")) or as_str(event.get("message"))
            if not text:
                text = as_str(self.record.get("instruction"))
            self.b.user(user_message(_id(origin), (TextBlock(text),)), f"{origin} {source or 'task'} message")
        elif kind in ("message", "finish"):
            text = as_str(fields.get("content")) or thought or as_str(fields.get("final_thought"))
            message = Message(_id(origin), "assistant", (TextBlock(text),), self.source())
            self.b.assistant(message, f"{origin} {kind} action")
        elif kind in ("null", "change_agent_state", "recall", ""):
            self.b.skip(origin, f"{kind or 'untyped'} action: not a model message")
        else:
            call_id = f"legacy-{self.run_no}-{index}"
            arguments = {k: v for k, v in fields.items() if k not in _ENVELOPE_KEYS}
            blocks: list[Block] = [TextBlock(thought)] if thought else []
            blocks.append(ToolCallBlock(call_id, kind, compact_json(arguments)))
            message = Message(_id(origin), "assistant", tuple(blocks), self.source())
            self.b.assistant(message, f"{origin} {kind} action")
            self.synthesized_ids += 1
            self.pending = call_id

    def observation(self, event: JSON, origin: str) -> None:
        kind = as_str(event.get("observation"))
        call_id, self.pending = self.pending, None
        text = as_str(event.get("content")) or as_str(event.get("message"))
        if call_id is not None:
            self.b.result(
                call_id, (TextBlock(text),), f"{origin} {kind} observation",
                is_error=kind == "error", message_id=_id(origin),
            )  # fmt: skip
        elif kind == "error" and text:
            self.b.context(user_message(_id(origin), (TextBlock(text),)), f"{origin} error observation")
        else:
            self.b.skip(origin, f"{kind or 'untyped'} observation that answers no action")


def _event_key(event: JSON) -> str | None:
    """A history event's record id: its ``id``, else (older output) its content at its time."""
    return record_id("event id", event.get("id")) or timestamped(event)


def _instance(record: JSON) -> str:
    """The run's instance id, or the issue a resolver run worked on (``owner/repo#number``)."""
    instance = record.get("instance_id")
    if instance is not None:
        return str(instance)
    issue = as_dict(record.get("issue"))
    if issue:
        return f"{issue.get('owner')}/{issue.get('repo')}#{issue.get('number')}"
    return "unknown"


def recognises(value: Any) -> bool:
    """A run: a ``history`` of actions and observations (the older evaluation output holds
    ``[action, observation]`` pairs), none of them a chat message with a ``role``."""
    history = as_dict(value).get("history")
    if not isinstance(history, list):
        return False
    events = [as_dict(x) for e in history[:LOOKAHEAD] for x in (e if isinstance(e, list) else [e])]
    return any("action" in e or "observation" in e for e in events) and not any("role" in e for e in events)


FORMAT = TranscriptFormat(
    NAME,
    title="OpenHands output",
    looks_like="OpenHands output (runs with a `history` of actions and observations)",
    recognises=recognises,
    import_file=import_file,
)
