"""Every name a distribution is published under finds its facts (issue #32): `smoke
--package sglang-kernel` judges the same as `--package sgl-kernel`, whatever the spelling.

These table tests read the descriptors and the stack table (no host). The real `invoke smoke`
under both names, on the cached venv of sglang 0.5.23's released stack, is
tests/test_smoke_stack_real.py::test_smoke_under_either_name_gives_the_same_verdicts (its
session fixtures `named` and `named_new`).
"""

from __future__ import annotations

import pytest

from sm120kit.packages import registry
from sm120kit.packages import stack as serving


def _published() -> list[tuple[str, str]]:
    """(package, another name it is published under) for every descriptor and stack entry."""
    rows = [(d.name, n) for d in registry.descriptors() if d.name for n in d.distributions]
    rows += [(p.name, n) for p in serving.STACK for n in p.distributions]
    return rows


def _spellings(name: str) -> list[str]:
    return [name, name.upper(), name.replace("-", "_"), name.replace("-", ".").title()]


@pytest.mark.parametrize(("package", "other"), _published(), ids=str)
def test_every_published_name_finds_the_same_facts(package: str, other: str) -> None:
    assert serving.smoke_facts(package), f"{package} has facts to find"
    for name in [*_spellings(other), *_spellings(package)]:
        assert serving.package_name(name) == package, name
        assert serving.smoke_facts(name) == serving.smoke_facts(package), name
        names = {serving._norm(n) for n in [name, *serving.distributions(name)]}
        assert names == {serving._norm(n) for n in [package, *serving.distributions(package)]}


def test_sglang_kernel_is_published_and_known() -> None:
    """The case of the issue: the descriptor is sgl-kernel's, today's PyPI name sglang-kernel."""
    assert ("sgl-kernel", "sglang-kernel") in _published()


@pytest.mark.parametrize("asked", ["sgl-kernel", "sglang-kernel"])
def test_one_row_per_distribution_whatever_name_is_asked(asked: str) -> None:
    knowledge = serving.probe_knowledge((asked,))
    every = [asked, *knowledge["discover"]]
    assert len({serving.package_name(n) for n in every}) == len(every)
