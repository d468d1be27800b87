"""`invoke build-sgl-kernel` on every recipe (#46 item 6a): a recipe that writes no sgl-kernel
entry for its torch takes its serving stack's release from the lock (the lock's sglang-kernel
version, the shared entry of that version in recipes/shared/packages.toml), so the package is
the stack's own, built against the stack's torch.

Real parts: the shipped recipes, locks and shared tables; for the last test the real `invoke`
CLI against a real sshd on loopback (the session fleet). Simulated: the GPU (stub nvidia-smi,
driver 580.95.05, so the host gets r580).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from sm120kit.errors import RecipeError
from sm120kit.inventory.host import Host
from sm120kit.packages import registry
from sm120kit.recipes.select import load_recipes, resolve_for_host
from sm120kit.state import ProvisionState
from tests.conftest import invoke_env, json_of, run_invoke
from tests.support.fleet import Fleet

REPO = Path(__file__).resolve().parents[2]
RECIPES = load_recipes(REPO / "recipes")


def _locked(recipe_name: str) -> tuple[str, str, str]:
    """(distribution, version, torch) of the recipe's stack lock for sgl-kernel."""
    lock = RECIPES[recipe_name].lock
    assert lock is not None
    desc = registry.find("sgl-kernel")
    assert desc is not None
    entry = next(e for n in registry.published_names(desc) if (e := lock.entry(n)) is not None)
    return entry.name, entry.version, lock.torch


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_build_sgl_kernel_resolves_on_every_recipe(name: str) -> None:
    """Each shipped recipe has sgl-kernel at its lock's version, for the lock's torch, and
    `build --package sgl-kernel` (ProvisionState.run_packages) takes it."""
    dist, version, torch = _locked(name)
    box = Host("box", vars={"target_arch": "12.0"})
    res = resolve_for_host(RECIPES, box, None, forced=name)
    values = res.packages["sgl-kernel"]
    assert values.version == version, (name, dist)
    assert SpecifierSet(res.values["packages.sgl-kernel.torch"]).contains(torch)
    assert res.values["torch.version"] == torch
    state = ProvisionState(box, {"work_root": "/w"}, res, wanted=["sgl-kernel"])
    assert state.run_packages() == ["sgl-kernel"]
    spec = next(p for p in res.package_specs() if p.name == "sgl-kernel")
    if spec.derived:  # r580/r590/r595: from the lock, and plan says so
        assert res.sources["packages.sgl-kernel.version"] == spec.derived
        assert "recipes/shared/packages.toml sgl-kernel==" + version in spec.derived
        assert f"{dist} {version}" in spec.derived
    else:  # r570/r575 write sgl-kernel 0.3.21 themselves, the version their lock has
        assert res.sources["packages.sgl-kernel.version"].startswith(f"recipes/{name}.toml")


def test_what_the_derived_entry_is_and_what_it_pins() -> None:
    """sgl-kernel 0.4.10 (r580's stack): the released wheel's torch and source tree, pinned to
    sglang d9632eb7 (the closest tree read) with a note saying it is not the release's commit;
    no problem; a host var commit replaces the pin and drops the note."""
    res = resolve_for_host(RECIPES, Host("box", vars={"target_arch": "12.0"}), None, forced="r580")
    base = "packages.sgl-kernel."
    assert res.values[base + "torch"] == "==2.14.1"
    assert res.values[base + "source.url"] == "https://github.com/sgl-project/sglang"
    assert res.values[base + "source.subdir"] == "python/sglang/kernels/aot"
    assert res.values[base + "source.ref"] == "d9632eb78fd3092a0fa9137ddb5d590ac4c9b69b"
    assert "the commit of the released 0.4.10 is not recorded" in res.values[base + "source.note"]
    assert "sgl-kernel" not in res.problems
    pinned = Host(
        "box",
        vars={"target_arch": "12.0", "recipe.packages.sgl-kernel.source.ref": "a" * 40},
    )
    moved = resolve_for_host(RECIPES, pinned, None, forced="r580")
    assert moved.packages["sgl-kernel"].source["ref"] == "a" * 40
    assert "note" not in moved.packages["sgl-kernel"].source


def test_a_locked_version_without_a_shared_entry_names_the_one_to_add(tmp_path: Path) -> None:
    folder = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", folder)
    shared = folder / "shared" / "packages.toml"
    text = shared.read_text(encoding="utf-8")
    start = text.index('[[packages]]\nname = "sgl-kernel"\nversion = "0.4.10"')
    shared.write_text(text[:start], encoding="utf-8")
    recipes = load_recipes(folder, patches_dir=REPO / "patches")
    assert "sgl-kernel" not in {p.name for p in recipes["r580"].packages}
    box = Host("box", vars={"target_arch": "12.0"})
    res = resolve_for_host(recipes, box, None, forced="r580")
    state = ProvisionState(box, {"work_root": "/w"}, res, wanted=["sgl-kernel"])
    with pytest.raises(RecipeError) as err:
        state.run_packages()
    line = str(err.value)
    assert "\n" not in line and "is not in recipe r580" in line
    assert "its stack locks sglang-kernel 0.4.10" in line
    assert "add sgl-kernel==0.4.10 (its source) to recipes/shared/packages.toml" in line


def test_plan_of_build_sgl_kernel_on_an_r580_host_over_ssh(fleet: Fleet, tmp_path: Path) -> None:
    """The mission's command in check mode on a real loopback host whose driver picks r580:
    the package resolves (no 'not in recipe', no unpinned commit) and the plan's source step
    names the pinned tree and what it is."""
    doc = yaml.safe_load(fleet.inventory.read_text())
    inv = tmp_path / "hosts.yaml"
    inv.write_text(yaml.safe_dump(doc))
    env = invoke_env(fleet, tmp_path)
    plan = run_invoke(
        ["plan", "--package", "sgl-kernel", "-H", "gpu1", "-i", str(inv), "--json"], env
    )
    host = json_of(plan)["hosts"]["gpu1"]
    assert "is not in recipe" not in str(host.get("error"))
    assert "source.ref is not pinned" not in str(host.get("error"))
    steps = {s["name"]: s for s in host["steps"]}
    assert "source:sgl-kernel" in steps, host
    message = steps["source:sgl-kernel"]["message"]
    assert (
        "sgl-kernel 0.4.10 from https://github.com/sgl-project/sglang@"
        "d9632eb78fd3092a0fa9137ddb5d590ac4c9b69b" in message
    ), message
    assert "the closest tree read" in message
