"""The CMake check of a package (`builds/cmake_config.py::cmake_checked`: its descriptor asks
for host prerequisites and a real configure, and it is built from upstream's own sources) is
asked once per build, where the build starts (`plays/build.py::ensure_package`), and its
answer handed to every step that acts on it: the prerequisites, --explain's target rows, the
wheel step's planned configure and the build itself (#47 item 5; it was asked up to 4 times).

Real parts: the shipped r580 recipe (sgl-kernel 0.4.10 from the pinned sglang tree with its
FetchContent dependencies: a CMake-checked build), `invoke plan --package sgl-kernel
--explain`'s host op (`plays/build.py::build_op` in check mode) run by a real `Runner` on
this machine over a `local` connection, its real facts. The count is taken by wrapping the
real function (every module binding it), which still answers. Simulated: the GPU (host vars
target_driver / target_arch) and its driver's libcuda.so.1 (a gcc-built stand-in,
tests/fleet/test_sgl_kernel_every_recipe.py::write_stub).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sm120kit import drivers as drv
from sm120kit.builds import cmake_config
from sm120kit.inventory.host import Host
from sm120kit.plays.build import build_op
from sm120kit.plays.plan import PlanOptions
from sm120kit.runner.pool import Runner, RunOptions
from tests.fleet.test_sgl_kernel_every_recipe import RECIPES, SGL, write_stub


def _count_calls(monkeypatch: pytest.MonkeyPatch, fn: Callable[..., Any]) -> list[str]:
    """Wrap `fn` wherever an sm120kit module binds it; returns the list each call appends
    its package's name to."""
    calls: list[str] = []

    def counted(pkg: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(getattr(pkg, "name", str(pkg)))
        return fn(pkg, *args, **kwargs)

    for name, module in list(sys.modules.items()):
        if name.startswith("sm120kit") and getattr(module, fn.__name__, None) is fn:
            monkeypatch.setattr(module, fn.__name__, counted)
    return calls


@pytest.mark.parametrize("explain", [False, True])
def test_the_cmake_check_is_asked_once_per_build(
    explain: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _count_calls(monkeypatch, cmake_config.cmake_checked)
    host = Host(
        "box",
        vars={
            "ansible_connection": "local",
            "work_root": str(tmp_path / "work"),
            "target_arch": "12.0",
            "target_driver": drv.min_driver(RECIPES["r580"].cuda.version),
            "cuda_driver_library": write_stub(str(tmp_path / "driver")),
        },
    )
    opts = PlanOptions(recipe="r580", packages=[SGL], extra={"explain": explain})
    runner = Runner(RunOptions(run_root=str(tmp_path / "runs"), check_mode=True))
    runner.settings = {"cache": {"controller": str(tmp_path / "store")}}  # type: ignore[attr-defined]
    result = runner.run("plan", [host], build_op(opts))
    box = result.hosts["box"]
    assert box.status != "failed", box.error
    steps = {s.name: s for s in box.steps}
    # The answer reached the steps that act on it: the host prerequisites were probed, the
    # wheel step planned (and with --explain, the target rows were asked for).
    assert steps[f"prereqs:{SGL}"].status == "ok", steps[f"prereqs:{SGL}"].message
    assert steps[f"wheel:{SGL}"].status == "changed"
    if explain:
        assert any(r.get("name", "").startswith("target") for r in box.data.get("explain", []))
    assert calls == [SGL]
