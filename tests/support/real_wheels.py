"""Real released wheels from PyPI, downloaded once into the test cache and shared by the tests
that read them (``SM120KIT_TEST_CACHE``, default ``~/.cache/sm120kit-tests``). No download: the
test fails and says why."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.sample_wheel import cache_root


def real_wheel(project: str, version: str, filename: str) -> Path:
    """The PyPI wheel `filename` of `project`==`version` (``pip download --no-deps``), cached."""
    root = cache_root()
    wheels = root / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    with open(root / f".{project}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wheel = wheels / filename
        if not wheel.exists():
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps"]
                + [f"{project}=={version}", "-d", str(wheels)],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0 or not wheel.exists():
                tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-3:]
                pytest.fail(
                    f"cannot download {project}=={version} from PyPI into {wheels} "
                    f"(pip exit {proc.returncode}): {' | '.join(tail)}"
                )
    return wheel
