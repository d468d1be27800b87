"""Fake LLM servers for serve-check's tests: tests/fixtures/servers/fake_llm_server.py, run as
itself or as ``python -m sglang.launch_server`` (tests/fixtures/servers/sglang), each in its own
process group and killed with its children when the test ends. They stand in for a real
sglang server, which needs a GPU (a real one is started only on a lent GPU machine)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "fake_llm_server.py"

Spawn = Callable[..., "subprocess.Popen[bytes]"]


def free_port() -> int:
    """A loopback TCP port free at the time of asking."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawner(max_seconds: int) -> Iterator[Spawn]:
    """The body of a `spawn` fixture: ``start(*args, as_sglang=False)`` starts a fake server
    that exits by itself after `max_seconds`; every one started is killed at teardown."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str, as_sglang: bool = False) -> subprocess.Popen[bytes]:
        """`as_sglang`: launched as `python -m sglang.launch_server` (fixtures/servers/sglang)."""
        launch = ["-m", "sglang.launch_server"] if as_sglang else [str(SERVER)]
        env = dict(os.environ, PYTHONPATH=str(SERVER.parent)) if as_sglang else None
        proc = subprocess.Popen(
            [sys.executable, *launch, "--max-seconds", str(max_seconds), *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, so children die with it
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
