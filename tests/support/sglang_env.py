"""A venv holding the real sglang 0.5.23, sglang-kernel 0.4.10 and flashinfer-python 0.7.2
wheels, installed with --no-deps (no torch: preflight never imports them, it reads them).

The wheels are downloaded once from PyPI into the test cache (``SM120KIT_TEST_CACHE``, default
``~/.cache/sm120kit-tests``; pip's own cache makes a repeat download cheap), the venv is built
once per set of wheel hashes. Nothing here is simulated.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sm120kit.remote.lib.files import sha256_file
from tests.support.sample_wheel import cache_root

WHEELS = {
    "sglang==0.5.23": "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
    "sglang-kernel==0.4.10": "sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl",
    "flashinfer-python==0.7.2": "flashinfer_python-0.7.2-py3-none-any.whl",
}


def wheel_paths() -> list[Path]:
    """The three wheels in the test cache, downloaded when absent (the test fails, saying why,
    when PyPI cannot be reached)."""
    wheels = cache_root() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    out = []
    for req, name in WHEELS.items():
        path = wheels / name
        if not path.exists():
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", req, "-d", str(wheels)],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0 or not path.exists():
                tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-3:]
                pytest.fail(f"cannot download {req} into {wheels}: {' | '.join(tail)}")
        out.append(path)
    return out


def sglang_venv() -> Path:
    """The venv (built once per wheel set, under a lock shared by concurrent sessions)."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".sglang-preflight.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wheels = wheel_paths()
        shas = [sha256_file(w) for w in wheels]
        key = hashlib.sha256("".join(shas).encode()).hexdigest()[:12]
        venv = root / f"venv-sglang-0.5.23-{key}"
        marker = venv / ".sm120kit-test.json"
        want = {"wheels": shas, "python": sys.executable}
        if marker.exists() and json.loads(marker.read_text()) == want:
            return venv
        subprocess.run(["rm", "-rf", str(venv)], check=True)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
            + ["-q", "--no-deps", "--no-index", "--no-compile", *map(str, wheels)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            pytest.fail(f"installing the sglang wheels into {venv}: {proc.stderr.strip()[-500:]}")
        marker.write_text(json.dumps(want))
        return venv


def site_packages(venv: Path) -> Path:
    """The venv's site-packages directory."""
    found = sorted(venv.glob("lib/python3*/site-packages"))
    assert found, f"no site-packages under {venv}"
    return found[0]
