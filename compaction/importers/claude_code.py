"""Claude Code JSONL (``~/.claude/projects/<project>/<session>.jsonl``) into sessions.

Claude Code writes one line per content block of an API message, and runs each tool as soon as its
``tool_use`` block is complete, so the results of one message are interleaved with its later
blocks. Lines sharing ``message.id`` are merged into one assistant message (one step); the
``tool_result`` blocks of user lines arriving meanwhile are that step's results.

* ``thinking`` becomes a reasoning block, ``tool_use`` a tool-call block (arguments = compact JSON).
* A user line with ``isMeta`` is harness context (``context/message``, its message's source kind
  ``harness``: a skill's body, a slash command's expansion, a reminder); any other user line without
  ``tool_result`` blocks is a prompt and opens a new turn.
* ``isSidechain`` lines (sub-agent threads of older versions) are kept apart: each thread, found
  through ``parentUuid``, becomes its own session (source ``FILE#sidechain-N``). A file made only of
  one sidechain thread (a ``subagents/agent-*.jsonl`` file) imports as a plain session.
* Claude Code's own compaction: the ``system``/``compact_boundary`` line is counted in
  ``compactions`` and the ``isCompactSummary`` user line becomes a compaction bracket (a
  :class:`~compaction.engine.foreign.ForeignCompaction`). ``summary``, ``system``, ``progress``
  and snapshot lines are reported as skipped.
* ``queue-operation`` ``enqueue`` lines hold what the user typed while the agent worked; Claude Code
  hands it to the model at its next call. It becomes a ``steering/message`` after the results of
  the step under way (a user prompt when no turn is open). A queued text that later arrives as a
  user line of its own (task notifications) is imported there; ``remove``/``dequeue`` lines are
  queue bookkeeping and reported as skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import msgspec

from compaction.engine.foreign import ForeignCompaction
from compaction.importers.anthropic_blocks import assistant_block, content_parts, result_content, user_block
from compaction.importers.builder import SessionBuilder
from compaction.importers.content import model_source, user_message
from compaction.importers.format import TranscriptFormat
from compaction.importers.ids import file_digest, session_id_for
from compaction.importers.json_input import (
    JSON,
    as_dict,
    as_int,
    as_str,
    json_lines,
)
from compaction.importers.records import RecordIds, record_id, timestamped
from compaction.importers.result import ImportedSession
from compaction.sessions.blocks import (
    Block,
    Message,
    Source,
    TextBlock,
    ToolCallBlock,
)
from compaction.sessions.events import Usage

NAME = "claude-code"
PROVIDER = "anthropic"
Line = tuple[int, JSON]

HARNESS_WRITTEN = Source(kind="harness")
"""The source of a user-role message the harness wrote (an ``isMeta`` line)."""


def import_file(path: Path, data: bytes) -> list[ImportedSession]:
    lines, truncated = json_lines(path, data)
    lines, repeats = _each_line_once(RecordIds(str(path)), lines)
    main = [(n, d) for n, d in lines if not d.get("isSidechain")]
    threads = _sidechain_threads([(n, d) for n, d in lines if d.get("isSidechain")])
    sub_agent = not main and len(threads) == 1
    if sub_agent:
        main, threads = threads[0], []
    groups = [(0, str(path), main)] if main or not threads else []
    groups += [(k, f"{path}#sidechain-{k}", t) for k, t in enumerate(threads, start=1)]
    digest = file_digest(data)
    sessions = [_import_lines(chain, session_id_for(NAME, digest, k), source) for k, source, chain in groups]
    sessions[0].skipped[:0] = [*truncated, *repeats]
    if sub_agent:
        sessions[0].notes.append("every line is a sidechain (a sub-agent transcript)")
    elif main and threads:
        kept = ", ".join(f"#sidechain-{k} ({len(t)} lines)" for k, t in enumerate(threads, 1))
        sessions[0].notes.append(f"sidechain lines kept apart as separate sessions: {kept}")
    return sessions


def _each_line_once(records: RecordIds, lines: list[Line]) -> tuple[list[Line], list[str]]:
    """The lines without repeats (a line's record id is its ``uuid``; a line without one, such as
    a queue operation, is told by its content and timestamp), and why each repeat was skipped."""
    kept: list[Line] = []
    repeats: list[str] = []
    for number, line in lines:
        origin = _origin(number, line)
        why = records.repeat(origin, record_id("uuid", line.get("uuid")) or timestamped(line), line)
        if why is None:
            kept.append((number, line))
        else:
            repeats.append(f"{origin}: {why}")
    return kept, repeats


def _sidechain_threads(lines: list[Line]) -> list[list[Line]]:
    """Group sidechain lines into threads: by ``agentId`` when the lines carry one, else by
    following ``parentUuid`` to the thread's root."""
    thread_of: dict[str, int] = {}
    threads: list[list[Line]] = []
    for number, line in lines:
        agent = as_str(line.get("agentId"))
        index = thread_of.get(f"agent:{agent}") if agent else None
        if index is None:
            index = thread_of.get(as_str(line.get("parentUuid")))
        if index is None:
            index = len(threads)
            threads.append([])
        threads[index].append((number, line))
        uid = as_str(line.get("uuid"))
        if uid:
            thread_of[uid] = index
        if agent:
            thread_of[f"agent:{agent}"] = index
    return threads


# ---------------------------------------------------------------- one chain of lines


@dataclass
class _Result:
    origin: str
    part: JSON
    message_id: str
    time: datetime | None


@dataclass
class _Step:
    """The lines of one API message and the tool results that arrived while it streamed."""

    message_id: str
    model: str
    first_line: int
    last_line: int
    time: datetime | None
    blocks: list[Block] = field(default_factory=list)
    call_origins: dict[str, str] = field(default_factory=dict)
    usage: Usage | None = None
    results: list[_Result] = field(default_factory=list)
    after: list[tuple[str, Message, datetime | None, bool]] = field(default_factory=list)
    """User text that arrived during the step: (origin, message, time, steering)."""


class _ChainImporter:
    def __init__(self, builder: SessionBuilder, user_lines: dict[str, list[int]]) -> None:
        self.b = builder
        self.step: _Step | None = None
        self.seen_ids: dict[str, int] = {}
        self.last_model: str | None = None
        self.user_lines = user_lines  # text of each plain user line -> its line numbers

    def line(self, number: int, line: JSON) -> None:
        kind = as_str(line.get("type"))
        origin = _origin(number, line)
        self.b.at(self.b.time_of(line.get("timestamp"), origin))
        if kind == "assistant":
            self.assistant(number, line, origin)
        elif kind == "user":
            self.user(number, line, origin)
        elif kind == "system":
            subtype = as_str(line.get("subtype"), "message")
            if subtype == "compact_boundary":
                meta = as_dict(line.get("compactMetadata"))
                self.b.compaction(
                    origin,
                    f"compact_boundary, trigger {meta.get('trigger')}, preTokens {meta.get('preTokens')}",
                )
            self.b.skip(origin, f"system line ({subtype}): harness metadata, not sent to the model")
        elif kind == "summary":
            self.b.skip(origin, "summary line: a session title, not part of the conversation")
        elif kind == "queue-operation":
            self.queued(number, line, origin)
        else:
            self.b.skip(origin, f"{kind or 'untyped'} line: not a conversation message")

    # ------------------------------------------------------------ assistant lines

    def assistant(self, number: int, line: JSON, origin: str) -> None:
        message = as_dict(line.get("message"))
        message_id = as_str(message.get("id")) or as_str(line.get("uuid")) or f"line-{number}"
        if self.step is None or self.step.message_id != message_id:
            self.flush()
            time = self.b.time_of(line.get("timestamp"), origin)
            self.step = _Step(message_id, as_str(message.get("model")), number, number, time)
            self.last_model = as_str(message.get("model")) or self.last_model
        step = self.step
        step.last_line = number
        step.usage = _usage(as_dict(message.get("usage"))) or step.usage
        for index, raw in enumerate(content_parts(message.get("content"))):
            block = assistant_block(as_dict(raw))
            if block is None:
                self.b.skip(
                    f"{origin} block {index}",
                    f"unsupported block type {as_dict(raw).get('type')!r}",
                )
            elif isinstance(block, ToolCallBlock) and block.id in step.call_origins:
                self.b.skip(f"{origin} block {index}", f"duplicate tool_use {block.id} in one message")
            else:
                if isinstance(block, ToolCallBlock):
                    step.call_origins[block.id] = origin
                step.blocks.append(block)

    # ------------------------------------------------------------ user lines

    def user(self, number: int, line: JSON, origin: str) -> None:
        content = as_dict(line.get("message")).get("content")
        parts = content_parts(content)
        if any(as_dict(p).get("type") == "tool_result" for p in parts):
            self.tool_results(number, line, origin, parts)
            return
        self.flush()
        message = user_message(_message_id(line, number), self.user_blocks(origin, parts))
        if line.get("isCompactSummary"):
            self.b.foreign(
                ForeignCompaction(
                    summary=message,
                    provider="claude-code",
                    model=self.last_model,
                    first_kept_seq=None,
                    origin=f"{origin} isCompactSummary",
                )
            )
        elif line.get("isMeta"):
            harness = msgspec.structs.replace(message, source=HARNESS_WRITTEN)
            self.b.context(harness, f"{origin} isMeta")
        else:
            self.b.user(message, origin)

    def queued(self, number: int, line: JSON, origin: str) -> None:
        """A message typed while the agent worked: delivered to the model at its next call."""
        operation = as_str(line.get("operation"))
        text = as_str(line.get("content"))
        if operation != "enqueue" or not text.strip():
            self.b.skip(origin, f"queue-operation {operation or '?'}: queue bookkeeping, no message")
            return
        later = [n for n in self.user_lines.get(text, []) if n > number]
        if later:
            self.b.skip(origin, f"queued message delivered as the user line {later[0]}: imported there")
            return
        message = user_message(f"queued-line-{number}", (TextBlock(text),))
        queued_origin = f"{origin} queued while the agent worked"
        time = self.b.time_of(line.get("timestamp"), origin)
        if self.step is None:
            self.b.steering(message, queued_origin, time=time)
        else:
            self.step.after.append((queued_origin, message, time, True))

    def tool_results(self, number: int, line: JSON, origin: str, parts: list[Any]) -> None:
        others: list[Any] = []
        for index, raw in enumerate(parts):
            part = as_dict(raw)
            if part.get("type") != "tool_result":
                others.append(part)
            elif self.step is None:  # no step open: the builder reports it (and why)
                self.b.result(as_str(part.get("tool_use_id")), (), origin)
            else:
                result_id = f"{_message_id(line, number)}#{index}"
                time = self.b.time_of(line.get("timestamp"), origin)
                self.step.results.append(_Result(origin, part, result_id, time))
        if not others:
            return
        extra = user_message(f"{_message_id(line, number)}-text", self.user_blocks(origin, others))
        if self.step is None:
            self.b.user(extra, f"{origin} text sent with tool results")
        else:
            self.step.after.append((origin, extra, self.b.time_of(line.get("timestamp"), origin), False))

    def user_blocks(self, origin: str, parts: list[Any]) -> tuple[Block, ...]:
        blocks: list[Block] = []
        for index, raw in enumerate(parts):
            block = user_block(as_dict(raw))
            if block is None:
                self.b.skip(
                    f"{origin} block {index}",
                    f"unsupported block type {as_dict(raw).get('type')!r}",
                )
            else:
                blocks.append(block)
        return tuple(blocks)

    # ------------------------------------------------------------ steps

    def flush(self) -> None:
        step, self.step = self.step, None
        if step is None:
            return
        message_id = step.message_id
        repeats = self.seen_ids.get(message_id, 0)
        self.seen_ids[message_id] = repeats + 1
        if repeats:
            message_id = f"{message_id}#{repeats + 1}"
        lines = (
            f"line {step.first_line}"
            if step.first_line == step.last_line
            else f"lines {step.first_line}-{step.last_line}"
        )
        message = Message(
            id=message_id,
            role="assistant",
            content=tuple(step.blocks),
            source=model_source(PROVIDER, step.model),
        )
        self.b.assistant(
            message,
            f"{lines} message {step.message_id}",
            usage=step.usage,
            call_origins=step.call_origins,
            time=step.time,
        )
        for result in step.results:
            self.b.result(
                as_str(result.part.get("tool_use_id")),
                result_content(result.part.get("content")),
                result.origin,
                is_error=result.part.get("is_error") is True,
                message_id=result.message_id,
                time=result.time,
            )
        for after_origin, extra, time, steering in step.after:
            if steering:
                self.b.steering(extra, after_origin, time=time)
            else:
                self.b.user(extra, f"{after_origin} text sent with tool results", time=time)


def _import_lines(lines: list[Line], session_id: UUID, source: str) -> ImportedSession:
    builder = SessionBuilder(session_id, source=source, format=NAME)
    user_lines: dict[str, list[int]] = {}
    for number, line in lines:
        if as_str(line.get("type")) == "user":
            content = as_dict(line.get("message")).get("content")
            if isinstance(content, str):
                user_lines.setdefault(content, []).append(number)
    importer = _ChainImporter(builder, user_lines)
    for number, line in lines:
        importer.line(number, line)
    importer.flush()
    versions = sorted({as_str(d.get("version")) for _, d in lines} - {""})
    if versions:
        builder.note(f"Claude Code version {', '.join(versions)}")
    return builder.finish()


# ---------------------------------------------------------------- blocks


def _origin(number: int, line: JSON) -> str:
    uid = as_str(line.get("uuid"))
    return f"line {number} uuid {uid}" if uid else f"line {number}"


def _message_id(line: JSON, number: int) -> str:
    return as_str(line.get("uuid")) or f"line-{number}"


def _usage(raw: JSON) -> Usage | None:
    if not raw:
        return None
    return Usage(
        input_tokens=as_int(raw.get("input_tokens")),
        output_tokens=as_int(raw.get("output_tokens")),
        cache_read_tokens=as_int(raw.get("cache_read_input_tokens")),
        cache_write_tokens=as_int(raw.get("cache_creation_input_tokens")),
    )


LINE_TYPES = frozenset(
    {"user", "assistant", "system", "summary", "progress", "file-history-snapshot", "queue-operation"}
)
LINE_KEYS = frozenset({"uuid", "leafUuid", "sessionId", "messageId", "parentUuid"})


def recognises(value: Any) -> bool:
    """A Claude Code line: one of its line ``type``s with one of its ids."""
    record = as_dict(value)
    return as_str(record.get("type")) in LINE_TYPES and bool(LINE_KEYS & record.keys())


FORMAT = TranscriptFormat(
    NAME,
    title="Claude Code JSONL",
    looks_like="Claude Code JSONL (lines with `type` and `uuid`)",
    recognises=recognises,
    import_file=import_file,
)
