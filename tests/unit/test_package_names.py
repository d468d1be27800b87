"""Every name a distribution is published under finds its facts (issue #32): `smoke
--package sglang-kernel` judges the same as `--package sgl-kernel`, whatever the spelling.

These table tests read the descriptors (one type: a package only installed from releases is a
descriptor that does not build) and the release catalogues (no host). The real `invoke smoke`
under both names, on the cached venv of sglang 0.5.23's released stack, is
tests/real/test_smoke_stack_real.py::test_smoke_under_either_name_gives_the_same_verdicts (its
session fixtures `named` and `named_new`).
"""

from __future__ import annotations

import pytest

from sm120kit.packages import registry
from sm120kit.packages import stack as serving
from sm120kit.remote.lib.names import dist_name


def _published() -> list[tuple[str, str]]:
    """(package, another name it is published under) for every descriptor."""
    return [(d.name, n) for d in registry.descriptors() if d.name for n in d.distributions]


def _spellings(name: str) -> list[str]:
    return [name, name.upper(), name.replace("-", "_"), name.replace("-", ".").title()]


@pytest.mark.parametrize(("package", "other"), _published(), ids=str)
def test_every_published_name_finds_the_same_facts(package: str, other: str) -> None:
    assert serving.smoke_facts(package), f"{package} has facts to find"
    for name in [*_spellings(other), *_spellings(package)]:
        assert registry.find(name) is registry.find(package), name
        assert serving.package_name(name) == package, name
        assert serving.loader(name) == serving.loader(package), name
        assert serving.smoke_facts(name) == serving.smoke_facts(package), name
        names = {dist_name(n) for n in [name, *serving.distributions(name)]}
        assert names == {dist_name(n) for n in [package, *serving.distributions(package)]}


def test_sglang_kernel_is_published_and_known() -> None:
    """The case of the issue: the descriptor is sgl-kernel's, today's PyPI name sglang-kernel."""
    assert ("sgl-kernel", "sglang-kernel") in _published()


@pytest.mark.parametrize("asked", ["sgl-kernel", "sglang-kernel"])
def test_one_row_per_distribution_whatever_name_is_asked(asked: str) -> None:
    knowledge = serving.probe_knowledge((asked,))
    every = [asked, *knowledge["discover"]]
    assert len({serving.package_name(n) for n in every}) == len(every)


def test_one_descriptor_type_release_only_ones_do_not_build() -> None:
    """The serving stack's released packages are descriptors without a build kind: a recipe
    entry of that name would build as a plain torch extension, never as "no kind"."""
    release_only = [d for d in registry.descriptors() if d.name and not d.builds]
    assert {d.name for d in release_only} >= {"sgl-flash-mla", "tilelang", "flashinfer-python"}
    assert "" not in registry.kinds()
    for d in release_only:
        assert registry.find(d.name) is d
        assert registry.descriptor(d.name).kind == registry.DEFAULT_KIND
        assert d.serving and (d.jit is None or d.jit_source)
    assert registry.find("sglang-kernel") is registry.descriptor("sgl-kernel")


def test_every_catalogue_name_finds_one_descriptor() -> None:
    """Each name a catalogue records as another name of a distribution (its aliases) finds the
    descriptor of the distribution, and its facts: the catalogue and the descriptors agree."""
    for cat in serving.catalogues():
        for old, new in cat.aliases.items():
            desc = registry.find(old)
            assert desc is not None and registry.find(new) is desc, (old, new)
            assert serving.smoke_facts(old) == serving.smoke_facts(new)
