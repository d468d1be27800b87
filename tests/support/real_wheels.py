"""Real released wheels from PyPI, downloaded once into the test cache and shared by the tests
that read them (``SM120KIT_TEST_CACHE``, default ``~/.cache/sm120kit-tests``). No download: the
test fails and says why."""

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
from tests.support.venvs import make_venv


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


def wheel_venv(label: str, wheels: list[Path], *, system_site_packages: bool) -> Path:
    """A venv under the test cache holding `wheels` installed with --no-deps, built once per
    set of wheel hashes (and interpreter) under a lock shared by concurrent sessions. With
    `system_site_packages` it sees the suite's torch (2.13.0+cpu), never installing into it."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{label}-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shas = [sha256_file(w) for w in wheels]
        key = shas[0] if len(shas) == 1 else hashlib.sha256("".join(shas).encode()).hexdigest()
        venv = root / f"venv-{label}-{key[:12]}"
        marker = venv / ".sm120kit-test.json"
        want: dict[str, object] = {"python": sys.executable}
        want.update({"wheel_sha256": shas[0]} if len(shas) == 1 else {"wheels": shas})
        if marker.exists() and json.loads(marker.read_text()) == want:
            return venv
        subprocess.run(["rm", "-rf", str(venv)], check=True)
        make_venv(venv, system_site_packages=system_site_packages)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
            + ["-q", "--no-deps", "--no-index", "--no-compile", *map(str, wheels)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            pytest.fail(
                f"installing {len(wheels)} wheel(s) into {venv}: {proc.stderr.strip()[-500:]}"
            )
        marker.write_text(json.dumps(want))
        return venv
