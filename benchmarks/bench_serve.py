"""The HTTP service against the store alone: 1,000 concurrent conversations, each round an append
(one turn with a tool call, If-Match), the surface (OpenAI shape) and a compact-if-needed.

Per store (SQLite, then PostgreSQL), the same workload runs three ways in one run:

- **store alone**: the service's own operations (:class:`compaction.serve.host.Host`: the worker
  thread, the session lock, the recorder, the engine) called in-process, no HTTP;
- **one process**: ``compaction serve`` as a process, driven over HTTP by an aiohttp client;
- **several processes**: :data:`PROCESSES` ``compaction serve`` processes behind the same store,
  each conversation always sent to the same one.

Two measures each: **throughput**, every conversation doing one round as fast as it can (requests
per second, service / store alone), and **latency** under an agent's load, every conversation doing
a round every :data:`PERIOD` seconds (an agent waits seconds for its model between two rounds;
1,000 conversations offer 1000/PERIOD rounds per second), p50 and p99 of one request. Target: the
p99 service overhead (service p99 minus store-alone p99, same load, same run) at most
:data:`OVERHEAD_TARGET_MS` ms for one process. The client runs on the same machine and its time is
counted in the service's latency.

    .venv/bin/python -m benchmarks.bench_serve            # SQLite and PostgreSQL
    .venv/bin/python -m benchmarks.run serve
    .venv/bin/python -m benchmarks.bench_serve --quick    # 200 conversations, SQLite only

PostgreSQL: ``$COMPACTION_BENCH_PG`` (default ``postgresql://postgres@127.0.0.1:5432``).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_scaleout import PG_BASE, scratch_database
from benchmarks.common import Result, scratch_dir

CONVERSATIONS = 1000
PERIOD = 20.0
ROUNDS = 2
PROCESSES = 2
WINDOW = 4000
WARM_TURNS = 2
OVERHEAD_TARGET_MS = 5.0
ROOT = Path(__file__).resolve().parent.parent

Probe = Callable[[], Awaitable[object]]
PROBE_EVERY = 0.05
Round = Callable[[int, int], Awaitable[list[tuple[float, float, float]]]]
"""(conversation, turn) -> per request of the round: the seconds it took, and of those the seconds
the service spent in the store work and in the application (the store alone: all of them)."""


def turn_items(conversation: int, turn: int) -> list[dict[str, Any]]:
    call = f"call_{conversation}_{turn}"
    output = "\n".join(
        f"src/pkg_{conversation}/mod_{turn}.py:{n}: value_{n} = compute({n})" for n in range(30)
    )
    return [
        {
            "role": "user",
            "content": f"Conversation {conversation} turn {turn}: fix src/pkg_{conversation}/mod_{turn}.py",
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call,
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "pytest"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call, "content": f"ERROR ValueError in mod_{turn}\n{output}"},
        {"role": "assistant", "content": f"Fixed mod_{turn}."},
    ]


@dataclass
class Measured:
    """One way of running the workload: the throughput run and the latency run."""

    requests: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    overheads: list[float] = field(default_factory=list)
    """Per request of the latency run: its latency minus the store time the service reported for
    it (``Server-Timing: store``): what HTTP, JSON and the client added."""
    probes: list[float] = field(default_factory=list)
    """``GET /healthz`` under the same load: an HTTP round trip with no work, the floor of what a
    request costs on this machine beside the store (aiohttp, the network, both event loops)."""
    in_app: list[float] = field(default_factory=list)
    """Per request: the application's time minus the store time (``Server-Timing: app - store``):
    the handler's own share of the overhead; the rest is aiohttp's, the network's, the client's."""

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def percentile(self, q: float, of: list[float] | None = None) -> float:
        ordered = sorted(self.latencies if of is None else of)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def measure(
    round_of: Round, conversations: int, rounds: int, period: float, probe: Probe | None = None
) -> Measured:
    """Throughput: one round per conversation, all at once. Latency: ``rounds`` rounds each,
    ``period`` seconds apart, the conversations' starts spread over one period; meanwhile
    ``probe`` (when given) is timed every :data:`PROBE_EVERY` seconds."""
    found = Measured()
    start = time.perf_counter()
    burst = await asyncio.gather(*(round_of(n, WARM_TURNS) for n in range(conversations)))
    found.seconds = time.perf_counter() - start
    found.requests = sum(len(r) for r in burst)

    async def paced(n: int) -> None:
        await asyncio.sleep(random.uniform(0, period))
        for r in range(rounds):
            began = time.perf_counter()
            for latency, store, app in await round_of(n, WARM_TURNS + 1 + r):
                found.latencies.append(latency)
                found.overheads.append(latency - store)
                found.in_app.append(app - store)
            await asyncio.sleep(max(0.0, period - (time.perf_counter() - began)))

    async def probing() -> None:
        while probe is not None:
            began = time.perf_counter()
            await probe()
            found.probes.append(time.perf_counter() - began)
            await asyncio.sleep(PROBE_EVERY)

    prober = asyncio.ensure_future(probing())
    await asyncio.gather(*(paced(n) for n in range(conversations)))
    prober.cancel()
    return found


# ---------------------------------------------------------------- the store alone


async def store_alone(url: str, conversations: int, rounds: int, period: float) -> Measured:
    from compaction.serve.host import Host
    from compaction.serve.shapes import Append, CompactRequest, NewSession
    from compaction.sessions.store import SessionStore

    with SessionStore.open(url) as store:
        host = Host(store)
        ids: list[UUID] = []
        for n in range(conversations):
            info = host.create(NewSession("openai", "gpt-4o", window=WINDOW))
            ids.append(info.id)
            for t in range(WARM_TURNS):
                host.append(info.id, Append("openai", turn_items(n, t)), None, None)
        versions = {i: host.load(i).saved_length for i in ids}

        async def round_of(n: int, turn: int) -> list[tuple[float, float]]:
            key = ids[n]
            times = []
            began = time.perf_counter()
            done = await host.call(
                key, lambda: host.append(key, Append("openai", turn_items(n, turn)), versions[key], None)
            )
            times.append(time.perf_counter() - began)
            began = time.perf_counter()
            await host.call(key, lambda: host.surface(key, "openai", None))
            times.append(time.perf_counter() - began)
            began = time.perf_counter()
            compacted = await host.call(key, lambda: host.compact(key, CompactRequest(), None))
            times.append(time.perf_counter() - began)
            versions[key] = max(done.version, compacted.version)
            return [(t, t, t) for t in times]  # the store alone: all of it is store time

        return await measure(round_of, conversations, rounds, period)


# ---------------------------------------------------------------- the service


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def servers(url: str, count: int, log: Path) -> Iterator[list[str]]:
    env = {k: v for k, v in os.environ.items() if k != "COMPACTION_STORE"}
    started: list[tuple[subprocess.Popen[bytes], str]] = []
    try:
        for _ in range(count):
            port = free_port()
            command = [
                sys.executable,
                "-m",
                "compaction.cli.main",
                "--store",
                url,
                "serve",
                "--port",
                str(port),
            ]
            with log.open("ab") as out:
                process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out)
            started.append((process, f"http://127.0.0.1:{port}"))
        for process, base in started:
            _wait(process, base, log)
        yield [base for _, base in started]
    finally:
        for process, _ in started:
            process.terminate()
        for process, _ in started:
            process.wait(timeout=120)


def _wait(process: subprocess.Popen[bytes], base: str, log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"compaction serve exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"compaction serve did not start: {log.read_text()[-2000:]}")


async def service(bases: list[str], conversations: int, rounds: int, period: float) -> Measured:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as http:

        async def request(
            method: str, path: str, body: Any = None, **headers: str
        ) -> tuple[Any, str, float, float]:
            """The answer, its ETag, and the store and application times the service reported."""
            async with http.request(method, path, json=body, headers=headers) as response:
                raw = await response.read()  # decoded only when needed: the client's time counts too
                if response.status >= 400:
                    raise RuntimeError(f"{method} {path}: {response.status} {raw[:500]!r}")
                answer = json.loads(raw) if path.endswith("/sessions") else None
                timing = {
                    name.strip(): float(value) / 1e3
                    for name, _, value in (
                        part.partition(";dur=") for part in response.headers["Server-Timing"].split(",")
                    )
                }
                return answer, response.headers.get("ETag", ""), timing["store"], timing["app"]

        sessions: dict[int, tuple[str, str]] = {}

        async def create(n: int) -> None:
            body = {"provider": "openai", "model": "gpt-4o", "window": WINDOW}
            info, etag, _, _ = await request("POST", f"{bases[n % len(bases)]}/v1/sessions", body)
            path = f"{bases[n % len(bases)]}/v1/sessions/{info['id']}"
            for t in range(WARM_TURNS):
                items = {"format": "openai", "items": turn_items(n, t)}
                _, etag, _, _ = await request("POST", f"{path}/items", items, **{"If-Match": etag})
            sessions[n] = (path, etag)

        for chunk in range(0, conversations, 100):
            await asyncio.gather(*(create(n) for n in range(chunk, min(conversations, chunk + 100))))

        async def round_of(n: int, turn: int) -> list[tuple[float, float]]:
            path, etag = sessions[n]
            times = []
            began = time.perf_counter()
            items = {"format": "openai", "items": turn_items(n, turn)}
            _, etag, store, app = await request("POST", f"{path}/items", items, **{"If-Match": etag})
            times.append((time.perf_counter() - began, store, app))
            began = time.perf_counter()
            _, _, store, app = await request("GET", f"{path}/surface?format=openai")
            times.append((time.perf_counter() - began, store, app))
            began = time.perf_counter()
            _, etag, store, app = await request("POST", f"{path}/compact", {"mode": "if_needed"})
            times.append((time.perf_counter() - began, store, app))
            sessions[n] = (path, etag)
            return times

        async def probe() -> None:
            async with http.get(f"{bases[0]}/healthz") as response:
                await response.read()

        return await measure(round_of, conversations, rounds, period, probe)


# ---------------------------------------------------------------- the report


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def rows(store: str, conversations: int, alone: Measured, one: Measured, several: Measured) -> list[Result]:
    label = f"serve ({store}, {conversations} conversations)"
    found = []
    for name, measured in (("one process", one), (f"{PROCESSES} processes", several)):
        found.append(
            Result(
                f"{label}: requests/s, {name}",
                f"{measured.rps:.0f} req/s",
                f"{alone.rps:.0f} req/s store alone",
                measured.rps / alone.rps,
                None,
                True,
            )
        )
        found.append(
            Result(
                f"{label}: latency p50 / p99, {name}",
                f"{ms(measured.percentile(0.5))} / {ms(measured.percentile(0.99))}",
                f"{ms(alone.percentile(0.5))} / {ms(alone.percentile(0.99))} store alone",
                measured.percentile(0.99) / max(alone.percentile(0.99), 1e-9),
                None,
                False,
            )
        )
        p50, p99 = (measured.percentile(q, measured.overheads) * 1e3 for q in (0.5, 0.99))
        in_app = measured.percentile(0.99, measured.in_app) * 1e3
        floor50, floor99 = (measured.percentile(q, measured.probes) for q in (0.5, 0.99))
        target = OVERHEAD_TARGET_MS if name == "one process" else None
        found.append(
            Result(
                f"{label}: service overhead per request p99 (latency minus its store time), {name}",
                f"{p99:.1f} ms (p50 {p50:.1f} ms; in the handler p99 {in_app:.1f} ms)",
                f"0 ms: the store alone; GET /healthz under the same load {ms(floor50)} / {ms(floor99)}",
                p99,
                target,
                False,
            )
        )
    return found


def run_store(
    store: str, url_for: Callable[[str], Any], conversations: int, rounds: int, period: float
) -> list[Result]:
    with scratch_dir("serve") as scratch:
        with url_for(str(scratch)) as url:
            alone = asyncio.run(store_alone(url, conversations, rounds, period))
        with url_for(str(scratch)) as url, servers(url, 1, scratch / "serve.log") as bases:
            one = asyncio.run(service(bases, conversations, rounds, period))
        with url_for(str(scratch)) as url, servers(url, PROCESSES, scratch / "serve.log") as bases:
            several = asyncio.run(service(bases, conversations, rounds, period))
    print(
        json.dumps(
            {"load_average_1m_5m_15m": [round(x, 1) for x in os.getloadavg()], "cpus": os.cpu_count()}
        ),
        file=sys.stderr,
    )
    print(
        json.dumps(
            {"store": store, "alone": _summary(alone), "one": _summary(one), "several": _summary(several)}
        ),
        file=sys.stderr,
    )
    return rows(store, conversations, alone, one, several)


def _summary(measured: Measured) -> dict[str, float]:
    return {
        "rps": round(measured.rps),
        "p50_ms": round(measured.percentile(0.5) * 1e3, 2),
        "p99_ms": round(measured.percentile(0.99) * 1e3, 2),
        "requests": measured.requests,
        "latency_samples": len(measured.latencies),
        "overhead_p99_ms": round(measured.percentile(0.99, measured.overheads) * 1e3, 2),
        "in_app_p99_ms": round(measured.percentile(0.99, measured.in_app) * 1e3, 2),
        "healthz_p50_ms": round(measured.percentile(0.5, measured.probes) * 1e3, 2),
        "healthz_p99_ms": round(measured.percentile(0.99, measured.probes) * 1e3, 2),
        "mean_ms": round(statistics.fmean(measured.latencies or [0]) * 1e3, 2),
    }


@contextmanager
def sqlite_url(scratch: str) -> Iterator[str]:
    path = Path(scratch) / f"sessions-{time.monotonic_ns()}.db"
    yield f"sqlite:///{path}"


@contextmanager
def postgres_url(scratch: str) -> Iterator[str]:
    with scratch_database(PG_BASE) as url:
        yield url


def run(
    conversations: int = CONVERSATIONS,
    rounds: int = ROUNDS,
    period: float = PERIOD,
    stores: tuple[str, ...] = ("sqlite", "postgresql"),
) -> list[Result]:
    urls = {"sqlite": sqlite_url, "postgresql": postgres_url}
    return [r for store in stores for r in run_store(store, urls[store], conversations, rounds, period)]


def run_quick() -> list[Result]:
    return run(conversations=200, rounds=2, period=4.0, stores=("sqlite",))


if __name__ == "__main__":
    from benchmarks.run import table

    print(table(run_quick() if "--quick" in sys.argv else run()))
