"""`invoke plan` shows each host's serving stack from the shipped locks: on an R580 host
sglang 0.5.23 with sglang-kernel 0.4.10 from the release, verified; on an R570 host
sglang 0.5.9 with sgl-kernel 0.3.21 from the release and the minor-version note; with build
chosen, the source build and its pins, or one line when the recipe pins no source.

Real parts: the sshd fleet, the repo's recipes and locks, the released sglang-kernel 0.4.10
and sgl-kernel 0.3.21 wheels from PyPI (tests/support/real_wheels.py), read by the tool's
verification as the controller's cached copies. Simulated: the GPUs and drivers (the fleet's
nvidia-smi stubs: gpu1 two RTX PRO 6000 on 580.95.05, gpu2 an RTX 5090 on 570.124.06).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sm120kit.recipes.select import load_recipes
from tests.conftest import invoke_env, json_of, run_invoke
from tests.real.test_provision import tree_digest
from tests.support.fleet import Fleet
from tests.support.real_wheels import real_wheel

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[2]
NEW = ("sglang-kernel", "0.4.10", "sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl")
OLD = ("sgl-kernel", "0.3.21", "sgl_kernel-0.3.21-cp310-abi3-manylinux2014_x86_64.whl")
SGL_REF = "c86ca12875bbdea8f39267f02a0d55c68ea99d8e"


def _cache(tmp: Path) -> Path:
    """The controller's release cache holding the two real kernel wheels (links, by sha256)."""
    recipes = load_recipes(REPO / "recipes")
    cache = tmp / "releases"
    for recipe, spec in (("r580", NEW), ("r570", OLD)):
        lock = recipes[recipe].lock
        assert lock is not None
        entry = lock.entry(spec[0])
        assert entry is not None and entry.filename == spec[2]
        (cache / entry.sha256).mkdir(parents=True)
        (cache / entry.sha256 / entry.filename).symlink_to(real_wheel(*spec))
    return cache


def _plan(fleet: Fleet, tmp: Path, extra: dict[str, dict[str, Any]], *flags: str) -> Any:
    doc = yaml.safe_load(fleet.inventory.read_text())
    for name in ("gpu1", "gpu2"):
        doc["all"]["hosts"][name].update(
            {"work_root": str(tmp / "work" / name)},  # no package vars: the defaults
            **extra.get(name, {}),
        )
        (tmp / "work" / name).mkdir(parents=True, exist_ok=True)
    inv = tmp / f"hosts{len(list(tmp.glob('hosts*.yaml')))}.yaml"
    inv.write_text(yaml.safe_dump(doc))
    env = invoke_env(fleet, tmp, SM120KIT_RELEASE_CACHE=str(tmp / "releases"))
    return run_invoke(["plan", "-H", "gpu1,gpu2", "-i", str(inv), *flags], env)


@pytest.fixture(scope="module")
def planned(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("stackplan")
    cache = _cache(tmp)
    for name in ("gpu1", "gpu2"):
        (tmp / "work" / name).mkdir(parents=True)
    before = (tree_digest(tmp / "work"), tree_digest(cache))
    out: dict[str, Any] = {"json": _plan(fleet, tmp, {}, "--json")}
    out["text"] = _plan(fleet, tmp, {})
    out["unchanged"] = (tree_digest(tmp / "work"), tree_digest(cache)) == before
    out["cache"] = sorted(p.name for p in cache.rglob("*"))
    build = {
        "gpu1": {"recipe.stack.build": ["sglang-kernel"]},
        "gpu2": {"recipe.stack.build": ["sgl-kernel"]},
    }
    out["build"] = _plan(fleet, tmp, build, "--json")
    return out


def test_r580_host_gets_sglang_0_5_23_from_the_release_verified(planned: dict[str, Any]) -> None:
    proc = planned["json"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    host = json_of(proc)["hosts"]["gpu1"]
    stack = host["stack"]
    assert host["recipe"] == "r580" and stack["top"] == "sglang==0.5.23"
    assert stack["env"].endswith("/envs/stack-sglang-0.5.23-cp311-manylinux_2_34_x86_64")
    kernel = stack["packages"]["sglang-kernel"]
    assert (kernel["version"], kernel["from"], kernel["verdict"]) == ("0.4.10", "release", "ok")
    assert kernel["checked"] == (
        "sha256, cudart and SASS/PTX read from the controller's release cache copy for driver "
        "580.95.05, arch 12.0"
    )
    assert stack["packages"]["sglang"]["version"] == "0.5.23"
    assert all(p["from"] == "release" for p in stack["packages"].values())
    assert "sgl-kernel" not in stack["packages"] and "sglang-kernel" in stack["shown"]


def test_a_fresh_r580_host_plans_the_stack_from_releases_and_no_source_build(
    planned: dict[str, Any],
) -> None:
    """No package vars, no flags: the provision is the recipe's serving stack (issue #31)."""
    host = json_of(planned["json"])["hosts"]["gpu1"]
    assert host["parts"] == {
        "stack": True,
        "stack_why": "recipe r580's serving stack, by default",
        "builds": [],
        "builds_why": "none named (--package, provision_packages)",
    }
    steps = {s["name"]: s for s in host["steps"]}
    assert steps["stack"]["status"] == "changed"  # would install, into its own env
    message = steps["stack"]["message"]
    assert message.startswith("would ") and "sglang==0.5.23" in message, message
    assert host["stack"]["env"]
    # no build env, no package build, no toolkit library asked for a build
    assert not set(steps) & {"env", "minikernel", "flash-attn", "sgl-kernel", "build"}, list(steps)
    assert "no build of this run links its libraries" in steps["toolkit"]["message"]
    assert host["packages"] == {}


def test_r570_host_gets_sglang_0_5_9_with_the_minor_version_note(planned: dict[str, Any]) -> None:
    host = json_of(planned["json"])["hosts"]["gpu2"]
    stack = host["stack"]
    assert host["recipe"] == "r570" and stack["top"] == "sglang==0.5.9"
    kernel = stack["packages"]["sgl-kernel"]
    assert (kernel["version"], kernel["from"], kernel["verdict"]) == ("0.3.21", "release", "ok")
    assert kernel["notes"] == [
        "built with CUDA 12.9 for a driver of CUDA 12.8: runs through CUDA's minor-version "
        "compatibility, from SASS only (no PTX JIT)"
    ]
    assert "570.124.06" in kernel["checked"]


def test_plan_shows_it_as_a_table_and_changes_nothing(planned: dict[str, Any]) -> None:
    proc = planned["text"]
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert (
        "stack sglang==0.5.23 from locks/sglang-0.5.23/pylock.cp311-manylinux_2_34_x86_64.toml"
        in out
    )
    assert (
        "stack sglang==0.5.9 from locks/sglang-0.5.9/pylock.cp311-manylinux_2_34_x86_64.toml" in out
    )
    assert "stack: yes (recipe r580's serving stack, by default); builds: none" in out
    assert "more from the release (sha256-pinned" in out
    assert planned["unchanged"]
    assert len(planned["cache"]) == 4  # the two links and their sha256 directories: no download


def test_build_chosen_shows_the_source_build_or_one_line(planned: dict[str, Any]) -> None:
    doc = json_of(planned["build"])
    gpu2 = doc["hosts"]["gpu2"]
    kernel = gpu2["stack"]["packages"]["sgl-kernel"]
    assert kernel["from"] == "build" and kernel["why"] == "stack.build"
    assert kernel["build"]["source"]["ref"] == SGL_REF
    assert kernel["build"]["patches"] == ["sgl-kernel/0002-cmake-sm-only-build.patch"]
    assert kernel["build"]["torch"] == "2.9.1"
    gpu1 = doc["hosts"]["gpu1"]
    assert gpu1["status"] == "failed"
    assert gpu1["error"] == (
        "sglang-kernel 0.4.10: build chosen (stack.build) but recipe r580 pins no source for "
        "sglang-kernel 0.4.10"
    )


@pytest.mark.parametrize(
    ("sizes", "order"),
    [
        ([], []),
        ([5], [0]),
        ([1, 9], [1, 0]),
        # the 3 largest first, then largest and smallest by turns; ties in the lock's order
        ([10, 555, 3, 248, 1, 7], [1, 3, 0, 5, 4, 2]),
        ([10, 555, 3, 248, 1, 7, 4], [1, 3, 0, 5, 4, 6, 2]),
        ([2, 2, 2], [0, 1, 2]),
    ],
)
def test_downloads_start_largest_and_smallest_by_turns(sizes: list[int], order: list[int]) -> None:
    """The fetch starts the big files at once and keeps small ones arriving (plays/stack.py)."""
    from sm120kit.plays.stack import fetch_order

    got = fetch_order(sizes)
    assert got == order
    assert sorted(got) == list(range(len(sizes)))


@pytest.mark.parametrize(
    ("files", "order"),
    [
        # The 3 largest first, then the pure-Python wheels, biggest first (most modules to
        # compile), then the rest largest and smallest by turns.
        ([("torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl", 555),
          ("six-1.17.0-py2.py3-none-any.whl", 1),
          ("transformers-5.19.0-py3-none-any.whl", 12),
          ("triton-3.8.0-cp311-cp311-manylinux_2_27_x86_64.whl", 248),
          ("pyyaml-6.0.3-cp311-cp311-manylinux_2_17_x86_64.whl", 1),
          ("sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl", 39),
          ("nvidia_cublas-13.1.1.3-py3-none-manylinux_2_27_x86_64.whl", 500),
          ("numpy-2.3.5-cp311-cp311-manylinux_2_27_x86_64.whl", 17),
          ("flashinfer_python-0.7.2-py3-none-any.whl", 65)],
         [0, 6, 3, 8, 2, 1, 5, 4, 7]),
        # A pure wheel among the largest starts with them; not a wheel's name: never pure.
        ([("a.tar.gz", 5), ("b-1.0-py3-none-any.whl", 1), ("c-1.0-py3-none-any.whl", 2),
          ("d-1.0-py3-none-any.whl", 9), ("e.tar.gz", 3)],
         [3, 0, 4, 2, 1]),
    ],
)  # fmt: skip
def test_downloads_bring_pure_python_wheels_early(
    files: list[tuple[str, int]], order: list[int]
) -> None:
    """The modules the host compiles arrive first: pure-Python wheels, biggest first, by turns
    with the largest files (plays/stack.py fetch_order, pure_python)."""
    from sm120kit.plays.stack import fetch_order, pure_python

    got = fetch_order([s for _, s in files], [pure_python(n) for n, _ in files])
    assert got == order
    assert sorted(got) == list(range(len(files)))
