"""The CI scheduling hint (tests/conftest.py LONGEST_FIRST) names test files that exist."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONGEST_FIRST


def test_every_longest_first_file_exists() -> None:
    tests = Path(__file__).resolve().parents[1]
    files = {p.name for p in tests.glob("*/test_*.py")}
    assert [n for n in LONGEST_FIRST if n not in files] == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
