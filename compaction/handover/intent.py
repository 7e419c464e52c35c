"""The agent's stated intent: the last sentence of its text that says what it does next ("Let me
...", "Next, I'll ..."), from its texts after the user's last ask."""

from __future__ import annotations

import re

from compaction.handover.harness_text import FENCE_RE
from compaction.handover.identifiers import clip_words
from compaction.handover.walk import Walk

INTENT_RE = re.compile(
    r"^(?:(?:now|next|then|first|finally|so|ok(?:ay)?|great|good|perfect)[,!.]?\s+)*"
    r"(?:let me|let's|let us|i'll|i will|i'm going to|i am going to|i need to|we need to|i should"
    r"|we should|i'm now going to|(?:the )?next step\b|now i)\b",
    re.I,
)
SENTENCE_RE = re.compile(r"(?<=[.!?])\s+|\n+")


def span_intent(walk: Walk) -> str | None:
    """The agent's latest statement of what it does next, from its texts after the last ask."""
    for position, text in reversed(walk.agent_texts):
        if position < walk.last_ask_at:
            break
        found = intent_of(text)
        if found is not None:
            return found
    return None


def intent_of(text: str) -> str | None:
    """The last sentence of an agent's text that says what it does next ("Let me ...",
    "Next, I'll ..."), clipped; None when no sentence does."""
    sentences = [s.strip(" -*#") for s in SENTENCE_RE.split(FENCE_RE.sub(" ", text)) if s.strip()]
    for sentence in reversed(sentences):
        if INTENT_RE.match(sentence):
            return clip_words(sentence, 300)
    return None
