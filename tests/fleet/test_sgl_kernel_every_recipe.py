"""The mission's sgl-kernel commands on every shipped recipe (#46 item 6a, s4): `invoke plan
--package sgl-kernel` plans the build, or stops with one line that says what to pass; the real
`invoke build-sgl-kernel` on a recipe whose release commit is not known stops with that line
before anything is written.

Real parts: the shipped recipes, locks, patches and shared tables, the real `invoke` CLI on this
machine over a local connection (`ansible_connection: local`), its real facts (no toolkit is
installed for the recipes' CUDA releases, so each plan installs one). Simulated: the GPU (the
host vars target_driver / target_arch of a GPU-less build box).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sm120kit import drivers as drv
from sm120kit.inventory.host import Host
from sm120kit.recipes.select import load_recipes, resolve_for_host
from tests.conftest import invoke_env, json_of, run_invoke

REPO = Path(__file__).resolve().parents[2]
RECIPES = load_recipes(REPO / "recipes")
SGL = "sgl-kernel"


def _inventory(tmp: Path, hosts: dict[str, dict[str, str]]) -> Path:
    """Local build boxes (one per name in `hosts`, with those vars), work roots under `tmp`."""
    doc: dict[str, dict] = {}
    for name, host_vars in hosts.items():
        base = {"ansible_connection": "local", "target_arch": "12.0", "work_root": str(tmp / name)}
        doc[name] = {**base, **host_vars}
    path = tmp / "hosts.yaml"
    path.write_text(yaml.safe_dump({"all": {"hosts": doc}}), encoding="utf-8")
    return path


def _entry(recipe: str) -> tuple[str, str]:
    """(version, source.ref) of the sgl-kernel entry the recipe builds for its own torch."""
    res = resolve_for_host(RECIPES, Host("box", vars={"target_arch": "12.0"}), None, forced=recipe)
    values = res.packages[SGL]
    return values.version, str(values.source.get("ref") or "")


def _driver(recipe: str) -> str:
    """A driver that picks `recipe`: the minimum of its default toolkit (in its range)."""
    driver = drv.min_driver(RECIPES[recipe].cuda.version)
    assert RECIPES[recipe].admits_driver(driver), (recipe, driver)
    return driver


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict]]:
    """One `invoke plan --package sgl-kernel` over a host per shipped recipe (its driver)."""
    tmp = tmp_path_factory.mktemp("every-recipe")
    inv = _inventory(tmp, {r: {"target_driver": _driver(r)} for r in RECIPES})
    args = ["plan", "--package", SGL, "-H", "all", "-i", str(inv), "--json"]
    return tmp, json_of(run_invoke(args, invoke_env(None, tmp)))["hosts"]


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_plan_of_sgl_kernel_on_every_recipe(
    recipe: str, planned: tuple[Path, dict[str, dict]]
) -> None:
    """A recipe whose entry pins its commit plans the whole build (source, toolkit, env,
    wheel); one whose release commit is not known fails with one line naming the package,
    the repository and the inventory var that takes the commit. Nothing is written."""
    tmp, hosts = planned
    host = hosts[recipe]
    assert host["recipe"] == recipe, host.get("recipe")
    version, ref = _entry(recipe)
    if ref:
        assert host["status"] != "failed", host.get("error")
        steps = {s["name"]: s for s in host["steps"]}
        assert steps[f"wheel:{SGL}"]["status"] == "changed"
        assert (
            f"{SGL} {version} from https://github.com/sgl-project/sglang@{ref}"
            in (steps[f"source:{SGL}"]["message"])
        )
    else:
        line = host["error"]
        assert host["status"] == "failed" and "\n" not in line
        assert line.startswith(f"{SGL} {version} cannot be built with recipe {recipe}: ")
        assert "which commit of https://github.com/sgl-project/sglang to build is not known" in line
        assert line.endswith(
            f"pass it as the inventory var recipe.packages.{SGL}.source.ref (host or group)"
        )
    assert not (tmp / recipe).exists()


def test_given_the_commit_the_stack_release_plans_its_upstream_build(tmp_path: Path) -> None:
    """r580 with the commit given as a host var: the build of sglang-kernel 0.4.10's tree is
    planned, and as its entry lists no SM-only patch, SGL_KERNEL_ONLY_ARCHS is not passed (no
    upstream CMakeLists.txt reads it): --explain says the build is upstream's full one."""
    ref = {f"recipe.packages.{SGL}.source.ref": "b" * 40, "target_driver": _driver("r580")}
    inv = _inventory(tmp_path, {"local": ref})
    args = ["plan", "--package", SGL, "-H", "local", "-i", str(inv)]
    proc = run_invoke([*args, "--explain", "--json"], invoke_env(None, tmp_path))
    host = json_of(proc)["hosts"]["local"]
    assert host["status"] != "failed", host.get("error")
    rows = {r["name"]: r for r in host["explain"]}
    assert "-Ccmake.define.SGL_KERNEL_ONLY_ARCHS=120a" not in rows
    note = rows["-Ccmake.define.SGL_KERNEL_ONLY_ARCHS"]
    assert note["value"] == "(not set)"
    assert note["reason"].startswith("upstream's full build: no patch of sgl-kernel 0.4.10's")
    wheel = next(s for s in host["steps"] if s["name"] == f"wheel:{SGL}")
    assert "SGL_KERNEL_ONLY_ARCHS" not in " ".join(wheel["commands"])


def test_the_mission_command_stops_before_writing(tmp_path: Path) -> None:
    """`invoke build-sgl-kernel -H local` (the real build, not a plan) on r580: exit 2, the
    one line in the JSON, no traceback, nothing fetched or built."""
    inv = _inventory(tmp_path, {"local": {"target_driver": _driver("r580")}})
    proc = run_invoke(
        ["build-sgl-kernel", "-H", "local", "-i", str(inv), "--json"], invoke_env(None, tmp_path)
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    host = json_of(proc)["hosts"]["local"]
    assert host["error"].startswith("sgl-kernel 0.4.10 cannot be built with recipe r580: ")
    assert "recipe.packages.sgl-kernel.source.ref" in host["error"]
    assert "Traceback" not in proc.stderr
    # The host lock's directory is all the run made: no source, toolkit, env or build tree.
    assert sorted(p.name for p in (tmp_path / "local").iterdir()) == ["locks"]
