"""bench/ under the project's rules: every benchmark imports and parses its arguments in CI.

The benchmarks themselves run by hand for minutes (docs/benchmarks.md). Here each one is run as
``python bench/<name>.py --help``: its imports (sm120kit's API, the test fleet) load and its
argument parser is built, so a bench importing a removed name fails CI. A bench calling a
removed attribute (``ctx.conn`` once) is mypy's to catch: mypy covers bench/ (pyproject.toml,
run by .ci/run); the last test keeps it so.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

BENCHES = sorted((REPO / "bench").glob("*.py"))


def test_there_are_benches() -> None:
    assert len(BENCHES) >= 8


@pytest.mark.parametrize("bench", BENCHES, ids=lambda p: p.name)
def test_bench_imports_and_parses_its_arguments(bench: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(bench), "--help"], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout


def test_mypy_covers_bench() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "bench" in config["tool"]["mypy"]["files"]
