"""Build the sample kernel (examples/minikernel) once, with real nvcc, through build_wheel.py.

The build goes through exactly the pipeline a host uses: `run_script(LocalConnection, ...)`
ships `sm120kit/remote/build_wheel.py` on stdin, which runs ``pip wheel --no-build-isolation``
with the knob env. The wheel lands in a cache directory keyed by a hash of everything that
decides its bytes (sources, arch list, env, nvcc and torch versions), so a re-run finds it
at once. A file lock keeps parallel test sessions from building it twice.

The lead exposes `build_sample_wheel` as a session fixture; tests/real/test_build_wheel.py also
has its own.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sm120kit.inventory.host import Host
from sm120kit.remote import run_script
from sm120kit.remote.build_wheel import PROVENANCE_FILE, PROVENANCE_SCHEMA
from sm120kit.runner.connection import LocalConnection
from sm120kit.runner.host_context import HostContext
from sm120kit.runner.pool import outside_run
from tests.support.venvs import make_venv

REPO = Path(__file__).resolve().parents[2]
SAMPLE_SRC = REPO / "examples" / "minikernel"
NVCC = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"


@dataclass(frozen=True)
class SampleWheel:
    """A built minikernel wheel and how it came about."""

    wheel: Path
    sha256: str
    log: Path
    seconds: float
    cached: bool
    env: dict[str, str]


def cache_root() -> Path:
    """Where built sample wheels are kept across sessions (SM120KIT_TEST_CACHE overrides)."""
    return Path(os.environ.get("SM120KIT_TEST_CACHE", Path.home() / ".cache" / "sm120kit-tests"))


def local_connection() -> LocalConnection:
    return LocalConnection(Host("local", vars={"ansible_connection": "local"}))


def local_context() -> HostContext:
    """The local host's context outside a run (the logged run API, as a host op has it)."""
    return outside_run(Host("local", vars={"ansible_connection": "local"}))


def nvcc_available() -> bool:
    return NVCC.exists()


def sources_hash(src: Path = SAMPLE_SRC) -> str:
    """sha256 over the sample's source files (build outputs excluded)."""
    digest = hashlib.sha256()
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src).as_posix()
        if not path.is_file() or rel.startswith(("build/", "dist/")) or ".egg-info" in rel:
            continue
        if "__pycache__" in rel:
            continue
        digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _tool_versions() -> str:
    nvcc = subprocess.run([str(NVCC), "--version"], capture_output=True, text=True).stdout
    torch = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
    ).stdout
    return nvcc.strip().splitlines()[-1] + "|" + torch.strip()


def build_sample_wheel(
    root: Path | None = None,
    *,
    arch_list: str = "12.0",
    extra_env: dict[str, str] | None = None,
    python: str = sys.executable,
) -> SampleWheel:
    """Build (or find in the cache) minikernel for `arch_list` with MAX_JOBS=1.

    Raises AssertionError with the log tail when the build fails.
    """
    env = {
        "TORCH_CUDA_ARCH_LIST": arch_list,
        "MAX_JOBS": "1",
        "CUDA_HOME": str(NVCC.parent.parent),
        **(extra_env or {}),
    }
    # The build record's schema is in the key: build_wheel.py writes it into the wheel.
    record = f"{PROVENANCE_FILE} schema {PROVENANCE_SCHEMA}"
    key = hashlib.sha256(
        json.dumps([sources_hash(), env, _tool_versions(), python, record], sort_keys=True).encode()
    ).hexdigest()[:20]
    slot = (root or cache_root()) / f"minikernel-{key}"
    slot.mkdir(parents=True, exist_ok=True)
    with open(slot / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = slot / "result.json"
        if done.exists():
            doc = json.loads(done.read_text())
            if Path(doc["wheel"]).exists():
                return _result(doc, cached=True, env=env)
        src = slot / "src"
        # Built from a copy: pip builds in the source tree, and examples/ must stay clean.
        shutil.rmtree(src, ignore_errors=True)
        shutil.copytree(
            SAMPLE_SRC, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
        )
        doc = run_script(
            local_connection(),
            "build_wheel",
            {
                "src": str(src),
                "python": python,
                "env": env,
                "pip_args": [],
                "out_dir": str(slot / "wheels"),
                "log": str(slot / "build.log"),
                "progress": str(slot / "progress.json"),
                "front_end": "pip",
            },
            python=python,
        )
        if not doc.get("ok"):
            tail = "\n".join(doc.get("log_tail") or [])
            raise AssertionError(f"sample build failed: {doc.get('failure')}\n{tail}")
        done.write_text(json.dumps(doc))
        return _result(doc, cached=False, env=env)


def _result(doc: dict[str, Any], *, cached: bool, env: dict[str, str]) -> SampleWheel:
    return SampleWheel(
        wheel=Path(doc["wheel"]),
        sha256=str(doc["sha256"]),
        log=Path(doc["log"]),
        seconds=float(doc["seconds"]),
        cached=cached,
        env=env,
    )


def install_into_venv(wheel: Path, venv: Path) -> Path:
    """A venv that sees the system torch (--system-site-packages) with `wheel` installed.

    The venv has no pip of its own (its bundled setuptools would shadow the system's and make
    torch's requirements look unmet); the system pip installs into it with --python, offline,
    with dependency checks on, so the wheel's ``torch==`` pin is checked against the torch
    that is there.
    """
    python = make_venv(venv)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-index",
            str(wheel),
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise AssertionError(f"installing {wheel.name} failed:\n{proc.stdout}{proc.stderr}")
    return python


def cuobjdump() -> Path | None:
    """NVIDIA's cuobjdump from the nvidia-cuda-cuobjdump (cu13) package, if installed."""
    try:
        import nvidia.cu13  # type: ignore[import-not-found]
    except ImportError:
        return None
    for base in nvidia.cu13.__path__:
        tool = Path(base) / "bin" / "cuobjdump"
        if tool.exists():
            return tool
    return None
