"""A private PostgreSQL cluster in a temporary folder, for the faults that need a real restart.

Restarting the shared server would disturb everyone else's tests, so the soak starts its own
cluster (``initdb`` + ``pg_ctl``, on a free port, its socket in its own folder) and restarts that.
PostgreSQL refuses to run as root: as root, the cluster belongs to the ``postgres`` system user
(``runuser``). :func:`private_cluster` yields None, with the reason, where that is not possible
(no server binaries, no such user), and callers fall back to ending their own connections.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

BINARIES = (Path("/usr/lib/postgresql/15/bin"),)
OWNER = "postgres"


@dataclass
class PrivateCluster:
    """A running cluster: ``url(database)`` to reach it, :meth:`restart` to restart it."""

    folder: Path
    binaries: Path
    port: int
    as_owner: tuple[str, ...]

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def pg_ctl(self, *arguments: str) -> None:
        subprocess.run(
            [*self.as_owner, str(self.binaries / "pg_ctl"), "-D", str(self.data), *arguments],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1"
        self.pg_ctl("-o", options, "-l", str(self.folder / "server.log"), "-w", "start")

    def restart(self, mode: str = "fast") -> float:
        """Stop the server (``fast``: end every session, clean shutdown; ``immediate``: as a crash,
        recovery from the WAL on start) and start it again; the seconds it was down."""
        began = time.monotonic()
        self.pg_ctl("-m", mode, "-w", "stop")
        self.start()
        return time.monotonic() - began

    def stop(self) -> None:
        self.pg_ctl("-m", "immediate", "-w", "stop")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _binaries() -> Path | None:
    for folder in BINARIES:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    return None


@contextmanager
def private_cluster() -> Iterator[tuple[PrivateCluster | None, str]]:
    """A fresh cluster, stopped and removed at the end; ``(None, why)`` when one cannot be made."""
    binaries = _binaries()
    if binaries is None:
        yield None, f"no PostgreSQL server binaries under {', '.join(map(str, BINARIES))}"
        return
    as_owner: tuple[str, ...] = ()
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            yield None, "running as root without runuser: PostgreSQL refuses to run as root"
            return
        as_owner = ("runuser", "-u", OWNER, "--")
    folder = Path(tempfile.mkdtemp(prefix="compaction-pg-"))
    cluster = PrivateCluster(folder, binaries, _free_port(), as_owner)
    started = False
    try:
        if as_owner:
            shutil.chown(folder, OWNER)
        subprocess.run(
            [*as_owner, str(binaries / "initdb"), "-D", str(cluster.data), "-A", "trust",
             "-U", "postgres", "--no-sync"],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip
        cluster.start()
        started = True
    except (subprocess.SubprocessError, OSError, LookupError) as e:
        shutil.rmtree(folder, ignore_errors=True)
        yield None, f"cannot start a private cluster: {e}"
        return
    try:
        yield cluster, ""
    finally:
        if started:
            with suppress(subprocess.SubprocessError):
                cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)
