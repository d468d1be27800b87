"""A real process killed at a point it names: the tests of interrupted writes (a store put, a
build) run the writer as a child that prints ``READY`` when it reaches the point, then SIGKILL
it there, so nothing of the writer's own cleanup runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def kill_at_ready(code: str, *args: str, cwd: Path | None = None) -> None:
    """Run ``python -c code args...`` (this checkout importable), wait for its ``READY`` line
    and SIGKILL it; asserts it printed that line and died of the signal."""
    child = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=cwd,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "READY"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL
