"""The code shipped to hosts runs on Python 3.8, the oldest a host may have (docs/remote.md).

Two checks: vermin (a static reader of which Python version each syntax form and stdlib API
needs) over every shipped file, and every remote script's bundle run by a real Python 3.8
where this machine has one (pyenv or PATH; skipped where it has none). The scripts get `{}`
as their argument: each must start, import its library and answer with its own error (a
JSON document or a KeyError for the missing argument), never a SyntaxError, TypeError or
ImportError of a newer Python.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sm120kit.remote import SERVICES, script_bundle
from sm120kit.runner.service import service_command, service_input

REMOTE = Path(__file__).resolve().parents[2] / "sm120kit" / "remote"
#: Everything that runs on a host or inside a host's env: the scripts and their library.
#: (remote/__init__.py is the controller's bundler, not shipped.)
SHIPPED = sorted(
    str(p)
    for pattern in ("*.py", "lib/*.py", "lib/in_target/*.py")
    for p in REMOTE.glob(pattern)
    if p != REMOTE / "__init__.py"
)
SCRIPTS = sorted(Path(p).stem for p in glob.glob(str(REMOTE / "*.py")) if "__init__" not in p)


def _python38() -> str | None:
    """A working Python 3.8 (a pyenv shim on PATH may name one that is not selected)."""
    for candidate in (
        *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8"))),
        shutil.which("python3.8"),
    ):
        if not candidate or not os.access(candidate, os.X_OK):
            continue
        probe = [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 8))"]
        if subprocess.run(probe, capture_output=True, text=True).stdout.strip() == "True":
            return candidate
    return None


def test_shipped_code_needs_at_most_python_38() -> None:
    """vermin finds nothing in the shipped files that needs a Python newer than 3.8."""
    pytest.importorskip("vermin", reason="vermin is in the test extras (pip install -e .[test])")
    beside = Path(sys.executable).parent / "vermin"
    vermin = str(beside) if beside.exists() else shutil.which("vermin")
    assert vermin, "vermin is importable but its command is not installed"
    proc = subprocess.run(
        [vermin, "-t=3.8-", "--no-tips", "--violations", *SHIPPED],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Target versions not met" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_script_starts_on_python_38(name: str) -> None:
    """The bundle (script and library) runs under a real Python 3.8 and answers."""
    python = _python38()
    if python is None:
        pytest.skip("no Python 3.8 on this machine (python3.8 on PATH or under ~/.pyenv)")
    if name in SERVICES:
        # Started by the one-line loader; answers a request line (here one without an entry).
        request = service_input(name, {}) + b'{"id": 7}\n'
        proc = subprocess.run(
            ["bash", "-c", service_command(python, name)], input=request, capture_output=True,
            timeout=120,
        )  # fmt: skip
        reply = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        assert reply["id"] == 7 and reply["ok"] is False and "KeyError" in reply["error"]
        return
    proc = subprocess.run(
        [python, "-", "{}"], input=script_bundle(name), capture_output=True, text=True, timeout=120
    )
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    if last.startswith("{"):
        json.loads(last)
        return
    error = (proc.stderr.strip().splitlines() or [""])[-1]
    assert error.startswith("KeyError: "), proc.stderr[-2000:]
