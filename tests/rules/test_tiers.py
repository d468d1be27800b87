"""Every test file is in one tier directory (docs/testing.md "Tiers"): tests/unit,
tests/rules, tests/fleet or tests/real, whose name is its marker (tests/conftest.py TIERS), so
`pytest -m unit` is the fast tier. File names stay unique across tiers: LONGEST_FIRST and
the CI's durations name files by their base name."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from tests.conftest import REPO, TIERS

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_file_is_in_a_tier_directory() -> None:
    placed = {p.parent for tier in TIERS for p in (TESTS / tier).glob("test_*.py")}
    loose = sorted(
        str(p.relative_to(TESTS))
        for p in TESTS.rglob("test_*.py")
        if p.parent not in placed and "fixtures" not in p.relative_to(TESTS).parts
    )
    assert not loose, (
        f"test files outside a tier directory: {loose}; move each (git mv) into tests/unit "
        "(pure, no host), tests/rules (repository rules), tests/fleet (hosts: sshd on loopback "
        "or the local connection) or tests/real (released artifacts, real envs, nvcc/pip "
        "builds, env-gated): docs/testing.md 'Tiers' says how to choose"
    )


def test_test_file_names_are_unique_across_tiers() -> None:
    names = Counter(p.name for tier in TIERS for p in (TESTS / tier).glob("test_*.py"))
    assert [n for n, count in names.items() if count > 1] == []


def test_every_tier_is_a_registered_marker_and_a_package() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    markers = {m.split(":")[0] for m in config["tool"]["pytest"]["ini_options"]["markers"]}
    assert set(TIERS) <= markers
    assert [t for t in TIERS if not (TESTS / t / "__init__.py").is_file()] == []
