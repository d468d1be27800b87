"""A kernel package added through a descriptor alone: tests/fixtures/mypkg (a torch extension
whose setup.py reads only its own arch knob, MYPKG_ARCHS) with its descriptor
(tests/support/mypkg_descriptor.py) registered from here and one recipe entry. Nothing in
sm120kit names it, yet it builds (real nvcc on a fleet host), is cached and shared, and is
smoked like the packages that ship with the tool.

Also the registry's answers for the built-in packages, which the ops ask instead of naming
packages.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sm120kit.builds import cuda_libraries
from sm120kit.builds.knobs import resolve_knobs
from sm120kit.errors import RecipeError
from sm120kit.ops.pyenv import build_tools
from sm120kit.packages import registry
from sm120kit.plays.build import ensure_package
from sm120kit.plays.plan import PlanOptions, prepare
from sm120kit.plays.smoke import smoke_packages
from sm120kit.recipes.select import default_recipes_dir, load_recipes
from sm120kit.runner.pool import HostContext
from sm120kit.state import PyEnv, Toolkit
from tests.real.test_build_op import assert_ok, host, make_env, run_op, toolkit  # noqa: F401
from tests.support.fleet import Fleet
from tests.support.mypkg_descriptor import MYPKG

FIXTURE = Path(__file__).parent.parent / "fixtures" / "mypkg"
FACTS = {"cpu": {"count": 8}, "memory": {"available_bytes": 32 * 1024**3}}


@pytest.fixture
def mypkg() -> Iterator[None]:
    """The fixture's descriptor, registered for one test."""
    registry.register(MYPKG)
    try:
        yield
    finally:
        registry.unregister(MYPKG)


@pytest.fixture
def recipes_dir(tmp_path: Path) -> Path:
    """The shipped recipes plus one entry for mypkg in r580 (the fleet hosts' recipe)."""
    shipped = default_recipes_dir()
    out = tmp_path / "recipes"
    shutil.copytree(shipped, out)
    shutil.copytree(shipped.parent / "patches", tmp_path / "patches")
    with (out / "r580.toml").open("a", encoding="utf-8") as f:
        f.write(
            "\n[[packages]]\n"
            'name = "mypkg"\n'
            'version = "0.1.0"\n'
            f'source = {{ kind = "path", path = "{FIXTURE}" }}\n'
            "patches = []\n"
            "knobs = {}\n"
            "needs_cuda_torch = false\n"
        )
    return out


# ------------------------------------------------------------------------------- registry


def test_builtin_descriptors_answer_what_the_ops_ask() -> None:
    assert registry.smoke_defaults() == ("sgl-kernel", "flash-attn", "minikernel")
    assert (
        registry.descriptor("sgl-kernel").cmake and registry.descriptor("sgl-kernel").cmake_checked
    )
    assert registry.descriptor("flash-attn").threads_knob == "NVCC_THREADS"
    assert registry.descriptor("anything-else").kind == "torch-ext"
    assert set(registry.kinds()) == {"sgl-kernel", "flash-attn", "torch-ext"}
    assert cuda_libraries.package_needs(registry.descriptor("flash-attn")) == ()


#: Outside its descriptor, a package's name stands only in help and error examples that
#: tests assert verbatim (test_task_flags, test_inventory), and in the preflight rules: data
#: about a serving stack's modules, each rule with its upstream source.
# Besides the descriptors: flags and host vars that take a package name, the cited preflight
# rules, and the notes that cite sglang's own import of sgl_kernel during its argument
# resolution (why preflight needs a driver stub and how long the resolution takes).
NAMED_ELSEWHERE = {
    "cli/flags.py",
    "inventory/hostvars.py",
    "preflight/rules.py",
    "preflight/verdicts.py",
    # vLLM's own backend files (vllm/v1/attention/backends/flash_attn.py), cited by path.
    "preflight/vllm_checks.py",
    "remote/lib/driver_stub.py",
    "remote/lib/in_target/server_args.py",
}


@pytest.mark.parametrize("names", [("sgl-kernel", "sgl_kernel"), ("flash-attn", "flash_attn")])
def test_only_the_descriptor_names_its_package(names: tuple[str, ...]) -> None:
    """What is specific to a package lives in sm120kit/packages/: no op, knob or smoke module
    names it."""
    root = Path(__file__).resolve().parents[2] / "sm120kit"
    naming = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if any(n in p.read_text(encoding="utf-8") for n in names)
    )
    outside = [p for p in naming if not p.startswith("packages/") and p not in NAMED_ELSEWHERE]
    assert not outside, f"{names[0]} is named outside its descriptor: {outside}"


def test_unregistered_kind_is_refused() -> None:
    with pytest.raises(RecipeError, match="build kind 'mypkg' is not one of"):
        resolve_knobs("mypkg", "mypkg", ["12.0"], FACTS, {})


def test_descriptor_alone_gives_the_knobs(mypkg: None) -> None:
    knobs = resolve_knobs("mypkg", "mypkg", ["12.0a", "12.0+PTX", "9.0"], FACTS, {})
    assert knobs.env["MYPKG_ARCHS"] == "120a;120;90"
    assert "TORCH_CUDA_ARCH_LIST" not in knobs.env
    assert knobs.env["MAX_JOBS"] == "8"
    # Its arch check, like flash-attn's, refuses a value its build would not take.
    with pytest.raises(RecipeError, match=r"MYPKG_ARCHS='12\.0': 12\.0 not like 120"):
        resolve_knobs("mypkg", "mypkg", ["12.0"], FACTS, {"MYPKG_ARCHS": "12.0"}, version="0.1.0")
    # Another package's switch is refused by name.
    with pytest.raises(RecipeError, match="sm120_only is for sgl-kernel only"):
        resolve_knobs("mypkg", "mypkg", ["12.0"], FACTS, {"sm120_only": True})
    assert build_tools([registry.descriptor("mypkg")]) == build_tools(
        [registry.descriptor("minikernel")]
    )


def test_recipe_problem_from_the_descriptor(mypkg: None, recipes_dir: Path) -> None:
    """The recipe layer asks the descriptor's arch check too (as for flash-attn)."""
    from sm120kit.inventory.host import Host
    from sm120kit.recipes.select import resolve_for_host

    recipes = load_recipes(recipes_dir)
    box = Host(
        "box",
        vars={
            "target_driver": "580.95.05",
            "target_arch": "12.0",
            "recipe.packages.mypkg.knobs.MYPKG_ARCHS": "12.0",
        },
    )
    res = resolve_for_host(recipes, box, None)
    assert any("MYPKG_ARCHS='12.0'" in p for p in res.problems["mypkg"]), res.problems


# ------------------------------------------------------------------- build, cache, smoke


def build_and_smoke(tk: Toolkit, env: PyEnv, recipes_dir: Path) -> Callable[[HostContext], None]:
    """ensure_package, then provision's smoke step, with a ready toolkit and env."""
    opts = PlanOptions(packages=["mypkg"], recipes_dir=str(recipes_dir), extra={"max_jobs": 1})

    def run(ctx: HostContext) -> None:
        state = prepare(ctx, opts)
        state.toolkit, state.env = tk, env
        try:
            ensure_package(ctx, state, "mypkg")
            smoke_packages(ctx, state, ["mypkg"])
        finally:
            ctx.set(packages=state.packages)

    return run


@pytest.mark.timeout(1500)
def test_fixture_package_builds_caches_and_smokes(
    mypkg: None,
    fleet: Fleet,
    tmp_path: Path,
    toolkit: Toolkit,  # noqa: F811  # the fixture of tests/real/test_build_op.py
    recipes_dir: Path,
) -> None:
    """mypkg from its recipe entry: its setup.py saw MYPKG_ARCHS=120 from the arch list (and
    no TORCH_CUDA_ARCH_LIST), nvcc compiled sm_120 SASS, the smoke step judged the installed
    wheel for 12.0; a second host takes the wheel from the controller store."""
    env = make_env(tmp_path / "env-a")
    a = host(fleet, tmp_path, "my-a")
    first = run_op(fleet, tmp_path, [a], build_and_smoke(toolkit, env, recipes_dir))
    assert_ok(first)
    rec = first.hosts["my-a"].data["packages"]["mypkg"]
    assert rec["wheel_from"] == "build"
    with zipfile.ZipFile(rec["wheel"]) as zf:
        seen: dict[str, Any] = json.loads(zf.read("mypkg/_build_seen.json"))
    assert seen["MYPKG_ARCHS"] == "120"
    assert seen["TORCH_CUDA_ARCH_LIST"] is None
    assert seen["gencode"] == ["-gencode=arch=compute_120,code=sm_120"]
    smoke = rec["smoke"]
    checks = {c["check"]: c for c in smoke["checks"]}
    assert smoke["status"] == "pass", smoke
    assert checks["arch_coverage"]["status"] == "pass", checks["arch_coverage"]
    assert "sm_120" in checks["arch_coverage"]["reason"]

    b = host(fleet, tmp_path, "my-b")
    other = run_op(
        fleet, tmp_path, [b], build_and_smoke(toolkit, make_env(tmp_path / "env-b"), recipes_dir)
    )
    assert_ok(other)
    rec_b = other.hosts["my-b"].data["packages"]["mypkg"]
    assert rec_b["wheel_from"] == "cache:local"
    assert rec_b["key"] == rec["key"] and rec_b["sha256"] == rec["sha256"]
    assert rec_b["smoke"]["status"] == "pass"
