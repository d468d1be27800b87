"""The SM-only define exists only where a patch adds it (s4, #46 item 6a): SGL_KERNEL_ONLY_ARCHS
is this tool's CMake option, declared by patches/sgl-kernel/0002-cmake-sm-only-build.patch; no
upstream CMakeLists.txt reads it (docs/sgl-kernel.md "The SM-only build"). A recipe entry
without that patch (sglang-kernel 0.4.10's) builds upstream's full set, and the build settings
say so instead of claiming an SM-only build.

Real parts: the shipped patch files and recipes. Pure tables over `Patch.options_added` and the
descriptor's knob rule (`resolve_knobs` with the options the entry's patches add).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.builds.knobs import resolve_knobs
from sm120kit.builds.patching import load_patch
from sm120kit.errors import RecipeError

REPO = Path(__file__).resolve().parents[2]
PATCHES = REPO / "patches"
FACTS = {"cpu": {"count": 8}, "memory": {"available_bytes": 64 * 1024**3}}
ONLY = "SGL_KERNEL_ONLY_ARCHS"


@pytest.mark.parametrize(
    ("patch", "options"),
    [
        ("sgl-kernel/0002-cmake-sm-only-build.patch", {ONLY}),
        ("sgl-kernel/0003-cmake-sm-only-build-aot.patch", {ONLY}),
        ("sgl-kernel/0001-load-utils-sm120.patch", set()),  # Python only
        ("flash-attn/0001-cxx-standard-from-torch.patch", set()),  # setup.py only
    ],
)
def test_the_options_a_shipped_patch_adds(patch: str, options: set[str]) -> None:
    assert load_patch(PATCHES / patch).options_added == options


@pytest.mark.parametrize(
    ("added", "expected"),
    [
        ('+set(X_ONLY "" CACHE STRING "doc")', {"X_ONLY"}),
        ('+option(USE_Y "doc" OFF)', {"USE_Y"}),
        ('+  OPTION( use_z  "doc" ON)', {"use_z"}),
        ("+set(NOT_CACHED ON)", set()),  # a plain variable: not an option a define sets
        (' set(OLD "" CACHE STRING "context line")', set()),  # context, not added
        ('-set(GONE "" CACHE STRING "removed")', set()),
    ],
)
def test_options_are_read_from_added_lines_only(
    tmp_path: Path, added: str, expected: set[str]
) -> None:
    path = tmp_path / "x.patch"
    path.write_text(
        f"# Strip: 1\n--- a/CMakeLists.txt\n+++ b/CMakeLists.txt\n@@ -1,1 +1,2 @@\n a\n{added}\n",
        encoding="utf-8",
    )
    assert load_patch(path).options_added == expected


def _knobs(patch_options: frozenset[str] | None, **overrides: object):
    return resolve_knobs(
        "sgl-kernel",
        "sgl-kernel",
        ["12.0"],
        FACTS,
        dict(overrides),
        patch_options=patch_options,
        patch_version="0.4.10" if patch_options == frozenset() else "0.3.21",
    )


@pytest.mark.parametrize(
    ("patch_options", "switch", "defined"),
    [
        (frozenset({ONLY}), None, "120a"),  # 0.3.21 with 0002: the SM-only build
        (frozenset({ONLY}), False, None),  # knob sm120_only = false: upstream's build
        (frozenset(), None, None),  # 0.4.10, no patch: upstream's build, said so
        (frozenset(), False, None),
        (None, None, "120a"),  # a caller that does not know the patches: as before
    ],
)
def test_the_sm_only_define_needs_the_patch(
    patch_options: frozenset[str] | None, switch: bool | None, defined: str | None
) -> None:
    overrides = {} if switch is None else {"sm120_only": switch}
    knobs = _knobs(patch_options, **overrides)
    given = [a for a in knobs.pip_args if a.startswith(f"-Ccmake.define.{ONLY}=")]
    assert given == ([f"-Ccmake.define.{ONLY}={defined}"] if defined else [])
    if defined is None:
        (note,) = [(v, why) for name, v, why in knobs.explain if name == f"-Ccmake.define.{ONLY}"]
        assert note[0] == "(not set)" and note[1].startswith("upstream's full build")
        if patch_options == frozenset() and switch is None:
            assert "no patch of sgl-kernel 0.4.10's recipe entry adds" in note[1]


def test_asking_for_the_sm_only_build_without_the_patch_is_one_line() -> None:
    with pytest.raises(RecipeError) as err:
        _knobs(frozenset(), sm120_only=True)
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith("package sgl-kernel: knob sm120_only = true needs a patch that adds")
    assert "sgl-kernel 0.4.10's recipe entry lists none" in line
