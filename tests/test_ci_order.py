"""The CI scheduling hint (tests/conftest.py LONGEST_FIRST) names test files that exist."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONGEST_FIRST


def test_every_longest_first_file_exists() -> None:
    here = Path(__file__).parent
    assert [n for n in LONGEST_FIRST if not (here / n).is_file()] == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
