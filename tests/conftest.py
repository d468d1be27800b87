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
from tests.support.stack_hosts import kept_uv_wheel
from tests.support.tinypkg import make_tiny_wheels

REPO = Path(__file__).resolve().parent.parent


#: Test files that take the longest (docs/benchmarks.md, "CI: where the time goes"), longest
#: first. Under `-n 2 --dist loadfile --no-loadscope-reorder` (.ci/run) the workers take whole
#: files in collection order; starting with these and ending with the many short files keeps
#: both workers busy to the end instead of leaving one to finish a long file alone (xdist's
#: own reorder sorts by number of tests, which puts the few long end-to-end tests last).
LONGEST_FIRST = (
    "test_provision.py",
    "test_wheelcache.py",
    "test_smoke_task.py",
    "test_stack.py",
    "test_smoke_probe.py",
    "test_pyenv.py",
    "test_smoke_stack_real.py",
    "test_compile_cache.py",
    "test_smoke_real_wheel.py",
    "test_flash_attn_cxx20.py",
    "test_package_descriptor.py",
    "test_build_op.py",
    "test_stack_plan.py",
    "test_sgl_kernel_build.py",
    "test_serve_task.py",
    "test_preflight.py",
    "test_wheel_check_real.py",
    "test_toolkit.py",
    "test_host_python.py",
    "test_smoke_provenance.py",
)


#: The test tiers, one directory each (docs/testing.md "Tiers"); a test's marker is its
#: directory's name, so `pytest -m unit` runs the fast tier. tests/rules/test_tiers.py keeps
#: every test file in one of them.
TIERS = ("unit", "rules", "fleet", "real")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its tier (before `-m` deselects: tryfirst), then order the files
    LONGEST_FIRST, then the rest as collected (a stable sort, the same on every worker, as
    xdist requires)."""
    for item in items:
        tier = item.path.parent.name
        if tier in TIERS:
            item.add_marker(tier)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


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
def uv_wheel() -> Path:
    """uv's pinned wheel, fetched once per machine and checked by sha256 (stack tests)."""
    return kept_uv_wheel()


@pytest.fixture(scope="session")
def tiny_wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real wheels of tinypkg 0.1 and 0.2, built with pip once (wheel-cache tests)."""
    return make_tiny_wheels(tmp_path_factory.mktemp("tiny-wheels"))


@pytest.fixture(scope="session")
def smoke_fixtures(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The smoke probe's real artifacts (tests/fixtures/smoke/build.py), built once a session:
    .so files with and without cudart, RPATH, 12.0 SASS or PTX, another torch's symbols, and
    two venvs holding them as installed distributions (plus sgl-kernel-like loaders)."""
    import shutil

    from tests.fixtures.smoke import build

    if not (os.path.exists(build.NVCC) and shutil.which("g++")):
        pytest.skip("needs nvcc and g++")
    return shared_once(tmp_path_factory, "smoke", lambda d: build.build(d, build.NVCC))


def shared_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Any) -> Any:
    """`make(directory)` once per test session, even under pytest-xdist: the workers of one
    session share the parent of their base temp directories, so the first to get there
    builds under a lock and leaves the result (pickled) for the others, which read it. Run
    serially this is a plain session fixture."""
    import fcntl
    import pickle

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    done = shared / f"{name}.pickle"
    with open(shared / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return pickle.loads(done.read_bytes())
        result = make(shared / f"{name}-shared")
        done.write_bytes(pickle.dumps(result))
        return result


#: The bucket of the session's S3 server (fixture ``s3_endpoint``); tests use own prefixes.
S3_BUCKET = "sm120kit-wheels"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real S3-compatible server (moto) on 127.0.0.1 with one bucket, shared by the
    session; dummy credentials in the environment (moto accepts any)."""
    import boto3
    from moto.server import ThreadedMotoServer

    home = tmp_path_factory.mktemp("aws")
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        # Keep any real ~/.aws config out of the tests.
        mp.setenv("AWS_CONFIG_FILE", str(home / "config"))
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(home / "credentials"))
        port = _free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        endpoint = f"http://127.0.0.1:{port}"
        try:
            boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=S3_BUCKET)
            yield endpoint
        finally:
            server.stop()


def invoke_env(fleet: Fleet | None, tmp: Path, **extra: str) -> dict[str, str]:
    """Environment for running the real `invoke` CLI against the fleet."""
    env = dict(os.environ)
    env["INVOKE_SM120KIT_RUN_ROOT"] = str(tmp / "runs")
    env["INVOKE_SM120KIT_CONNECT_RETRIES"] = "2"
    env["INVOKE_SM120KIT_RETRY_BACKOFF"] = "0.1"
    env["INVOKE_SM120KIT_CONNECT_TIMEOUT"] = "5"
    # A host that waits for the wheel cache fails in minutes here, not after two hours.
    env["INVOKE_SM120KIT_CACHE_WAIT_TIMEOUT"] = "300"
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
