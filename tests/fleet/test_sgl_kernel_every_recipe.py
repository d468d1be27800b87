"""The mission's sgl-kernel commands on every shipped recipe (#46 item 6): `invoke plan
--package sgl-kernel` plans the build of the pinned tree on every recipe (r570/r575: 0.3.21 at
its release commit; r580/r590/r595: sglang d9632eb7's kernels/aot, the closest tree read to
the locked 0.4.10, and the plan says so), the SM-only patch of each entry applying.

Real parts: the shipped recipes, locks, patches and shared tables, the real `invoke` CLI on this
machine over a local connection (`ansible_connection: local`), its real facts (no toolkit is
installed for the recipes' CUDA releases, so each plan installs one). Simulated: the GPU (the
host vars target_driver / target_arch of a GPU-less build box) and its driver's libcuda.so.1
(a shared library built here with gcc defining the driver API entry points the prerequisite
probe checks, named by host var cuda_driver_library: the pip-route toolkit of r580+ ships no
stub).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from sm120kit import drivers as drv
from sm120kit.inventory.host import Host
from sm120kit.recipes.select import load_recipes, resolve_for_host
from sm120kit.remote.cmake_probe import DRIVER_API
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


def write_stub(directory: str) -> str:
    """A libcuda.so.1 stand-in defining the driver API entry points (gcc, one C file)."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / "stub.c"
    src.write_text("".join(f"int {n}(void) {{ return 34; }}\n" for n in DRIVER_API))
    out = folder / "libcuda.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src)], check=True, timeout=60)
    return str(out)


def _driver(recipe: str) -> str:
    """A driver that picks `recipe`: the minimum of its default toolkit (in its range)."""
    driver = drv.min_driver(RECIPES[recipe].cuda.version)
    assert RECIPES[recipe].admits_driver(driver), (recipe, driver)
    return driver


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict]]:
    """One `invoke plan --package sgl-kernel` over a host per shipped recipe (its driver)."""
    tmp = tmp_path_factory.mktemp("every-recipe")
    stub = write_stub(str(tmp_path_factory.mktemp("driver")))
    hosts = {r: {"target_driver": _driver(r), "cuda_driver_library": stub} for r in RECIPES}
    inv = _inventory(tmp, hosts)
    args = ["plan", "--package", SGL, "-H", "all", "-i", str(inv), "--json"]
    return tmp, json_of(run_invoke(args, invoke_env(None, tmp)))["hosts"]


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_plan_of_sgl_kernel_on_every_recipe(
    recipe: str, planned: tuple[Path, dict[str, dict]]
) -> None:
    """Every recipe plans the whole build (source, dependencies, patch, toolkit, wheel) of its
    entry's pinned commit, SM-only for 12.0; a pin that is the closest tree, not the release,
    says so in the source step. Nothing is written."""
    tmp, hosts = planned
    host = hosts[recipe]
    assert host["recipe"] == recipe, host.get("recipe")
    assert host["status"] != "failed", host.get("error")
    version, ref = _entry(recipe)
    assert ref, recipe
    steps = {s["name"]: s for s in host["steps"]}
    assert steps[f"wheel:{SGL}"]["status"] == "changed"
    source = steps[f"source:{SGL}"]["message"]
    assert f"{SGL} {version} from https://github.com/sgl-project/sglang@{ref}" in source
    if version == "0.4.10":
        assert "the closest tree read; the commit of the released 0.4.10 is not recorded" in (
            source
        )
    assert "SGL_KERNEL_ONLY_ARCHS=120a" in " ".join(steps[f"wheel:{SGL}"]["commands"])
    assert not (tmp / recipe).exists()


def test_a_host_var_commit_replaces_the_pin_and_its_note(tmp_path: Path) -> None:
    """r580 with source.ref given as a host var: that commit is planned, and the entry's note
    (which describes d9632eb7) is not claimed for it."""
    stub = write_stub(str(tmp_path.parent / f"{tmp_path.name}-driver"))
    given = {
        f"recipe.packages.{SGL}.source.ref": "b" * 40,
        "target_driver": _driver("r580"),
        "cuda_driver_library": stub,
    }
    inv = _inventory(tmp_path, {"local": given})
    args = ["plan", "--package", SGL, "-H", "local", "-i", str(inv), "--explain", "--json"]
    host = json_of(run_invoke(args, invoke_env(None, tmp_path)))["hosts"]["local"]
    assert host["status"] != "failed", host.get("error")
    source = next(s for s in host["steps"] if s["name"] == f"source:{SGL}")["message"]
    assert "@" + "b" * 40 in source and "closest tree" not in source
    rows = {r["name"]: r for r in host["explain"]}
    assert "closest tree" not in rows["source"]["value"] + rows["source"]["reason"]
