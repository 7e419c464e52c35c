"""Known context windows of the common model families, so an imported session needs no ``--window``.

The one table of the library: :data:`KNOWN_WINDOWS` maps a model-name prefix to the largest prompt
the model accepts, in tokens (for GPT-5 that is the 272k input limit, not the 400k that counts the
output too). A model name is normalised before lookup (lower case; a provider path such as
``anthropic/`` or ``meta-llama/``, a Bedrock vendor prefix such as ``us.anthropic.``, a date or
an Ollama ``:tag`` suffix do not matter) and the longest matching prefix wins, so ``gpt-4o-mini``
finds ``gpt-4o`` and not ``gpt-4``.

Where the window comes from, first match wins (:meth:`BasicCompactService.context_window
<compaction.service.BasicCompactService.context_window>`): ``BasicConfig.context_window`` (``--window``),
the ``context_window`` recorded on the latest ``request/header``, then this table. Users extend or
correct it without editing it: ``WindowTable().with_overrides({"my-finetune": 32_768})``, passed as
``BasicCompactService(windows=...)``. The figures are the vendors' published ones (December 2026);
where a family's members differ, the smaller figure is the family's default and the larger members
are listed by name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from compaction.errors import CompactionConfigError
from compaction.sessions.events import RequestHeader

KNOWN_WINDOWS: Mapping[str, int] = MappingProxyType(
    {
        # Anthropic Claude: 200k since Claude 3 (the 1M Sonnet window is an opt-in beta)
        "claude": 200_000,
        "claude-2": 100_000,
        "claude-instant": 100_000,
        # OpenAI
        "gpt-3.5-turbo": 16_385,
        "gpt-4": 8_192,
        "gpt-4-32k": 32_768,
        "gpt-4-turbo": 128_000,
        "gpt-4-1106": 128_000,
        "gpt-4-0125": 128_000,
        "gpt-4o": 128_000,
        "gpt-4.1": 1_047_576,
        "gpt-4.5": 128_000,
        "gpt-5": 272_000,
        "gpt-oss": 131_072,
        "o1": 200_000,
        "o1-mini": 128_000,
        "o3": 200_000,
        "o4-mini": 200_000,
        "codex-mini": 200_000,
        # Google Gemini
        "gemini": 1_048_576,
        "gemini-pro": 32_760,
        "gemini-1.0": 32_760,
        "gemini-1.5-pro": 2_097_152,
        # DeepSeek (API and open weights)
        "deepseek": 128_000,
        "deepseek-coder": 16_384,
        "deepseek-coder-v2": 128_000,
        # Qwen (native windows; YaRN extensions are a deployment choice)
        "qwen": 32_768,
        "qwen-plus": 131_072,
        "qwen-turbo": 1_000_000,
        "qwen-long": 10_000_000,
        "qwen2.5-1m": 1_010_000,
        "qwen3-coder": 262_144,
        "qwq": 131_072,
        # Meta Llama
        "llama": 4_096,
        "llama-3": 8_192,
        "llama-3.1": 131_072,
        "llama-3.2": 131_072,
        "llama-3.3": 131_072,
        "llama-4": 1_048_576,
        "codellama": 16_384,
        # Mistral
        "mistral": 32_768,
        "mistral-large": 131_072,
        "mistral-medium": 131_072,
        "mistral-small": 131_072,
        "mistral-nemo": 131_072,
        "open-mistral-nemo": 131_072,
        "open-mistral-7b": 32_768,
        "open-mixtral-8x7b": 32_768,
        "open-mixtral-8x22b": 65_536,
        "mixtral-8x7b": 32_768,
        "mixtral-8x22b": 65_536,
        "codestral": 256_000,
        "devstral": 131_072,
        "ministral": 131_072,
        "magistral": 40_000,
        "pixtral": 131_072,
    }
)
"""Model-name prefix (normalised, see :func:`normalise`) -> context window in tokens."""

_VENDOR = re.compile(r"^(?:[a-z]{2}\.)?(?:anthropic|meta|mistral|amazon|deepseek|qwen|google)\.")


def normalise(model: str) -> str:
    """The form a model name is looked up in: ``anthropic/claude-sonnet-4-5-20250929`` ->
    ``claude-sonnet-4-5-20250929``, ``us.anthropic.claude-3-5-sonnet-v2:0`` ->
    ``claude-3-5-sonnet-v2``, ``Meta-Llama-3.1-8B-Instruct`` -> ``llama-3.1-8b-instruct``,
    ``llama3.1:8b`` -> ``llama-3.1``, ``openai/openrouter-llama-4-maverick`` -> ``llama-4-maverick``."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    name = _VENDOR.sub("", name).split(":", 1)[0]
    name = name.removeprefix("openrouter-").removeprefix("meta-").replace("_", "-")
    name = re.sub(r"^llama(\d)", r"llama-\1", name)  # Ollama's llama3.1 is llama-3.1
    return re.sub(r"^qwen-(\d)", r"qwen\1", name)  # OpenRouter's qwen-2.5 is qwen2.5


@dataclass(frozen=True)
class WindowTable:
    """Prefix -> window, longest prefix first; :data:`KNOWN_WINDOWS` unless given another."""

    entries: Mapping[str, int] = field(default_factory=lambda: KNOWN_WINDOWS)

    def __post_init__(self) -> None:
        for prefix, tokens in self.entries.items():
            if not isinstance(prefix, str) or not prefix.strip():
                raise CompactionConfigError(
                    f"context window table: a model prefix must be a non-empty string; got {prefix!r}"
                )
            if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens <= 0:
                raise CompactionConfigError(
                    f"context window table: the window of {prefix!r} must be a positive integer; "
                    f"got {tokens!r}"
                )

    def with_overrides(self, overrides: Mapping[str, int]) -> WindowTable:
        """This table with ``overrides`` added or replacing entries (prefixes are normalised)."""
        merged = dict(self.entries)
        merged.update({normalise(prefix): tokens for prefix, tokens in overrides.items()})
        return WindowTable(MappingProxyType(merged))

    def lookup(self, model: str) -> int | None:
        """The window of ``model`` (any spelling :func:`normalise` accepts), or None."""
        match = self.match(model)
        return None if match is None else self.entries[match]

    def match(self, model: str) -> str | None:
        """The table prefix ``model`` resolves to, or None."""
        name = normalise(model)
        best: str | None = None
        for prefix in self.entries:
            if name.startswith(prefix) and (best is None or len(prefix) > len(best)):
                best = prefix
        return best

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(sorted(self.entries.items()))


DEFAULT_WINDOWS = WindowTable()


def header_window(header: RequestHeader | None, table: WindowTable | None = None) -> tuple[int, str] | None:
    """The context window a session's latest ``request/header`` gives, and where it comes from:
    the window recorded on it, else the known window of its model (``table``, default
    :data:`KNOWN_WINDOWS`); None when neither says."""
    if header is None:
        return None
    if header.context_window:
        return header.context_window, f"recorded on request/header seq {header.seq}"
    known = (table or DEFAULT_WINDOWS).lookup(header.model)
    if known is None:
        return None
    return known, f"the known window of {model_name(header)}"


def model_name(header: RequestHeader) -> str:
    """``provider/model`` for people, the provider named once when the model's name already starts
    with it (``openai/openrouter-llama-4-maverick``, not ``openai/openai/...``)."""
    if header.model.startswith(f"{header.provider}/"):
        return header.model
    return f"{header.provider}/{header.model}"


def known_window(model: str) -> int | None:
    """The context window :data:`KNOWN_WINDOWS` gives ``model``, or None."""
    return DEFAULT_WINDOWS.lookup(model)
