"""The benchmarks' CPU accounting (benchmarks/cpu.py): the servers of a URL are found by the
sockets they listen on, their CPU is read from /proc, and the ceiling it implies is arithmetic."""

from __future__ import annotations

import os
import socket
import sys
import time

import pytest

from benchmarks.cpu import CpuUse, cpu_seconds, ports_of, server_pids

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_the_ports_of_a_nats_url() -> None:
    assert ports_of("nats://127.0.0.1:4222?stream=s&replicas=1") == [4222]
    assert ports_of("nats://127.0.0.1:5001,127.0.0.1:5002,localhost:5003?stream=b") == [5001, 5002, 5003]
    assert ports_of("nats://user:secret@127.0.0.1:4222") == [4222]


def test_the_process_listening_on_a_port_is_found_and_no_other() -> None:
    with socket.socket() as listening, socket.socket() as bound:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        bound.bind(("127.0.0.1", 0))  # bound but not listening: not a server
        port, other = listening.getsockname()[1], bound.getsockname()[1]
        assert server_pids([port]) == [os.getpid()]
        assert server_pids([other]) == []


def test_cpu_seconds_grow_with_work_and_an_unreadable_pid_counts_nothing() -> None:
    before = cpu_seconds([os.getpid()])
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    assert cpu_seconds([os.getpid()]) - before >= 0.1
    assert cpu_seconds([2**22 + 1]) == 0.0  # above the kernel's pid limit: no such process


def test_the_ceiling_is_the_cores_over_the_cpu_per_save_against_one_writer() -> None:
    use = CpuUse(saves=1000, client=0.2, server=0.1, seconds=0.5)
    assert use.per_save == pytest.approx(0.0003)
    assert use.busy_cores == pytest.approx(0.6)
    # 2 cores at 300 µs a save: 6,667 saves/s, 2.67x a writer of 2,500/s
    assert use.ceiling(2500.0, 2) == pytest.approx(2 / 0.0003 / 2500)
    assert use.describe() == "300 µs (200 client + 100 server), 0.60 cores busy"
