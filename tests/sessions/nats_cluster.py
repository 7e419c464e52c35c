"""A 3-node JetStream cluster on loopback for tests and benchmarks: three ``nats-server`` processes,
each with its own ports, ``store_dir`` and ``cluster { routes }`` to the other two.

:class:`LoopbackCluster` starts them, kills one with SIGKILL, restarts it, moves the leadership
of a store's streams to a chosen node, and says when every replica of a stream is current again.
:class:`KillAndRestart` kills a node in the middle of an operation and restarts it, and says
whether both happened while the operation ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"
NODES = 3
MISSING = "(no such stream)"


def store_streams(stream: str) -> tuple[str, ...]:
    """The streams of a JetStream store named ``stream``: its commits, its chunks and the streams
    of its key-value buckets (the snapshots, the compaction leases, the tracking records)."""
    return (
        stream, f"{stream}_chunks", f"KV_{stream}_snapshots", f"KV_{stream}_leases",
        f"KV_{stream}_tracking",
    )  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LoopbackCluster:
    """Three JetStream servers routed to each other on 127.0.0.1."""

    def __init__(self, folder: Path, name: str = "compaction-test") -> None:
        self.folder = folder
        self.name = name
        self.client_ports = [free_port() for _ in range(NODES)]
        self.route_ports = [free_port() for _ in range(NODES)]
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * NODES

    @property
    def url(self) -> str:
        return "nats://" + ",".join(f"127.0.0.1:{port}" for port in self.client_ports)

    def node_url(self, index: int) -> str:
        return f"nats://127.0.0.1:{self.client_ports[index]}"

    def _config(self, index: int) -> Path:
        routes = ", ".join(
            f"nats-route://127.0.0.1:{port}" for i, port in enumerate(self.route_ports) if i != index
        )
        store = self.folder / f"n{index}"
        store.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"n{index}.conf"
        path.write_text(
            f"server_name: n{index}\n"
            f"listen: 127.0.0.1:{self.client_ports[index]}\n"
            f'jetstream {{ store_dir: "{store}" }}\n'
            f"cluster {{\n  name: {self.name}\n  listen: 127.0.0.1:{self.route_ports[index]}\n"
            f"  routes: [{routes}]\n}}\n"
        )
        return path

    def start(self, index: int) -> None:
        log = (self.folder / f"n{index}.log").open("ab")
        self.processes[index] = subprocess.Popen(
            [SERVER, "-c", str(self._config(index))], stdout=log, stderr=log
        )
        log.close()

    def start_all(self, timeout: float = 30) -> None:
        """Start every node; return once a stream replicated on all of them can be created."""
        for index in range(NODES):
            self.start(index)
        self.wait_ready(timeout)
        deadline = time.monotonic() + timeout
        while not asyncio.run(_replicated_stream_created(self.url)):
            if time.monotonic() > deadline:
                raise AssertionError(f"the cluster did not place a 3-replica stream within {timeout} s")
            time.sleep(0.2)

    def kill(self, index: int) -> None:
        process = self.processes[index]
        assert process is not None, f"node {index} is not running"
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        self.processes[index] = None

    def stop_all(self) -> None:
        for index, process in enumerate(self.processes):
            if process is not None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
                self.processes[index] = None

    def wait_ready(self, timeout: float = 30) -> None:
        """Until JetStream answers on every running node (the meta group has a leader)."""
        deadline = time.monotonic() + timeout
        for index, process in enumerate(self.processes):
            if process is None:
                continue
            while not asyncio.run(_jetstream_answers(self.node_url(index))):
                if time.monotonic() > deadline:
                    raise AssertionError(f"node {index} did not serve JetStream within {timeout} s")
                time.sleep(0.2)

    def leader(self, stream: str, timeout: float = 30) -> int:
        """The index of the node that leads ``stream`` now."""
        deadline = time.monotonic() + timeout
        while True:
            name = asyncio.run(_leader_name(self.url, stream))
            if name is not None:
                return int(name.removeprefix("n"))
            if time.monotonic() > deadline:
                raise AssertionError(f"stream {stream}: no leader within {timeout} s")
            time.sleep(0.2)

    def lead_together(self, streams: Sequence[str], node: int, timeout: float = 60) -> list[str]:
        """Make ``node`` the leader of each of ``streams`` that exists (its leader is asked to step
        down until ``node`` is elected), so that killing ``node`` kills the leader of every one;
        the streams it leads."""
        deadline = time.monotonic() + timeout
        led: list[str] = []
        for stream in streams:
            while True:
                name = asyncio.run(_leader_name(self.url, stream, missing=MISSING))
                if name == MISSING:
                    break
                if name == f"n{node}":
                    led.append(stream)
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"stream {stream}: node {node} not elected within {timeout} s")
                if name is not None:
                    asyncio.run(_step_down(self.url, stream))
                time.sleep(0.3)
        return led

    def wait_current(self, stream: str, timeout: float = 60) -> None:
        """Until every stream of the store ``stream`` that exists (:func:`store_streams`: a bucket
        the node missed the creation of counts as much as the commits) has a leader and every
        other replica is current with no lag."""
        deadline = time.monotonic() + timeout
        for name in store_streams(stream):
            while not asyncio.run(_all_current(self.url, name)):
                if time.monotonic() > deadline:
                    raise AssertionError(f"stream {name}: replicas not current within {timeout} s")
                time.sleep(0.25)


class KillAndRestart:
    """SIGKILL node ``node`` ``after`` seconds from now and start it again ``down`` seconds after
    (on a thread), while the caller runs an operation; :meth:`check_inside` then says the kill and
    the restart both happened while that operation ran (a kill after the operation ended would
    prove nothing)."""

    def __init__(self, cluster: LoopbackCluster, node: int, after: float, down: float = 1.0) -> None:
        self.cluster = cluster
        self.node = node
        self.killed_at = 0.0
        self.restarted_at = 0.0
        self._thread = threading.Thread(target=self._run, args=(after, down))
        self._thread.start()

    def _run(self, after: float, down: float) -> None:
        time.sleep(after)
        self.cluster.kill(self.node)
        self.killed_at = time.monotonic()
        time.sleep(down)
        self.cluster.start(self.node)
        self.restarted_at = time.monotonic()

    def check_inside(self, started: float, finished: float, *, restarted: bool = True) -> None:
        """Assert the node was killed (and, with ``restarted``, started again) between ``started``
        and ``finished``, the operation's bounds on :func:`time.monotonic`."""
        self._thread.join()
        ran = f"the operation ran {finished - started:.1f} s"
        killed = self.killed_at - started
        assert started < self.killed_at < finished, f"node {self.node} killed at {killed:.1f} s; {ran}"
        if restarted:
            back = self.restarted_at - started
            assert self.restarted_at < finished, f"node {self.node} restarted at {back:.1f} s; {ran}"

    def wait_back(self, stream: str) -> None:
        """Until the restarted node serves JetStream and every replica of the store ``stream`` is
        current."""
        self._thread.join()
        self.cluster.wait_ready()
        self.cluster.wait_current(stream)


async def _quiet(error: Exception) -> None:
    """The helper's own connections try the stopped node too: not worth a traceback."""


async def _jetstream_answers(url: str) -> bool:
    import nats

    try:
        nc = await nats.connect(
            url, connect_timeout=2, allow_reconnect=False, error_cb=_quiet, max_reconnect_attempts=0
        )
    except Exception:
        return False
    try:
        await nc.jetstream(timeout=2).account_info()
        return True
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            await nc.close()


async def _replicated_stream_created(url: str) -> bool:
    import nats

    try:
        nc = await nats.connect(url.split(","), connect_timeout=2, error_cb=_quiet)
    except Exception:
        return False
    try:
        js = nc.jetstream(timeout=2)
        await js.add_stream(name="cluster_probe", subjects=["cluster_probe.>"], num_replicas=NODES)
        await js.delete_stream("cluster_probe")
        return True
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            await nc.close()


async def _step_down(url: str, stream: str) -> None:
    import nats

    try:
        nc = await nats.connect(url.split(","), connect_timeout=2, error_cb=_quiet)
    except Exception:
        return
    try:
        await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", b"", timeout=5)
    except Exception:
        return  # asked again while the leader is not the one wanted
    finally:
        with contextlib.suppress(Exception):
            await nc.close()


async def _leader_name(url: str, stream: str, missing: str | None = None) -> str | None:
    """The name of the node that leads ``stream``; None when nobody answers in time (or there
    is no leader now), ``missing`` when the stream does not exist."""
    info = await _stream_info(url, stream, missing)
    if isinstance(info, str):
        return info
    return info.cluster.leader if info is not None and info.cluster else None


async def _stream_info(url: str, stream: str, missing: str | None = None) -> Any:
    import nats
    import nats.js.errors

    try:
        nc = await nats.connect(url.split(","), connect_timeout=2, error_cb=_quiet)
    except Exception:
        return None
    try:
        return await nc.jetstream(timeout=2).stream_info(stream)
    except nats.js.errors.NotFoundError:
        return missing
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            await nc.close()


async def _all_current(url: str, stream: str) -> bool:
    info = await _stream_info(url, stream, MISSING)
    if info == MISSING:
        return True
    if info is None:
        return False
    cluster = info.cluster
    if cluster is None or not cluster.leader:
        return False
    replicas = cluster.replicas or []
    return len(replicas) == NODES - 1 and all(r.current and not r.lag for r in replicas)
