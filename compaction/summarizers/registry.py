"""The summarizers by name: one table read by ``compaction compact --summarizer NAME`` and by the
audit when it rebuilds a recorded request.

    name        request shape        opens
    template    summary-request      TemplateSummarizer() (offline, the default)
    openai      openai               OpenAISummarizer(base_url, model)
    anthropic   anthropic            AnthropicSummarizer(base_url, model)
    local       openai               LocalModelServer (SmolLM2, held to the checkpoint grammar)
                                     + DigestSummarizer + ChunkingSummarizer over its endpoint

``SummarizerOptions.window_tokens`` (``--summarizer-window N``) is the summarizer's own context
window: ``local`` starts its server with that context (default :data:`LOCAL_CONTEXT_TOKENS`) and
chunks to it; ``openai`` and ``anthropic`` are wrapped in a ChunkingSummarizer of that window when
it is given (unbounded otherwise).

``SummarizerOptions.digest`` and ``digest_tokens`` (``--digest``/``--no-digest``,
``--digest-tokens N``) bound the model input per compaction: the span is sent as a digest of at
most that many tokens (:mod:`~compaction.summarizers.digest`). ``local`` digests by default, to what
one request of its window leaves for the messages, so a compaction costs one request whatever the
span's size; ``openai`` and ``anthropic`` send the whole span (chunked to a window when one is
given) unless ``--digest`` or ``--digest-tokens`` asks for a digest.

A :class:`SummarizerSpec` names a summarizer, the request shape it sends (so the audit knows
which payload builder rebuilt the body recorded under that provider name), and an opener: given
:class:`SummarizerOptions`, an async context manager that yields a ready summarizer and releases
it (connections, a local server) on exit::

    async with SUMMARIZERS.open("openai", SummarizerOptions(model="gpt-4o-mini")) as summarizer:
        ...

An unknown name raises :class:`~compaction.errors.UnknownSummarizerError` listing the known ones.
Importing this module loads no HTTP client (see :mod:`~compaction.summarizers.transport`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Literal

from compaction.engine.meters import HeuristicMeter
from compaction.errors import CompactionConfigError, UnknownSummarizerError
from compaction.summarizers.anthropic import AnthropicSummarizer
from compaction.summarizers.chunking import ChunkingSummarizer
from compaction.summarizers.digest import DigestSummarizer
from compaction.summarizers.http import HttpSummarizer
from compaction.summarizers.local import LocalModelServer, checkpoint_grammar, local_estimate
from compaction.summarizers.openai import OpenAISummarizer
from compaction.summarizers.template import TemplateSummarizer
from compaction.summarizers.transport import Transport
from compaction.vocabulary.summarizer import Summarizer

RequestShape = Literal["openai", "anthropic", "summary-request"]
"""The body a summarizer sends: an OpenAI or Anthropic payload, or (offline summarizers) the
:class:`~compaction.vocabulary.summarizer.SummaryRequest` itself."""

LOCAL_CONTEXT_TOKENS = 4096
LOCAL_MAX_TOKENS = 512
"""The generation cap for ``local``: the embedded model's window cannot take the 8192 default."""
LOCAL_BULLET_CHARS = 120
"""Characters of one bullet of the ``local`` checkpoint grammar: room for a path or a command
verbatim with a few words around it (40 could not carry a 44-character path). Eight full bullets
of paths and commands stay under :data:`LOCAL_MAX_TOKENS`: SmolLM2's tokenizer counts 2.8
characters a token on such text (4.9 on English), so 8 x (43 + 8 for the heading) = 408 tokens;
at 160 characters they would be 528, over the cap (``TruncatedError``)."""


@dataclass(frozen=True, kw_only=True)
class SummarizerOptions:
    """What a caller may choose: ``base_url`` and ``model`` (a GGUF path for ``local``), an
    ``api_key`` (else the provider's environment variable), a ``transport`` (tests),
    ``window_tokens``: the summarizer's context window (spans larger are chunked to it), and the
    digest (see the module)."""

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    transport: Transport | None = None
    window_tokens: int | None = None
    digest: bool | None = None
    """Send the span as a digest: None takes the summarizer's default (``local`` only)."""
    digest_tokens: int | None = None
    """The digest's input budget (implies ``digest``); None: what one request of the window leaves."""
    abandon_on_cancel: bool = False
    """``local``: when the run is cancelled (Ctrl-C), let the server go at once instead of waiting
    for the reply it is generating (:meth:`LocalModelServer.abandon`); for a process about to end
    (the command line), never for a long-lived one."""

    def __post_init__(self) -> None:
        _positive("the summarizer window (window_tokens, --summarizer-window)", self.window_tokens)
        _positive("the digest's input budget (digest_tokens, --digest-tokens)", self.digest_tokens)
        if self.digest is False and self.digest_tokens is not None:
            raise CompactionConfigError(
                f"digest=False (--no-digest) contradicts digest_tokens={self.digest_tokens} "
                "(--digest-tokens): give one or the other"
            )

    def digests(self, default: bool) -> bool:
        """Whether to send a digest, for a summarizer whose own default is ``default``."""
        if self.digest_tokens is not None:
            return True
        return default if self.digest is None else self.digest


def _positive(what: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise CompactionConfigError(f"{what} must be a positive number of tokens, got {value!r}")


Opener = Callable[[SummarizerOptions], AbstractAsyncContextManager[Summarizer]]


@dataclass(frozen=True, kw_only=True)
class SummarizerSpec:
    name: str
    help: str
    shape: RequestShape
    open: Opener
    default_max_tokens: int | None = None
    """The generation cap to use when the caller sets none (None: the configuration default)."""


class SummarizerRegistry:
    """Summarizer specs by name, in registration order."""

    def __init__(self, specs: Iterable[SummarizerSpec] = ()) -> None:
        self._specs: dict[str, SummarizerSpec] = {}
        for spec in specs:
            self.register(spec)

    def register(self, spec: SummarizerSpec) -> None:
        if not spec.name:
            raise CompactionConfigError("a summarizer needs a non-empty name")
        if spec.name in self._specs:
            raise CompactionConfigError(f"a summarizer named {spec.name!r} is already registered")
        self._specs[spec.name] = spec

    def names(self) -> tuple[str, ...]:
        return tuple(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[SummarizerSpec]:
        return iter(self._specs.values())

    def get(self, name: str) -> SummarizerSpec:
        """The spec named ``name``; :class:`UnknownSummarizerError` lists the known names."""
        try:
            return self._specs[name]
        except KeyError:
            raise UnknownSummarizerError(name, self.names()) from None

    def open(
        self, name: str, options: SummarizerOptions | None = None
    ) -> AbstractAsyncContextManager[Summarizer]:
        """The summarizer ``name`` with ``options``, ready inside ``async with``."""
        return self.get(name).open(options or SummarizerOptions())

    def request_shape(self, provider: str) -> RequestShape | None:
        """The request shape recorded under ``provider``, or None for a name nobody registered."""
        spec = self._specs.get(provider)
        return spec.shape if spec is not None else None


# ---------------------------------------------------------------- the built-in summarizers


@asynccontextmanager
async def _closing(summarizer: Summarizer) -> AsyncIterator[Summarizer]:
    try:
        yield summarizer
    finally:
        await summarizer.aclose()


def _model(name: str, options: SummarizerOptions) -> str:
    if not options.model:
        raise CompactionConfigError(
            f"summarizer {name} needs a model name (--model NAME on the command line)"
        )
    return options.model


def _open_template(options: SummarizerOptions) -> AbstractAsyncContextManager[Summarizer]:
    return _closing(TemplateSummarizer())


def _windowed(summarizer: Summarizer, options: SummarizerOptions) -> Summarizer:
    """``summarizer`` chunked to ``options.window_tokens`` when one is given, then digested when
    the options ask for it (see the module)."""
    estimate = HeuristicMeter().message
    if options.window_tokens is not None:
        summarizer = ChunkingSummarizer(summarizer, options.window_tokens, estimate)
    if not options.digests(default=False):
        return summarizer
    return DigestSummarizer(summarizer, estimate, tokens=options.digest_tokens)


def _check_digest(name: str, options: SummarizerOptions) -> None:
    """A remote summarizer's digest needs a budget: refused before anything is opened."""
    if options.digests(default=False) and options.digest_tokens is None and options.window_tokens is None:
        raise CompactionConfigError(
            f"summarizer {name}: a digest needs an input budget: --digest-tokens N, or "
            "--summarizer-window N to fill one request of that window"
        )


def _open_openai(options: SummarizerOptions) -> AbstractAsyncContextManager[Summarizer]:
    _check_digest("openai", options)
    summarizer: HttpSummarizer = OpenAISummarizer(
        options.base_url, _model("openai", options), api_key=options.api_key, transport=options.transport
    )
    return _closing(_windowed(summarizer, options))


def _open_anthropic(options: SummarizerOptions) -> AbstractAsyncContextManager[Summarizer]:
    _check_digest("anthropic", options)
    summarizer: HttpSummarizer = AnthropicSummarizer(
        options.base_url, _model("anthropic", options), api_key=options.api_key, transport=options.transport
    )
    return _closing(_windowed(summarizer, options))


@asynccontextmanager
async def _open_local(options: SummarizerOptions) -> AsyncIterator[Summarizer]:
    # A grammar holds the small embedded model to the eight-section checkpoint structure, short
    # enough (8 one-line bullets of <= LOCAL_BULLET_CHARS characters) that it ends under the
    # default cap; greedy sampling makes a run repeatable.
    server = LocalModelServer(
        options.model,
        context_tokens=options.window_tokens or LOCAL_CONTEXT_TOKENS,
        grammar=checkpoint_grammar(bullets=1, bullet_chars=LOCAL_BULLET_CHARS),
        sampling={"temp": 0.0, "seed": 7},
        abandon_on_cancel=options.abandon_on_cancel,
    )
    async with server:
        # The embedded model's window is small: summarize oversize spans in balanced chunks priced
        # by its own tokenizer's ratio, cut a unit that alone cannot fit (tool output, file
        # contents), and leave out the conversation's system prompt and tools (no cache to share).
        # By default the span goes as a digest that fills one request: one model call per
        # compaction, whatever the span's size (--no-digest: every message, chunked and merged).
        estimate = local_estimate(HeuristicMeter().message)
        summarizer: Summarizer = ChunkingSummarizer(
            server.summarizer(transport=options.transport),
            server.context_tokens,
            estimate,
            elide=True,
            keep_header=False,
        )
        if options.digests(default=True):
            summarizer = DigestSummarizer(summarizer, estimate, tokens=options.digest_tokens)
        async with _closing(summarizer) as s:
            yield s


SUMMARIZERS = SummarizerRegistry(
    [
        SummarizerSpec(
            name="template",
            help="offline, deterministic, extractive (the default)",
            shape="summary-request",
            open=_open_template,
        ),
        SummarizerSpec(
            name="openai",
            help="an OpenAI-compatible /v1/chat/completions server (--base-url, --model)",
            shape="openai",
            open=_open_openai,
        ),
        SummarizerSpec(
            name="anthropic",
            help="Anthropic /v1/messages (--model; key from ANTHROPIC_API_KEY)",
            shape="anthropic",
            open=_open_anthropic,
        ),
        SummarizerSpec(
            name="local",
            help="the embedded llama.cpp server with SmolLM2 (or --model GGUF), for this run",
            shape="openai",
            open=_open_local,
            default_max_tokens=LOCAL_MAX_TOKENS,
        ),
    ]
)
"""The summarizers the command line offers and the audit recognises."""


def summarizer_names() -> tuple[str, ...]:
    return SUMMARIZERS.names()


def get_summarizer(name: str) -> SummarizerSpec:
    """The built-in summarizer ``name``; :class:`UnknownSummarizerError` lists the known names."""
    return SUMMARIZERS.get(name)


def open_summarizer(
    name: str, options: SummarizerOptions | None = None
) -> AbstractAsyncContextManager[Summarizer]:
    """``async with open_summarizer("openai", SummarizerOptions(model=...)) as summarizer``."""
    return SUMMARIZERS.open(name, options)
