"""Every name a distribution is published under finds its facts (issue #32): `smoke
--package sglang-kernel` judges the same as `--package sgl-kernel`, whatever the spelling.

The table tests read the descriptors and the stack table (no host). The real test runs
`invoke smoke` on `local` against the cached venv of sglang 0.5.23's released stack
(tests/support/sglang_env.stack_venv: the PyPI wheels, sglang-kernel 0.4.10 installed under
its new name); there is no GPU: the probe's driver stub fakes one of capability 12.0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sm120kit.packages import registry
from sm120kit.packages import stack as serving
from tests.conftest import invoke_env, json_of, run_invoke


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


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_smoke_under_either_name_gives_the_same_verdicts(tmp_path: Path) -> None:
    from tests.support.sglang_env import stack_venv

    env = stack_venv()
    verdicts: dict[str, Any] = {}
    for name in ("sgl-kernel", "sglang-kernel"):
        proc = run_invoke(
            ["smoke", "-H", "local", "--python", str(env), "--package", name,
             "--arch", "12.0", "--json"],
            invoke_env(None, tmp_path / name),
            timeout=1800,
        )  # fmt: skip
        host = json_of(proc)["hosts"]["local"]
        pkg = host["packages"][name]
        assert (pkg["distribution"], pkg["version"]) == ("sglang-kernel", "0.4.10"), pkg
        verdicts[name] = {c["check"]: c["status"] for c in pkg["checks"]}
    assert verdicts["sglang-kernel"] == verdicts["sgl-kernel"], verdicts
    assert verdicts["sgl-kernel"]  # there were checks to compare
