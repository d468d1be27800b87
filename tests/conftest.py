"""Shared fixtures: one real sshd fleet on loopback per test session, and CLI helpers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fleet import DEAD_HOSTS, TEST_HOSTS, Fleet

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Eight real OpenSSH servers on 127.0.0.2-9 plus a dead address (127.0.0.10).

    Each host has its own host key, HOME and work_root. The GPUs are simulated: a stub
    nvidia-smi per host prints real-format output for its profile (RTX PRO 6000 x2 on
    580.95.05, RTX 5090 on 570.124.06, no GPU, A100 on 470 rejecting compute_cap, and a
    driverless nvidia-smi), since no GPU exists on the test machines.
    """
    f = Fleet(tmp_path_factory.mktemp("fleet"), TEST_HOSTS, DEAD_HOSTS).start()
    yield f
    f.stop()


@pytest.fixture(scope="session")
def smoke_fixtures(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The smoke probe's real artifacts (tests/fixtures/smoke/build.py), built once a session:
    .so files with and without cudart, RPATH, 12.0 SASS or PTX, another torch's symbols, and
    two venvs holding them as installed distributions (plus sgl-kernel-like loaders)."""
    import shutil

    from tests.fixtures.smoke import build

    if not (os.path.exists(build.NVCC) and shutil.which("g++")):
        pytest.skip("needs nvcc and g++")
    return build.build(tmp_path_factory.mktemp("smoke"), build.NVCC)


def invoke_env(fleet: Fleet | None, tmp: Path, **extra: str) -> dict[str, str]:
    """Environment for running the real `invoke` CLI against the fleet."""
    env = dict(os.environ)
    env["INVOKE_SM120KIT_RUN_ROOT"] = str(tmp / "runs")
    env["INVOKE_SM120KIT_CONNECT_RETRIES"] = "2"
    env["INVOKE_SM120KIT_RETRY_BACKOFF"] = "0.1"
    env["INVOKE_SM120KIT_CONNECT_TIMEOUT"] = "5"
    if fleet is not None:
        env["INVOKE_SM120KIT_KNOWN_HOSTS"] = str(fleet.known_hosts)
        env["INVOKE_SM120KIT_INVENTORY"] = str(fleet.inventory)
    env.update(extra)
    return env


def run_invoke(
    args: list[str], env: dict[str, str], *, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run the real task layer: `python -m invoke --search-root REPO ARGS`."""
    return subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=REPO,
    )


def json_of(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The single JSON document a --json task printed on stdout."""
    out = proc.stdout.strip()
    assert out.count("\n") == 0, f"stdout is not exactly one JSON line:\n{proc.stdout}"
    doc: dict[str, Any] = json.loads(out)
    return doc
