"""Reconstruct a compaction's summarization request from the log plus the code.

The log records the span (``compact/summary.shadowed_seqs``), the provider and model, and
``max_tokens``; the code supplies the rest the same way the transaction did
(:func:`compaction.engine.transaction.build_request`: the latest ``request/header``'s system prompt and
tools, the protected first user message, the shadowed messages, the one instruction). For an
OpenAI-compatible or Anthropic provider the request body is rebuilt with the summarizer's own pure
payload builder (:mod:`compaction.summarizers.payloads`, chosen by the provider's request shape in
:data:`compaction.summarizers.registry.SUMMARIZERS`), so it is the body that was sent; for the
offline summarizers (``template``, the ``checkpoint`` strategy) and for compactions imported from
another harness it is the :class:`~compaction.vocabulary.summarizer.SummaryRequest` itself. Nothing
here loads an HTTP client.

A span sent as a digest (``compact/summary.digest``, :mod:`compaction.summarizers.digest`: the
``local`` summarizer by default, others with ``--digest``) is digested again under the recorded
budget and price, and sent without the conversation's system prompt and tools when the summarizer
left them out, so the request is the one the model was shown, not the whole span; a note says so,
and another when the rebuilt digest's counts differ from the recorded ones (the code changed
since). Logs without the field rebuild the whole span as before.

The model is ``compact/summary.request_model`` (the model the request named; ``model`` is the one
that answered, which may carry a dated suffix). What the log cannot tell is listed in ``notes``: a
log older than ``request_model`` (the answering model is assumed), OpenAI's
``max_completion_tokens`` spelling (not recorded; ``max_tokens_field`` chooses), and a span
summarized in chunks (sent as several requests cut from this one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import msgspec

from compaction.engine.brackets import Bracket, find_brackets
from compaction.engine.selection import leading_task_statement
from compaction.engine.transaction import build_request
from compaction.errors import (
    CompactionConfigError,
    CompactionNotFoundError,
    ContextLengthError,
    EventRuleError,
    UnrebuildableError,
)
from compaction.sessions.events import SessionEvent
from compaction.sessions.session import Session
from compaction.summarizers.digest import Digest, digest_span, estimate_named
from compaction.summarizers.payloads import MaxTokensField, build_payload
from compaction.summarizers.registry import SUMMARIZERS, RequestShape
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.events import CompactSummary, DigestRecord
from compaction.vocabulary.summarizer import SummaryRequest

STRATEGY_PROVIDERS = frozenset({"checkpoint"})
"""Providers recorded by strategies rather than by a registered summarizer (the checkpoint
strategy renders its scratchpad in process): their request is the SummaryRequest itself."""


@dataclass(frozen=True)
class RebuiltRequest:
    session_id: str
    compaction_id: str
    start_seq: int
    provider: str
    model: str
    shape: str  # "openai" | "anthropic" | "summary-request"
    request: SummaryRequest
    payload: dict[str, Any]  # the body as sent (or the SummaryRequest as JSON values)
    notes: list[str] = field(default_factory=list)
    digest: DigestRecord | None = None  # the span was sent as this digest (None: whole)

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "compaction_id": self.compaction_id,
            "start_seq": self.start_seq,
            "provider": self.provider,
            "model": self.model,
            "shape": self.shape,
            "request": self.payload,
            "digest": msgspec.structs.asdict(self.digest) if self.digest is not None else None,
            "notes": list(self.notes),
        }


def find_bracket(events: Sequence[SessionEvent], compaction_id: str) -> Bracket | None:
    """The bracket whose id is ``compaction_id`` or uniquely starts with it."""
    brackets = find_brackets(events)
    exact = [b for b in brackets if b.compaction_id == compaction_id]
    if exact:
        return exact[0]
    prefixed = [b for b in brackets if compaction_id and b.compaction_id.startswith(compaction_id)]
    if len(prefixed) > 1:
        ids = ", ".join(b.compaction_id for b in prefixed[:5])
        raise CompactionNotFoundError(
            f"compaction id prefix {compaction_id!r} is ambiguous: it matches {ids}; give more characters"
        )
    return prefixed[0] if prefixed else None


def rebuild_request(
    session_id: UUID,
    events: Sequence[SessionEvent],
    compaction_id: str,
    *,
    keep_first_user: bool = True,
    max_tokens_field: MaxTokensField = "max_tokens",
) -> RebuiltRequest:
    """The summarization request of one compaction of this session, as it was sent."""
    bracket = find_bracket(events, compaction_id)
    if bracket is None:
        raise CompactionNotFoundError(
            f"session {session_id} has no compaction {compaction_id!r}; expected the id of a "
            "compact/start in this session (see `compaction audit SESSION`)"
        )
    summary = bracket.summary
    if summary is None:
        raise UnrebuildableError(
            f"compaction {bracket.compaction_id} (compact/start seq {bracket.start.seq}) is "
            f"{bracket.outcome} and has no compact/summary, so the log does not record its span; "
            "only committed compactions can be rebuilt"
        )
    session = _session_at(session_id, events, bracket.start.seq)
    notes: list[str] = []
    max_tokens = summary.max_tokens
    if max_tokens is None:
        max_tokens = BasicConfig().max_tokens
        notes.append(f"max_tokens is not recorded; the configuration default {max_tokens} is assumed")
    request = build_request(
        session,
        summary.shadowed_seqs,
        bracket.compaction_id,
        max_tokens,
        keep_first_user=keep_first_user,
        focus=bracket.start.focus,
    )
    if summary.digest is not None:
        request = digested_request(request, summary.digest, notes)
    elif not summary.header_sent:
        request = msgspec.structs.replace(request, system=None, tools=())
        notes.append(
            "sent without the conversation's system prompt and tools (the summarizer's chunker "
            "keeps no header, as the local model's does)"
        )
    shape, payload = _payload(bracket, request, max_tokens_field, notes)
    notes += _notes(bracket, session, keep_first_user)
    return RebuiltRequest(
        session_id=str(session_id),
        compaction_id=bracket.compaction_id,
        start_seq=bracket.start.seq,
        provider=summary.provider,
        model=requested_model(summary),
        shape=shape,
        request=request,
        payload=payload,
        notes=notes,
        digest=summary.digest,
    )


def digested_request(request: SummaryRequest, record: DigestRecord, notes: list[str]) -> SummaryRequest:
    """``request`` as a digesting summarizer sent it: its messages digested again under the
    recorded budget and price, without the system prompt and tools when none were sent; what the
    digest did, and any difference from the recorded counts, go to ``notes``."""
    digest = _redigest(request, record)
    notes.append(digest_note(record))
    differences = digest_differences(record, digest)
    if differences:
        notes.append(
            "the digest rebuilt today differs from the recorded one ("
            + ", ".join(differences)
            + "): the code that digests or prices messages changed since; these are today's "
            "digested messages, not necessarily the ones sent"
        )
    sent = msgspec.structs.replace(request, messages=digest.messages)
    if record.header:
        return sent
    notes.append(
        "the conversation's system prompt and tools were left out of the request, as the summarizer sent it"
    )
    return msgspec.structs.replace(sent, system=None, tools=())


def _redigest(request: SummaryRequest, record: DigestRecord) -> Digest:
    where = f"compaction {request.compaction_id}"
    try:
        estimate = estimate_named(record.meter, record.ratio)
    except CompactionConfigError as e:
        raise UnrebuildableError(
            f"{where} was sent as a digest priced by {record.meter!r}, which the audit cannot price "
            f"again ({e}); a DigestSummarizer given a meter's .message (or local_estimate of one) "
            "records it by name"
        ) from e
    try:
        return digest_span(request.messages, record.budget, estimate, compaction_id=request.compaction_id)
    except ContextLengthError as e:
        raise UnrebuildableError(
            f"{where}: the recorded digest (budget {record.budget} tokens) cannot be rebuilt: {e}"
        ) from e


def digest_note(record: DigestRecord) -> str:
    """What the digest did, in one sentence."""
    price = record.meter if record.ratio == 1.0 else f"{record.meter} x {record.ratio:g}"
    window = f", window {record.window}" if record.window is not None else ""
    return (
        f"the span was sent as a digest (compaction.summarizers.digest): {record.messages} of "
        f"{record.source_messages} messages, {record.tokens} of {record.source_tokens} estimated "
        f"tokens under a budget of {record.budget} (priced by {price}{window}); {record.condensed} "
        f"condensed, {record.elided} of older turns elided and {record.dropped_asks} of the user's "
        f"own from those turns too, {record.cut} cut to head and tail. These are the digested "
        "messages as sent; the log keeps every message"
    )


def digest_differences(record: DigestRecord, digest: Digest) -> list[str]:
    """The recorded counts a rebuilt ``digest`` does not reproduce, as ``name recorded -> rebuilt``."""
    pairs = {
        "messages": (record.messages, len(digest.messages)),
        "tokens": (record.tokens, digest.tokens),
        "source_messages": (record.source_messages, digest.source_messages),
        "source_tokens": (record.source_tokens, digest.source_tokens),
        "condensed": (record.condensed, digest.condensed),
        "elided": (record.elided, digest.elided_messages),
        "dropped_asks": (record.dropped_asks, digest.dropped_asks),
        "cut": (record.cut, digest.cut),
    }
    return [f"{name} {was} -> {now}" for name, (was, now) in pairs.items() if was != now]


def _session_at(session_id: UUID, events: Sequence[SessionEvent], seq: int) -> Session:
    """The session as it was right after ``compact/start`` (the request was built then)."""
    try:
        return Session.replay(session_id, events[: seq + 1], strict_structure=False)
    except EventRuleError as e:
        raise UnrebuildableError(
            f"session {session_id}: the log before compact/start seq {seq} breaks a rule, so the "
            f"surface the request was built from cannot be folded: {e}"
        ) from e


def _payload(
    bracket: Bracket, request: SummaryRequest, field_name: MaxTokensField, notes: list[str]
) -> tuple[str, dict[str, Any]]:
    assert bracket.summary is not None
    provider, model = bracket.summary.provider, requested_model(bracket.summary)
    if bracket.imported:
        notes.append(
            f"imported {provider} compaction: the harness's own request is not in the log; this is "
            "the request this library sends for the same span"
        )
        return "summary-request", _builtins(request)
    shape = request_shape(provider)
    if shape == "summary-request":
        return shape, _builtins(request)
    if provider not in SUMMARIZERS:
        notes.append(f"provider {provider!r} is taken as OpenAI-compatible (chat completions)")
    return shape, build_payload(shape, request, model, max_tokens_field=field_name)


def request_shape(provider: str) -> RequestShape:
    """The shape of the request recorded under ``provider``: the registered summarizer's, the
    SummaryRequest itself for a strategy, else (``provider=`` renamed an OpenAI-compatible
    summarizer, e.g. ``vllm``) an OpenAI chat-completions body."""
    if provider in STRATEGY_PROVIDERS:
        return "summary-request"
    return SUMMARIZERS.request_shape(provider) or "openai"


def _builtins(request: SummaryRequest) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.to_builtins(request)
    return data


def _notes(bracket: Bracket, session: Session, keep_first_user: bool) -> list[str]:
    assert bracket.summary is not None
    summary = bracket.summary
    notes: list[str] = []
    first = leading_task_statement(session, summary.shadowed_seqs) if keep_first_user else None
    if first is not None:
        notes.append(f"the protected first user message (seq {first}, not shadowed) leads the messages")
    if summary.chunks > 1:
        notes.append(
            f"the span was summarized in {summary.chunks} chunks and merged: these messages were "
            "sent as several requests cut at tool-unit boundaries"
        )
    offline = request_shape(summary.provider) == "summary-request"
    if summary.request_model is None and not offline and not bracket.imported:
        notes.append(
            f"the log records no requested model (written before request_model existed); "
            f"{summary.model!r}, the model that answered, is assumed"
        )
    return notes


def requested_model(summary: CompactSummary) -> str:
    """The model the request named (older logs record only the model that answered)."""
    return summary.request_model or summary.model
