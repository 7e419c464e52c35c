"""CPU time of the writers and of the servers they write to, for the benchmarks' saves.

A throughput ratio alone does not say whether a row is bounded by the store's design or by the
machine. These figures do: the CPU seconds a save costs the client (every thread of the writing
process: the writer's own work and the store's event loop) and the servers (read from
``/proc/<pid>/stat`` of the processes listening on the URL's ports), and how many cores were busy
while it ran. One writer that keeps one core busy on a two-core machine can be outrun by eight
only as far as the cores left and the CPU per save allow:
``cores / (CPU per save with eight) / (saves per second of one)``.

Linux only (``/proc``); elsewhere, or when a server's process cannot be read, the servers' part is
not measured and :func:`server_pids` is empty.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
_PORTS = re.compile(r"(?:^|[/,@])[^/,@:?]+:(\d+)")
_LISTEN = "0A"


@dataclass(frozen=True)
class CpuUse:
    """CPU seconds of ``saves`` saves: the writing processes' and the servers', over ``seconds``."""

    saves: int
    client: float
    server: float
    seconds: float

    @property
    def per_save(self) -> float:
        """Client and server CPU seconds of one save."""
        return (self.client + self.server) / self.saves

    @property
    def busy_cores(self) -> float:
        return (self.client + self.server) / self.seconds

    def ceiling(self, one_writer_rate: float, cores: int) -> float:
        """How many times ``one_writer_rate`` these saves could reach with every core busy."""
        return cores / self.per_save / one_writer_rate

    def describe(self) -> str:
        return (
            f"{self.per_save * 1e6:,.0f} µs ({self.client / self.saves * 1e6:,.0f} client + "
            f"{self.server / self.saves * 1e6:,.0f} server), {self.busy_cores:.2f} cores busy"
        )


def ports_of(url: str) -> list[int]:
    """The ports of the servers a ``nats://`` URL names (``nats://127.0.0.1:4222,...?stream=X``)."""
    servers = url.split("://", 1)[-1].split("?", 1)[0]
    return [int(port) for port in _PORTS.findall(servers)]


def server_pids(ports: list[int]) -> list[int]:
    """The processes listening on ``ports`` on this machine (empty when ``/proc`` cannot tell)."""
    inodes = _listening_inodes(set(ports))
    if not inodes:
        return []
    pids = []
    for entry in PROC.iterdir():
        if entry.name.isdigit() and _holds_any(entry / "fd", inodes):
            pids.append(int(entry.name))
    return pids


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU seconds of ``pids`` so far (0 for one that cannot be read)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


class ServerClock:
    """The servers' CPU seconds since it started."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self._start = cpu_seconds(pids)

    def spent(self) -> float:
        return cpu_seconds(self.pids) - self._start


def _listening_inodes(ports: set[int]) -> set[str]:
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            port = int(fields[1].rsplit(":", 1)[1], 16)
            if port in ports and fields[3] == _LISTEN:
                inodes.add(fields[9])
    return inodes


def _holds_any(fds: Path, inodes: set[str]) -> bool:
    try:
        entries = list(fds.iterdir())
    except OSError:  # another user's process, or one that just ended
        return False
    for fd in entries:
        try:
            link = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            return True
    return False
