"""Recipes: loading and validation, selection by driver, inventory overrides with sources.

Drivers and GPUs are simulated as the facts dicts the facts layer produces (no GPU exists
here); the recipe files are the repo's real ones or real files written to tmp dirs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from sm120kit import drivers as drv
from sm120kit.errors import RecipeError
from sm120kit.inventory.host import Host
from sm120kit.recipes.select import (
    Recipe,
    default_recipes_dir,
    load_recipes,
    normalize_arch,
    resolve_for_host,
    select_recipe,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def recipes() -> dict[str, Recipe]:
    return load_recipes(REPO / "recipes")


def gpu_facts(driver: str | None, *caps: str | None, module: str = "open") -> dict[str, Any]:
    gpus = [
        {"index": i, "name": f"GPU {i}", "compute_cap": cap, "memory_mib": 32607}
        for i, cap in enumerate(caps)
    ]
    return {
        "gpu": {
            "present": bool(gpus),
            "driver_version": driver,
            "module": module,
            "gpus": gpus,
            "error": None if gpus else "nvidia-smi not found",
        }
    }


NO_GPU = gpu_facts(None)


# --------------------------------------------------------------------------- the repo's recipes


def test_repo_recipes_load(recipes: dict[str, Recipe]) -> None:
    assert sorted(recipes) == ["r570", "r575", "r580", "r590", "r595"]
    assert default_recipes_dir() == REPO / "recipes"
    for r in recipes.values():
        assert r.arch == ["12.0"]
        # January's sgl-kernel 0.3.21 (torch 2.9.1) written only where it builds against the
        # stack's torch: r570/r575 (sglang 0.5.9 on torch 2.9.1); the others take their
        # stack's sglang-kernel release from the lock (tests/fleet/test_stack_kernel_packages.py).
        want = {"minikernel", "flash-attn"} | (
            {"sgl-kernel"} if r.torch.version == "2.9.1" else set()
        )
        assert {p.name for p in r.packages if not p.derived} == want
        assert {p.name for p in r.packages} == {"minikernel", "flash-attn", "sgl-kernel"}
        assert r.source.endswith(f"recipes/{r.name}.toml")


def test_each_recipe_has_one_torch_its_locks(recipes: dict[str, Recipe]) -> None:
    """[torch] is the lock's torch: r570/r575 2.9.1 cu128, r580/r590/r595 2.14.1 cu130."""
    expect = {
        "r570": "2.9.1",
        "r575": "2.9.1",
        "r580": "2.14.1",
        "r590": "2.14.1",
        "r595": "2.14.1",
    }
    for name, version in expect.items():
        r = recipes[name]
        assert r.lock is not None
        assert (r.torch.version, r.torch.cuda) == (r.lock.torch, r.lock.torch_cuda)
        assert r.torch.version == version


def test_a_torch_other_than_the_locks_is_refused_at_load(tmp_path: Path) -> None:
    """The repo's r580 with a [torch] of its own, January's torch (it wins over the shared
    stack's, and is still checked against the lock): one line naming the file and key."""
    text = (REPO / "recipes" / "r580.toml").read_text()
    own = '[torch]\nversion = "2.9.1"\nindex = "pypi"\ncuda = "13.0"\n\n[stack]\nuse = "cu13"'
    folder = write(tmp_path, {"r580.toml": text.replace('[stack]\nuse = "cu13"', own)})
    with pytest.raises(RecipeError) as err:
        load_recipes(folder, patches_dir=REPO / "patches")
    msg = str(err.value)
    assert "r580.toml:" in msg and "torch.version" in msg and "\n" not in msg, msg
    assert (
        "differs from locks/sglang-0.5.23/pylock.cp311-manylinux_2_34_x86_64.toml's torch 2.14.1"
        in msg
    ), msg


def test_repo_recipes_pin_branch_toolkits(recipes: dict[str, Recipe]) -> None:
    """Each branch's toolkits, ceilings and torch (stack facts sections 1 and 3 (docs/stack-facts.md))."""
    expect = {
        "r570": ("12.8", 14, "https://download.pytorch.org/whl/cu128", "12.8"),
        "r575": ("12.9", 14, "https://download.pytorch.org/whl/cu128", "12.8"),
        "r580": ("13.0", 15, "pypi", "13.0"),
        "r590": ("13.1", 15, "pypi", "13.0"),
        "r595": ("13.2", 15, "pypi", "13.0"),
    }
    for name, (mm, gcc, index, torch_cuda) in expect.items():
        r = recipes[name]
        for choice in r.cuda.all():
            assert drv.cuda_major_minor(choice.version) == mm
            assert choice.gcc_max == gcc == drv.gcc_max(choice.version)
        assert (r.torch.index, r.torch.cuda) == (index, torch_cuda)
        # The 12.x pip wheel has no nvcc, so 12.x recipes install runfiles.
        if mm.startswith("12."):
            assert all(c.method == "runfile" for c in r.cuda.all())


def test_flash_attn_is_pinned_below_cxx20_torch(recipes: dict[str, Recipe]) -> None:
    """docs/stack-facts.md section 4: flash-attn 2.8.3 builds with -std=c++17; torch 2.14's headers need C++20."""
    for r in recipes.values():
        fa = next(p for p in r.packages if p.name == "flash-attn")
        assert fa.version == "2.8.3"
        assert fa.torch is not None and not fa.torch.contains("2.14.1")
        # the entry in force for the recipe's torch: 2.8.3 below 2.14, the patched post2 above
        chosen = next(p for p in r.packages_for(r.torch.version) if p.name == "flash-attn")
        assert chosen.version == ("2.8.3" if r.torch.version == "2.9.1" else "2.8.3.post2")


def test_sgl_kernel_source_is_the_sglang_repo(recipes: dict[str, Recipe]) -> None:
    sk = next(p for p in recipes["r570"].packages if p.name == "sgl-kernel")
    assert sk.source["kind"] == "git"
    assert sk.source["url"] == "https://github.com/sgl-project/sglang"
    assert sk.source["subdir"] == "sgl-kernel"
    mk = next(p for p in recipes["r580"].packages if p.name == "minikernel")
    assert mk.source == {"kind": "path", "path": "examples/minikernel"}
    assert mk.needs_cuda_torch is False


# --------------------------------------------------------------------------- selection table

TABLE = [
    # driver, recipe, toolkit
    ("570.26", "r570", "12.8.0"),
    ("570.86.10", "r570", "12.8.0"),
    ("570.124.05", "r570", "12.8.0"),
    ("570.124.06", "r570", "12.8.1"),
    ("570.133.07", "r570", "12.8.1"),
    ("570.195.03", "r570", "12.8.1"),
    ("575.51.03", "r575", "12.9.0"),
    ("575.57.07", "r575", "12.9.0"),
    ("575.57.08", "r575", "12.9.1"),
    ("575.64.05", "r575", "12.9.1"),
    ("580.65.06", "r580", "13.0.0"),
    ("580.76.05", "r580", "13.0.0"),
    ("580.82.07", "r580", "13.0.1"),
    ("580.95.04", "r580", "13.0.1"),
    ("580.95.05", "r580", "13.0.2"),
    ("580.105.08", "r580", "13.0.2"),
    ("589.99", "r580", "13.0.2"),
    ("590.44.01", "r590", "13.1.0"),
    ("590.48.00", "r590", "13.1.0"),
    ("590.48.01", "r590", "13.1.1"),
    ("594.1", "r590", "13.1.1"),
    ("595.45.04", "r595", "13.2.0"),
    ("595.58.02", "r595", "13.2.0"),
    ("595.58.03", "r595", "13.2.1"),
    ("595.71.04", "r595", "13.2.1"),
    ("595.71.05", "r595", "13.2.2"),
    ("600.10", "r595", "13.2.2"),
]


@pytest.mark.parametrize("driver, name, toolkit", TABLE)
def test_selection_table(recipes: dict[str, Recipe], driver: str, name: str, toolkit: str) -> None:
    sel = select_recipe(recipes, driver=driver, arch="12.0")
    assert (sel.recipe.name, sel.cuda_version) == (name, toolkit)
    # Whatever is chosen, NVIDIA's table says the exact driver can run it ...
    assert drv.toolkit_can_run(toolkit, driver)
    # ... and it is the newest of the branch's X.Y that the driver can run.
    assert drv.newest_toolkit_for(driver, drv.cuda_major_minor(toolkit)) == toolkit
    assert driver in sel.reason and name in sel.reason and toolkit in sel.reason


@pytest.mark.parametrize(
    "driver", ["569.99", "570.25", "570.0", "565.57.01", "560.35.03", "550.54.15", "470.82.01"]
)
def test_drivers_too_old_for_sm120_are_refused(recipes: dict[str, Recipe], driver: str) -> None:
    with pytest.raises(RecipeError, match=rf"driver {re.escape(driver)} is too old .*>= 570\.26"):
        select_recipe(recipes, driver=driver, arch="12.0")


def test_forcing_a_recipe_does_not_admit_an_old_driver(recipes: dict[str, Recipe]) -> None:
    with pytest.raises(RecipeError, match=r"570\.26"):
        select_recipe(recipes, driver="550.54.15", arch="12.0", forced="r570")


@pytest.mark.parametrize("driver", ["575.0", "575.51.02", "580.10", "580.65.05", "590.10", "595.1"])
def test_driver_between_branches_names_recipes_and_flag(
    recipes: dict[str, Recipe], driver: str
) -> None:
    with pytest.raises(RecipeError) as err:
        select_recipe(recipes, driver=driver, arch="12.0")
    msg = str(err.value)
    assert f"no recipe serves driver {driver}" in msg
    assert "r575 '>=575.51.03,<580'" in msg and "--recipe NAME" in msg


def test_unknown_driver_names_flags_and_vars(recipes: dict[str, Recipe]) -> None:
    with pytest.raises(RecipeError) as err:
        select_recipe(recipes, driver=None, arch=None)
    msg = str(err.value)
    for name in ("--driver", "--arch", "target_driver", "target_arch"):
        assert name in msg


def test_unknown_arch_names_flag_and_var(recipes: dict[str, Recipe]) -> None:
    with pytest.raises(RecipeError, match=r"--arch .*target_arch"):
        select_recipe(recipes, driver="580.95.05", arch=None)


def test_arch_without_recipe(recipes: dict[str, Recipe]) -> None:
    # GB10 is 12.1: a different chip that does not run sm_120a code.
    with pytest.raises(RecipeError, match=r"no recipe targets arch 12\.1 \(recipes target 12\.0\)"):
        select_recipe(recipes, driver="580.95.05", arch="12.1")


def test_bad_driver_string(recipes: dict[str, Recipe]) -> None:
    with pytest.raises(RecipeError, match="not a driver version"):
        select_recipe(recipes, driver="latest", arch="12.0")


@pytest.mark.parametrize(
    "spelling", ["12.0", "120", "sm_120", "sm_120a", "compute_120", "12.0a", "12.0+PTX", 12.0]
)
def test_normalize_arch(spelling: object) -> None:
    assert normalize_arch(spelling) == "12.0"


# --------------------------------------------------------------------------- forced recipes


def test_forced_recipe_outside_its_range(recipes: dict[str, Recipe]) -> None:
    sel = select_recipe(recipes, driver="580.95.05", arch="12.0", forced="r570")
    assert (sel.recipe.name, sel.cuda_version, sel.forced) == ("r570", "12.8.1", True)
    assert "forced by --recipe r570" in sel.reason and "outside" in sel.reason


def test_forced_recipe_needs_a_runnable_toolkit(recipes: dict[str, Recipe]) -> None:
    with pytest.raises(
        RecipeError, match=r"--recipe r580: its CUDA 13\.0\.0 needs driver >= 580\.65\.06"
    ):
        select_recipe(recipes, driver="575.57.08", arch="12.0", forced="r580")


def test_forced_recipe_without_driver_uses_default(recipes: dict[str, Recipe]) -> None:
    sel = select_recipe(recipes, driver=None, arch=None, forced="r580")
    assert sel.cuda_version == "13.0.2" and "driver unknown" in sel.reason


def test_forced_unknown_recipe(recipes: dict[str, Recipe]) -> None:
    with pytest.raises(RecipeError, match=r"--recipe r999: no such recipe \(known: r570, r575"):
        select_recipe(recipes, driver="580.95.05", arch="12.0", forced="r999")


# --------------------------------------------------------------------------- hosts and facts


def test_resolve_from_facts(recipes: dict[str, Recipe]) -> None:
    host = Host("gpu1")
    res = resolve_for_host(recipes, host, gpu_facts("580.95.05", "12.0", "12.0"))
    assert res.recipe.name == "r580"
    assert res.values["cuda.version"] == "13.0.2"
    assert res.values["cuda.method"] == "pip"
    assert res.sources["cuda.version"] == f"{res.recipe.source} (cuda.choices[0])"
    assert res.sources["torch.index"] == "recipes/shared/stacks.toml (stack cu13)"
    assert res.values["target.driver"] == "580.95.05"
    assert res.sources["target.driver"].startswith("facts")
    assert res.values["target.arch"] == "12.0"
    assert res.values["cuda.pip_packages"][0] == "nvidia-cuda-nvcc==13.0.*"
    assert res.notes == []
    # Every package is buildable against the stack's torch 2.14.1 (flash-attn: 2.8.3.post2);
    # the stack's sgl-kernel 0.4.10 is pinned to the closest sglang tree read, and says so
    # (its release's commit is not recorded: docs/sgl-kernel.md).
    assert dict(res.problems) == {}
    new = res.package("sgl-kernel")
    assert new["source"]["ref"].startswith("d9632eb7")
    assert "closest tree read" in new["source"]["note"]
    assert res.values["torch.version"] == "2.14.1"
    assert res.package("flash-attn")["version"] == "2.8.3.post2"
    old = resolve_for_host(recipes, Host("gpu2"), gpu_facts("570.124.06", "12.0"))
    sk = old.package("sgl-kernel")  # January's build: r570's, on its torch 2.9.1
    assert sk["source"]["ref"] == "c86ca12875bbdea8f39267f02a0d55c68ea99d8e"
    assert [d["name"] for d in sk["dependencies"]][:2] == ["repo-cutlass", "repo-deepgemm"]
    assert res.package("minikernel")["source"] == {"kind": "path", "path": "examples/minikernel"}


def test_resolve_runfile_choice_derives_url(recipes: dict[str, Recipe]) -> None:
    res = resolve_for_host(recipes, Host("gpu2"), gpu_facts("570.86.10", "12.0"))
    assert res.values["cuda.version"] == "12.8.0"
    assert res.values["cuda.runfile"] == "cuda_12.8.0_570.86.10_linux.run"
    assert res.values["cuda.url"] == (
        "https://developer.download.nvidia.com/compute/cuda/12.8.0/local_installers/"
        "cuda_12.8.0_570.86.10_linux.run"
    )
    assert res.values["cuda.gcc_max"] == 14
    assert any("cuda.sha256 is unknown" in n for n in res.notes)


@pytest.mark.parametrize("facts", [NO_GPU, None, {"gpu": {"present": False}}])
def test_host_without_gpu_needs_target_driver(recipes: dict[str, Recipe], facts: Any) -> None:
    with pytest.raises(RecipeError) as err:
        resolve_for_host(recipes, Host("buildbox"), facts)
    msg = str(err.value)
    assert msg.startswith("host buildbox: ")
    for name in ("--driver", "--arch", "target_driver", "target_arch"):
        assert name in msg
    assert "\n" not in msg


def test_old_driver_from_facts_is_refused(recipes: dict[str, Recipe]) -> None:
    """An A100 on 470: nvidia-smi rejects compute_cap, so the capability is unknown."""
    with pytest.raises(RecipeError, match=r"host old: driver 470\.82\.01 is too old .*570\.26"):
        resolve_for_host(recipes, Host("old"), gpu_facts("470.82.01", None))


def test_driver_from_proc_without_nvidia_smi_needs_arch(recipes: dict[str, Recipe]) -> None:
    facts = gpu_facts(None)
    facts["gpu"]["driver_version"] = "580.95.05"  # read from /proc/driver/nvidia/version
    with pytest.raises(RecipeError, match=r"host g: target arch unknown: pass --arch"):
        resolve_for_host(recipes, Host("g"), facts)


def test_cross_build_host_vars(recipes: dict[str, Recipe]) -> None:
    host = Host(
        "buildbox",
        vars={"target_driver": "570.124.06", "target_arch": "12.0"},
        var_sources={
            "target_driver": "inventory/host_vars/buildbox.yaml",
            "target_arch": "inventory/group_vars/cross.yaml",
        },
    )
    res = resolve_for_host(recipes, host, NO_GPU)
    assert (res.recipe.name, res.values["cuda.version"]) == ("r570", "12.8.1")
    assert res.sources["target.driver"] == "inventory/host_vars/buildbox.yaml (target_driver)"
    assert res.sources["target.arch"] == "inventory/group_vars/cross.yaml (target_arch)"


def test_flags_beat_host_vars_beat_facts(recipes: dict[str, Recipe]) -> None:
    host = Host("gpu1", vars={"target_driver": "575.57.08"})
    facts = gpu_facts("580.95.05", "12.0")
    res = resolve_for_host(recipes, host, facts)
    assert res.values["cuda.version"] == "12.9.1"
    assert any("differs from the installed 580.95.05" in n for n in res.notes)
    res = resolve_for_host(recipes, host, facts, driver="570.86.10", arch="sm_120")
    assert res.values["cuda.version"] == "12.8.0"
    assert res.sources["target.driver"] == "--driver flag"
    assert res.sources["target.arch"] == "--arch flag"


def test_unquoted_float_target_driver_is_refused(recipes: dict[str, Recipe]) -> None:
    host = Host("b", vars={"target_driver": 575.5}, var_sources={"target_driver": "inv.yaml"})
    with pytest.raises(
        RecipeError, match=r"host b: inv\.yaml \(target_driver\): write 575\.5 quoted"
    ):
        resolve_for_host(recipes, host, NO_GPU)


def test_mixed_gpus_note_the_untargeted_one(recipes: dict[str, Recipe]) -> None:
    res = resolve_for_host(recipes, Host("mix"), gpu_facts("580.95.05", "8.9", "12.0"))
    assert res.values["target.arch"] == "12.0"
    assert any("GPU 0" in n and "8.9" in n for n in res.notes)


def test_proprietary_modules_are_noted(recipes: dict[str, Recipe]) -> None:
    res = resolve_for_host(recipes, Host("p"), gpu_facts("580.95.05", "12.0", module="proprietary"))
    assert any("open" in n for n in res.notes)


def test_forced_recipe_on_cpu_box_without_driver(recipes: dict[str, Recipe]) -> None:
    res = resolve_for_host(recipes, Host("cpu"), NO_GPU, forced="r580")
    assert res.values["recipe"] == "r580"
    assert "forced by --recipe r580" in res.sources["recipe"]
    assert "target.driver" not in res.values


# --------------------------------------------------------------------------- overrides


def override_host(**pairs: Any) -> Host:
    """A host whose `recipe.*` vars come from a named group_vars file."""
    vars = {"target_driver": "580.95.05", "target_arch": "12.0"}
    sources = {}
    for key, value in pairs.items():
        var = "recipe." + key.replace("__", ".").replace("_DASH_", "-")
        vars[var] = value
        sources[var] = "inventory/group_vars/cross.yaml"
    return Host("box", vars=vars, var_sources=sources)


def test_cpu_torch_override_for_cross_build(recipes: dict[str, Recipe]) -> None:
    host = Host(
        "box",
        vars={
            "target_driver": "580.95.05",
            "target_arch": "12.0",
            "recipe.torch.index": "https://download.pytorch.org/whl/cpu",
            "recipe.torch.version": "2.13.0",
        },
        var_sources={
            "recipe.torch.index": "inventory/group_vars/cross.yaml",
            "recipe.torch.version": "inventory/host_vars/box.yaml",
        },
    )
    res = resolve_for_host(recipes, host, NO_GPU)
    assert res.values["torch.index"] == "https://download.pytorch.org/whl/cpu"
    assert res.sources["torch.index"] == "inventory/group_vars/cross.yaml (recipe.torch.index)"
    assert res.sources["torch.version"] == "inventory/host_vars/box.yaml (recipe.torch.version)"
    assert res.values["torch.cuda"] == "cpu"
    assert res.sources["torch.cuda"].startswith("derived from torch.index")
    # minikernel builds against a CPU torch; the CUDAExtension packages cannot.
    assert "minikernel" not in res.problems
    assert any("CPU torch" in p for p in res.problems["flash-attn"])
    # The stack's sgl-kernel 0.4.10 (from the lock) pins the lock's torch, 2.14.1.
    assert any("outside its torch '==2.14.1'" in p for p in res.problems["sgl-kernel"])
    rows = {k: (v, s) for k, v, s in res.rows()}
    assert rows["torch.version"] == (
        "2.13.0",
        "inventory/host_vars/box.yaml (recipe.torch.version)",
    )
    assert rows["cuda.version"][1] == f"{res.recipe.source} (cuda.choices[0])"


def test_mirror_override_moves_the_download(recipes: dict[str, Recipe]) -> None:
    host = override_host(cuda__mirror="http://mirror.lan/cuda/", cuda__method="runfile")
    res = resolve_for_host(recipes, host, None)
    assert res.values["cuda.url"] == (
        "http://mirror.lan/cuda/13.0.2/local_installers/cuda_13.0.2_580.95.05_linux.run"
    )
    assert res.sources["cuda.mirror"] == "inventory/group_vars/cross.yaml (recipe.cuda.mirror)"


def test_toolkit_override_rederives_its_files(recipes: dict[str, Recipe]) -> None:
    host = override_host(
        cuda__version="12.8.1",
        cuda__method="runfile",
        torch__index="https://download.pytorch.org/whl/cu128",
    )
    res = resolve_for_host(recipes, host, None)
    assert res.values["cuda.runfile"] == "cuda_12.8.1_570.124.06_linux.run"
    assert res.sources["cuda.runfile"] == "sm120kit/drivers.py (CUDA 12.8.1)"
    assert res.values["cuda.gcc_max"] == 14  # 13.0's 15 is above nvcc 12.8's ceiling
    assert res.values["torch.cuda"] == "12.8"


def test_toolkit_override_needing_newer_driver(recipes: dict[str, Recipe]) -> None:
    host = override_host(cuda__version="13.1.1")
    with pytest.raises(RecipeError) as err:
        resolve_for_host(recipes, host, None)
    msg = str(err.value)
    assert "cuda.version = '13.1.1'" in msg and "(recipe.cuda.version)" in msg
    assert "needs driver >= 590.48.01" in msg and "580.95.05" in msg


def test_torch_major_mismatch_override(recipes: dict[str, Recipe]) -> None:
    host = override_host(torch__index="https://download.pytorch.org/whl/cu128")
    with pytest.raises(RecipeError, match=r"torch\.cuda = '12\.8' .*cannot take nvcc 13\.0\.2"):
        resolve_for_host(recipes, host, None)


def test_pip_method_on_cuda12_is_refused(recipes: dict[str, Recipe]) -> None:
    host = override_host(cuda__method="pip")
    host.vars["target_driver"] = "570.124.06"
    with pytest.raises(
        RecipeError,
        match=r"cuda\.method = 'pip' \(from inventory/group_vars/cross\.yaml.*no pip route",
    ):
        resolve_for_host(recipes, host, None)


def test_knob_and_ref_overrides(recipes: dict[str, Recipe]) -> None:
    host = Host(
        "box",
        vars={
            "target_driver": "570.124.06",  # r570: sgl-kernel 0.3.21
            "target_arch": "12.0",
            "recipe.packages.flash-attn.knobs.MAX_JOBS": 2,
            "recipe.packages.sgl-kernel.source.ref": "0123abcd",
        },
        var_sources={"recipe.packages.flash-attn.knobs.MAX_JOBS": "inventory/hosts.yaml: host box"},
    )
    res = resolve_for_host(recipes, host, None)
    assert res.package("flash-attn")["knobs"] == {"MAX_JOBS": 2}
    assert res.sources["packages.flash-attn.knobs.MAX_JOBS"] == (
        "inventory/hosts.yaml: host box (recipe.packages.flash-attn.knobs.MAX_JOBS)"
    )
    assert res.package("sgl-kernel")["source"]["ref"] == "0123abcd"
    assert res.problems == {}


def test_source_kind_override_to_local_checkout(recipes: dict[str, Recipe]) -> None:
    host = Host(
        "box",
        vars={
            "target_driver": "570.124.06",  # r570: sgl-kernel 0.3.21
            "target_arch": "12.0",
            "recipe.packages.sgl-kernel.source.kind": "path",
            "recipe.packages.sgl-kernel.source.path": "/src/sglang/sgl-kernel",
        },
    )
    res = resolve_for_host(recipes, host, None)
    assert res.package("sgl-kernel")["source"] == {"kind": "path", "path": "/src/sglang/sgl-kernel"}
    host.vars.pop("recipe.packages.sgl-kernel.source.path")
    with pytest.raises(RecipeError, match=r"a path source needs source\.path"):
        resolve_for_host(recipes, host, None)


@pytest.mark.parametrize(
    "var, value, pattern",
    [
        (
            "recipe.torch.verison",
            "2.9.1",
            r"recipe\.torch\.verison is not a recipe value \(did you mean recipe\.torch\.version\?\)",
        ),
        ("recipe.drivers", ">=1", r"recipe\.drivers cannot be overridden.*--recipe"),
        ("recipe.cuda.gcc_max", "fourteen", r"recipe\.cuda\.gcc_max: expected a GCC major"),
        ("recipe.python", 3.1, r"recipe\.python: write 3\.1 as a quoted string"),
        ("recipe.cuda.version", "12.6.3", r"recipe\.cuda\.version: unknown CUDA toolkit 12\.6\.3"),
        (
            "recipe.packages.nope.version",
            "1",
            r"recipe\.packages\.nope\.version is not a recipe value",
        ),
        (
            "recipe.packages.flash-attn.patches",
            ["nope.patch"],
            r"patch file .*nope\.patch does not exist",
        ),
        ("recipe.cuda.sha256", "abc", r"64 hex digits"),
    ],
)
def test_bad_overrides_name_source_and_var(
    recipes: dict[str, Recipe], var: str, value: Any, pattern: str
) -> None:
    host = Host(
        "box",
        vars={"target_driver": "580.95.05", "target_arch": "12.0", var: value},
        var_sources={var: "inventory/group_vars/all.yaml"},
    )
    with pytest.raises(RecipeError, match=pattern) as err:
        resolve_for_host(recipes, host, None)
    assert str(err.value).startswith("host box: ")
    assert "inventory/group_vars/all.yaml" in str(err.value)


def test_nested_recipe_dict_is_refused(recipes: dict[str, Recipe]) -> None:
    host = Host("box", vars={"target_driver": "580.95.05", "recipe": {"torch": {"version": "x"}}})
    with pytest.raises(RecipeError, match=r"flat vars such as 'recipe\.torch\.version"):
        resolve_for_host(recipes, host, None)


# --------------------------------------------------------------------------- validation

GOOD = """\
name = "{name}"
description = "test recipe"
drivers = "{drivers}"
arch = ["12.0"]
python = "3.11"

[cuda]
version = "13.0.2"
method = "pip"
gcc_max = 15

[[cuda.choices]]
drivers = ">=580.95.05"
version = "13.0.2"

[[cuda.choices]]
drivers = "<580.95.05"
version = "13.0.0"
method = "runfile"
runfile = "cuda_13.0.0_580.65.06_linux.run"

[torch]
version = "2.9.1"
index = "https://download.pytorch.org/whl/cu130"
cuda = "13.0"

[[packages]]
name = "minikernel"
version = "0.1.0"
source = {{ kind = "path", path = "examples/minikernel" }}
patches = []
knobs = {{ MAX_JOBS = 1 }}
"""


def good(name: str = "r580", drivers: str = ">=580.65.06,<590") -> str:
    return GOOD.format(name=name, drivers=drivers)


def write(tmp_path: Path, files: dict[str, str]) -> Path:
    folder = tmp_path / "recipes"
    folder.mkdir(exist_ok=True)
    (tmp_path / "patches").mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def mutate(old: str, new: str, text: str | None = None) -> str:
    text = good() if text is None else text
    assert old in text, old
    return text.replace(old, new, 1)


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def load_error(tmp_path: Path, text: str, file: str = "r580.toml") -> str:
    folder = write(tmp_path, {file: text})
    with pytest.raises(RecipeError) as err:
        load_recipes(folder)
    msg = str(err.value)
    assert file in msg and "\n" not in msg
    return msg


def test_good_tmp_recipe_loads(tmp_path: Path) -> None:
    recipes = load_recipes(write(tmp_path, {"r580.toml": good()}))
    assert recipes["r580"].cuda.choose(drv.parse_driver_version("580.65.06")).version == "13.0.0"


@pytest.mark.parametrize(
    "old, new, key, needle, problem",
    [
        ('python = "3.11"', 'python = "3.11"\ncolour = "red"', "colour", "colour", "unknown key"),
        (
            "gcc_max = 15",
            "gcc_max = 15\ngcc_min = 9",
            "cuda.gcc_min",
            "gcc_min",
            "did you mean 'gcc_max'",
        ),
        (
            'version = "13.0.0"',
            'version = "13.0.0"\nflavour = 1',
            "cuda.choices[1].flavour",
            "flavour",
            "unknown key",
        ),
        ('cuda = "13.0"', 'cuda = "13.0"\nabi = "cxx11"', "torch.abi", "abi", "unknown key"),
        (
            "patches = []",
            "patches = []\nbuild = 1",
            "packages[0].build",
            "build = 1",
            "expected a table, got int",
        ),
        (
            'path = "examples/minikernel" }',
            'path = "x", ref = "y" }',
            "packages[0].source.ref",
            "source = ",
            "unknown key",
        ),
        (
            'drivers = ">=580.65.06,<590"',
            'drivers = ">=580.65.06,<<590"',
            "drivers",
            "<<590",
            "not a version specifier",
        ),
        (
            'drivers = ">=580.95.05"',
            'drivers = "=>580.95.05"',
            "cuda.choices[0].drivers",
            "=>580",
            "not a version specifier",
        ),
        (
            'drivers = ">=580.65.06,<590"',
            'drivers = ">=580.65.06,<590a1"',
            "drivers",
            "<590a1",
            "does not name a driver version",
        ),
        (
            'name = "r580"',
            'name = "r581"',
            "name",
            'name = "r581"',
            "must equal the file name stem",
        ),
        (
            'version = "13.0.0"',
            'version = "12.6.3"',
            "cuda.choices[1].version",
            '"12.6.3"',
            "unknown CUDA toolkit",
        ),
        (
            "gcc_max = 15",
            "gcc_max = 16",
            "cuda.gcc_max",
            "gcc_max = 16",
            "above nvcc 13.0.2's own ceiling, GCC 15",
        ),
        (
            'method = "runfile"',
            'method = "conda"',
            "cuda.choices[1].method",
            "conda",
            "not one of runfile, pip, apt",
        ),
        (
            'runfile = "cuda_13.0.0_580.65.06_linux.run"',
            'runfile = "cuda_13.0.1_580.82.07_linux.run"',
            "cuda.choices[1].runfile",
            "cuda_13.0.1",
            "not a CUDA 13.0.0 runfile",
        ),
        (
            'runfile = "cuda_13.0.0_580.65.06_linux.run"',
            "",
            "cuda.choices[1].version",
            'version = "13.0.0"',
            "no runfile name known for CUDA 13.0.0",
        ),
        ('cuda = "13.0"', 'cuda = "12.8"', "torch.cuda", 'cuda = "12.8"', "disagrees with index"),
        ('python = "3.11"', "python = 3.11", "python", "python = 3.11", "quoted string"),
        ('arch = ["12.0"]', 'arch = ["sm120"]', "arch", "arch = ", "is not an arch"),
        (
            'description = "test recipe"\n',
            "",
            "description",
            "",
            "missing required key 'description'",
        ),
        ("gcc_max = 15\n", "", "cuda", "[cuda]", "missing required key 'gcc_max'"),
    ],
)
def test_validation_errors_name_file_line_and_key(
    tmp_path: Path, old: str, new: str, key: str, needle: str, problem: str
) -> None:
    text = mutate(old, new)
    msg = load_error(tmp_path, text)
    assert f": {key}: " in msg, msg
    assert problem in msg, msg
    if needle:
        assert f"r580.toml:{line_of(text, needle)}: " in msg, msg


def test_pip_method_on_cuda12_recipe(tmp_path: Path) -> None:
    text = mutate('version = "13.0.0"', 'version = "12.8.1"')
    text = mutate('method = "runfile"\n', 'method = "pip"\ngcc_max = 14\n', text)
    text = mutate('runfile = "cuda_13.0.0_580.65.06_linux.run"\n', "", text)
    text = mutate('cuda = "13.0"', 'cuda = "cpu"', text).replace("/whl/cu130", "/whl/cpu")
    msg = load_error(tmp_path, text)
    assert "cuda.choices[1].method: CUDA 12.8.1 has no pip route" in msg


def test_torch_major_must_match_every_toolkit(tmp_path: Path) -> None:
    text = mutate('version = "13.0.0"', 'version = "12.9.1"')
    text = mutate(
        'runfile = "cuda_13.0.0_580.65.06_linux.run"',
        'runfile = "cuda_12.9.1_575.57.08_linux.run"',
        text,
    )
    text = mutate("gcc_max = 15", "gcc_max = 14", text)
    msg = load_error(tmp_path, text)
    assert "torch.cuda: torch built for CUDA 13.0 cannot take nvcc 12.9.1" in msg


def test_toolkit_needing_a_newer_driver_than_the_range(tmp_path: Path) -> None:
    """Without choices, 13.0.2 (needs 580.95.05) cannot serve a range starting at 580.65.06."""
    text = (
        good().split("[[cuda.choices]]")[0]
        + good().split('runfile = "cuda_13.0.0_580.65.06_linux.run"\n')[1]
    )
    msg = load_error(tmp_path, text)
    line = line_of(text, 'version = "13.0.2"')
    assert f"r580.toml:{line}: cuda.version: " in msg
    assert "CUDA 13.0.2 needs driver >= 580.95.05" in msg and "admits 580.65.06" in msg


def test_choice_gap_is_found(tmp_path: Path) -> None:
    """A choice range that leaves drivers to a toolkit they cannot run is caught."""
    text = mutate('drivers = "<580.95.05"', 'drivers = "<580.82.07"')
    msg = load_error(tmp_path, text)
    assert "cuda.version: CUDA 13.0.2 needs driver >= 580.95.05" in msg
    assert "admits 580.82.07" in msg


R570 = """\
name = "r570"
description = "test recipe"
drivers = ">=570.26,<575"
arch = ["12.0"]
python = "3.11"

[cuda]
version = "12.8.1"
method = "runfile"
gcc_max = 14

[torch]
version = "2.9.1"
index = "https://download.pytorch.org/whl/cu128"
cuda = "12.8"
"""


def test_choices_covering_the_range_make_it_valid(tmp_path: Path) -> None:
    """570.86.10 cannot take 12.8 Update 1 (570.124.06): the range needs a choice for it."""
    msg = load_error(tmp_path, R570, "r570.toml")
    assert "r570.toml:8: cuda.version: CUDA 12.8.1 needs driver >= 570.124.06" in msg
    assert "admits 570.26" in msg
    covered = R570.replace(
        "[torch]", '[[cuda.choices]]\ndrivers = "<570.124.06"\nversion = "12.8.0"\n\n[torch]'
    )
    recipes = load_recipes(write(tmp_path, {"r570.toml": covered}))
    sel = select_recipe(recipes, driver="570.86.10", arch="12.0")
    assert sel.cuda_version == "12.8.0"
    assert sel.cuda.runfile == "cuda_12.8.0_570.86.10_linux.run"  # derived from the table
    assert sel.cuda.origins["runfile"] == "derived"
    assert select_recipe(recipes, driver="570.124.06", arch="12.0").cuda_version == "12.8.1"


def test_overlapping_ranges(tmp_path: Path) -> None:
    folder = write(
        tmp_path,
        {"r580.toml": good(), "r581.toml": good("r581", ">=585,<600")},
    )
    with pytest.raises(RecipeError) as err:
        load_recipes(folder)
    msg = str(err.value)
    assert "r581.toml:3: drivers: '>=585,<600' overlaps" in msg
    assert "r580.toml drivers '>=580.65.06,<590'" in msg and "both admit driver 585" in msg


def test_adjacent_ranges_do_not_overlap(tmp_path: Path) -> None:
    folder = write(tmp_path, {"r580.toml": good(), "r590.toml": good("r590", ">=590,<600")})
    assert sorted(load_recipes(folder)) == ["r580", "r590"]


def test_missing_and_present_patch_files(tmp_path: Path) -> None:
    text = mutate("patches = []", 'patches = ["minikernel/fix.patch"]')
    msg = load_error(tmp_path, text)
    assert f"r580.toml:{line_of(text, 'fix.patch')}: packages[0].patches: patch file " in msg
    assert "minikernel/fix.patch does not exist" in msg
    (tmp_path / "patches" / "minikernel").mkdir()
    (tmp_path / "patches" / "minikernel" / "fix.patch").write_text("--- a/x\n+++ b/x\n")
    recipes = load_recipes(tmp_path / "recipes")
    assert recipes["r580"].packages[0].patches == ["minikernel/fix.patch"]


def test_patch_paths_stay_under_patches_dir(tmp_path: Path) -> None:
    msg = load_error(tmp_path, mutate("patches = []", 'patches = ["../etc/passwd"]'))
    assert "packages[0].patches: patch '../etc/passwd' must be a path relative to patches/" in msg


def test_package_torch_constraint(tmp_path: Path) -> None:
    text = mutate("knobs = { MAX_JOBS = 1 }", 'knobs = { MAX_JOBS = 1 }\ntorch = "<2.9"')
    msg = load_error(tmp_path, text)
    assert "packages[0].torch: torch 2.9.1 is outside minikernel's torch '<2.9'" in msg


def test_duplicate_package(tmp_path: Path) -> None:
    block = good().split("[[packages]]")[1]
    msg = load_error(tmp_path, good() + "\n[[packages]]" + block)
    assert "packages[1].name: package 'minikernel' listed twice" in msg


def test_bad_source_kind(tmp_path: Path) -> None:
    msg = load_error(tmp_path, mutate('kind = "path"', 'kind = "svn"'))
    assert "packages[0].source.kind: source kind 'svn' is not one of path, git, pypi" in msg


def test_invalid_toml(tmp_path: Path) -> None:
    msg = load_error(tmp_path, good() + "\n[cuda\n")
    assert "r580.toml: invalid TOML" in msg and "line" in msg


def test_empty_and_missing_directories(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="no \\*.toml recipes"):
        load_recipes(write(tmp_path, {}))
    with pytest.raises(RecipeError, match="recipes directory not found"):
        load_recipes(tmp_path / "nowhere")
