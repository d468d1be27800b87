"""sglang-kernel 0.4.10's pinned tree (#46 item 6): sglang d9632eb7's
python/sglang/kernels/aot, the closest tree read to the release. Its SM-only patch applies to
that tree's real CMakeLists.txt, and --explain's reasons come from the entry and the patch of
each release, not from one release's table.

Real parts: the shipped recipes, patches and shared tables; the fixture
tests/fixtures/sgl_kernel_aot_d9632eb7/CMakeLists.txt, a byte copy (21,863 characters) of
sgl-project/sglang@d9632eb78fd3092a0fa9137ddb5d590ac4c9b69b python/sglang/kernels/aot/
CMakeLists.txt (Apache-2.0, as all of sglang; kept unmodified so a patch test applies to the
real bytes); the stdlib patch applier (remote/patch_tree.py) and `git apply --check`.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sm120kit.builds.knobs import resolve_knobs
from sm120kit.builds.patching import load_patch
from sm120kit.errors import RecipeError
from sm120kit.packages.base import TreeFacts
from sm120kit.recipes.select import load_recipes
from sm120kit.remote import patch_tree

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "sgl_kernel_aot_d9632eb7" / "CMakeLists.txt"
PATCHES = REPO / "patches" / "sgl-kernel"
FACTS = {"cpu": {"count": 8}, "memory": {"available_bytes": 64 * 1024**3}}
ONLY = "SGL_KERNEL_ONLY_ARCHS"


def _apply(tmp: Path, patch: str) -> dict:
    tree = tmp / "aot"
    tree.mkdir()
    shutil.copy(FIXTURE, tree / "CMakeLists.txt")
    p = load_patch(PATCHES / patch)
    return patch_tree.run(
        {"tree": str(tree), "apply": True, "patches": [{"name": p.name, "text": p.text}]}
    )


@pytest.mark.parametrize(
    ("patch", "state"),
    [
        ("0003-cmake-sm-only-build-aot.patch", "applies"),
        ("0002-cmake-sm-only-build.patch", "does not apply"),  # 0.3.21's sgl-kernel/ tree
    ],
)
def test_which_sm_only_patch_applies_to_the_pinned_tree(
    tmp_path: Path, patch: str, state: str
) -> None:
    doc = _apply(tmp_path, patch)
    assert doc["patches"][0]["state"] == state
    assert doc["applied"] is (state == "applies")
    if state == "applies":
        text = (tmp_path / "aot" / "CMakeLists.txt").read_text()
        assert f'set({ONLY} "" CACHE STRING' in text
        assert (
            "if (NOT SGL_KERNEL_ONLY_ARCHS)\ninclude(${CMAKE_CURRENT_LIST_DIR}/cmake/flashmla"
            in (text)
        )
        assert text.count("if (NOT SGL_KERNEL_ONLY_ARCHS)") == 5  # sm90 target x4, flashmla


def test_git_apply_agrees(tmp_path: Path) -> None:
    shutil.copy(FIXTURE, tmp_path / "CMakeLists.txt")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True, timeout=30)
    patch = PATCHES / "0003-cmake-sm-only-build-aot.patch"
    done = subprocess.run(
        ["git", "apply", "--check", str(patch)], cwd=tmp_path, capture_output=True, timeout=30
    )
    assert done.returncode == 0, done.stderr


def _tree(version: str) -> TreeFacts:
    """The TreeFacts `builds.inputs.tree_facts` gives for the shipped entry of `version`."""
    recipe = "r570" if version == "0.3.21" else "r580"
    spec = next(
        p for p in load_recipes(REPO / "recipes")[recipe].packages if p.name == "sgl-kernel"
    )
    assert spec.version == version
    chosen = [load_patch(REPO / "patches" / n) for n in spec.patches]
    return TreeFacts(
        version=version,
        options={o: (p.name, d) for p in chosen for o, d in p.option_docs.items()},
        not_set=spec.not_set,
        no_full_build=spec.no_full_build,
        subprojects=tuple(
            (d["dir"], d["ref"], d["cmake_minimum"])
            for d in spec.dependencies
            if "cmake_minimum" in d
        ),
    )


@pytest.mark.parametrize(
    ("version", "patch", "fa3", "policy"),
    [
        ("0.3.21", "0002-cmake-sm-only-build.patch", "shadowed at c86ca128", True),
        ("0.4.10", "0003-cmake-sm-only-build-aot.patch", "an option at d9632eb7", False),
    ],
)
def test_explain_reasons_hold_for_each_tree(
    version: str, patch: str, fa3: str, policy: bool
) -> None:
    tree = _tree(version)
    knobs = resolve_knobs(
        "sgl-kernel",
        "sgl-kernel",
        ["12.0"],
        FACTS,
        {},
        patch_options=frozenset(tree.options),
        patch_version=version,
        tree=tree,
    )
    rows = {name: (value, reason) for name, value, reason in knobs.explain}
    value, reason = rows[f"-Ccmake.define.{ONLY}=120a"]
    assert f"{patch} adds it" in reason
    assert ("infllm_ops" in reason) is (version == "0.4.10")  # 0003's Option line says so
    assert rows["-Ccmake.define.SGL_KERNEL_ENABLE_FA3"][1].startswith(fa3)
    assert ("-Ccmake.define.CMAKE_POLICY_VERSION_MINIMUM=3.5" in knobs.pip_args) is policy
    assert f"sgl-kernel {version}'s CMakeLists.txt" in rows["arch list"][1]
    for _, why in rows.values():
        assert ("0.3.21" in why) is False or version == "0.3.21"


def test_the_full_build_of_the_closest_tree_is_refused_in_one_line() -> None:
    tree = _tree("0.4.10")
    with pytest.raises(RecipeError) as err:
        resolve_knobs(
            "sgl-kernel",
            "sgl-kernel",
            ["12.0"],
            FACTS,
            {"sm120_only": False},
            patch_options=frozenset(tree.options),
            patch_version="0.4.10",
            tree=tree,
        )
    line = str(err.value)
    assert "\n" not in line and "upstream's full build of sgl-kernel 0.4.10" in line
    assert "cmake/flashmla.cmake" in line
    resolve_knobs(  # 0.3.21 pins every FetchContent tree: its full build is allowed
        "sgl-kernel",
        "sgl-kernel",
        ["12.0"],
        FACTS,
        {"sm120_only": False},
        patch_options=frozenset({ONLY}),
        patch_version="0.3.21",
        tree=_tree("0.3.21"),
    )
