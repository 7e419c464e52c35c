"""``compaction serve`` as a real process on a free loopback port, for the tests that need one (a
non-Python client, a kill -9, a SIGTERM)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.conftest import ROOT


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    """One ``compaction serve`` process; :meth:`start` again after a kill reuses the port."""

    def __init__(self, store_url: str, log: Path, *extra: str) -> None:
        self.store_url = store_url
        self.port = free_port()
        self.log = log
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> Server:
        command = [
            sys.executable,
            "-m",
            "compaction.cli.main",
            "--store",
            self.store_url,
            "serve",
            "--port",
            str(self.port),
            *self.extra,
        ]
        env = {k: v for k, v in os.environ.items() if k != "COMPACTION_STORE"}
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"compaction serve exited {self.process.returncode}: {self.log.read_text()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=1):
                    return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
        raise AssertionError(f"compaction serve did not answer in {timeout}s: {self.log.read_text()}")

    def kill(self) -> None:
        """kill -9: no shutdown, no cleanup."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def terminate(self, timeout: float = 60.0) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
