"""sgl-kernel 0.3.21 on the real upstream trees: the source store, the CMake patch, an offline
configure with the tool's defines, and one real common_ops unit compiled for sm_120a only.

These tests need the upstream trees laid out as a sources mirror (docs/sgl-kernel.md,
"Mirror layout"): ``SM120KIT_REAL_SOURCES`` names that directory. Without it they skip.

Real parts: the upstream sgl-kernel tree at sglang c86ca128 and every FetchContent tree,
CMake (>= 3.26) with Ninja, nvcc 13.0, the libnuma headers, the PyPI cuobjdump. What is not
the real thing, and why:

- torch is the CPU build, so the configure gets what a CUDA torch would define
  (`cmake_defines.cpu_torch_defines`); a full build needs the CUDA torch and is not run here.
- The CUDA install here has no ``lib64/stubs/libcuda.so``: a stub built with gcc stands in
  for ``CUDA::cuda_driver`` (only link steps read it; nothing here links).
- The mirror's fast-hadamard-transform may be a stand-in for the pinned fork (the mirror's
  MANIFEST.tsv says so): nothing here depends on that tree's content beyond its file names,
  except `test_sources_fetch_from_the_mirror`, which checks that the note is recorded.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sm120kit.builds import cmake_defines
from sm120kit.builds.knobs import resolve_knobs
from sm120kit.builds.patching import load_patch
from sm120kit.packages import sgl_kernel_cmake as sglkernel
from sm120kit.recipes.select import load_recipes
from sm120kit.remote import cmake_probe, script_bundle
from sm120kit.remote import fetch_source as fs
from sm120kit.remote.cmake_probe import DRIVER_API
from tests.conftest import invoke_env, run_invoke
from tests.support.sample_wheel import cuobjdump

REPO = Path(__file__).resolve().parents[2]
REAL = os.environ.get("SM120KIT_REAL_SOURCES", "")
CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
CMAKE_PATCH = REPO / "patches" / "sgl-kernel" / "0002-cmake-sm-only-build.patch"
LOADER_PATCH = REPO / "patches" / "sgl-kernel" / "0001-load-utils-sm120.patch"
DIRS = [
    "sgl-kernel",
    "cutlass",
    "deepgemm",
    "fmt",
    "triton",
    "flashinfer",
    "sgl-attn",
    "mscclpp",
    "fast-hadamard-transform",
    "flashmla",
    "json",
    "nanobind",
    "dlpack",
]

pytestmark = [
    pytest.mark.realsrc,
    pytest.mark.skipif(
        not REAL,
        reason="SM120KIT_REAL_SOURCES is unset: point it at a sources mirror holding the "
        "sgl-kernel 0.3.21 trees (docs/sgl-kernel.md, 'Mirror layout')",
    ),
]


def _cmake() -> str:
    cmake = shutil.which("cmake")
    if not cmake:
        pytest.skip("no cmake on PATH (scripts/test.sh installs cmake 3.31 from PyPI)")
    out = subprocess.run([cmake, "--version"], capture_output=True, text=True).stdout
    match = re.search(r"(\d+)\.(\d+)", out)
    if not match or (int(match[1]), int(match[2])) < (3, 26):
        pytest.skip(f"{cmake} is older than 3.26 (scripts/test.sh installs 3.31 from PyPI)")
    if not shutil.which("ninja"):
        pytest.skip("no ninja on PATH (scripts/test.sh installs it from PyPI)")
    if not Path("/usr/include/numa.h").is_file():
        pytest.skip("no /usr/include/numa.h (scripts/test.sh installs libnuma-dev)")
    if not (CUDA_HOME / "bin" / "nvcc").exists():
        pytest.skip(f"no nvcc under {CUDA_HOME}")
    return cmake


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def fetched(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`invoke sources.fetch --package sgl-kernel` from the mirror into a fresh store."""
    tmp = tmp_path_factory.mktemp("sources")
    env = invoke_env(None, tmp, XDG_CACHE_HOME=str(tmp / "xdg"))
    # r570's sgl-kernel 0.3.21: the tree the mirror holds (r580's 0.4.10 is sglang's kernels/aot).
    argv = ["sources.fetch", "--package", "sgl-kernel", "--recipe", "r570", "--mirror", REAL]
    proc = run_invoke([*argv, "--json"], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {"doc": json.loads(proc.stdout), "env": env, "tmp": tmp}


@pytest.fixture(scope="module")
def trees(fetched: dict[str, Any]) -> Path:
    """Every stored tarball unpacked as a host unpacks it, each checked against its digest."""
    root = fetched["tmp"] / "trees"
    for row in fetched["doc"]["sources"]:
        target = root / row["dir"]
        target.mkdir(parents=True)
        fs.unpack(row["tarball"], str(target))
        assert fs.tree_hash(str(target)) == row["digest"], row["dir"]
    return root


def patch_tree(tree: Path, patch: Path, apply: bool) -> str:
    """The hosts' patch script (sm120kit/remote/patch_tree.py), run here on `tree`."""
    args = {
        "tree": str(tree),
        "apply": apply,
        "patches": [{"name": patch.name, "text": patch.read_text(), "strip": 1}],
    }
    proc = subprocess.run(
        [sys.executable, "-", json.dumps(args)],
        input=script_bundle("patch_tree"),
        capture_output=True,
        text=True,
    )
    doc = json.loads(proc.stdout)
    assert doc["ok"], doc
    return str(doc["patches"][0]["state"])


@pytest.fixture(scope="module")
def patched(trees: Path) -> Path:
    tree = trees.parent / "patched" / "sgl-kernel"
    shutil.copytree(trees / "sgl-kernel", tree)
    assert patch_tree(tree, CMAKE_PATCH, apply=True) == "applies"
    return tree


def libcuda_stub(tmp: Path) -> str:
    """The toolkit's stub when it has one; else a gcc-built stand-in (see module docstring)."""
    for sub in ("lib64", "lib"):
        stub = CUDA_HOME / sub / "stubs" / "libcuda.so"
        if stub.exists():
            return str(stub)
    src = tmp / "stub.c"
    src.write_text("".join(f"void {name}(void) {{}}\n" for name in DRIVER_API))
    out = tmp / "libcuda.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(out), str(src)],
        check=True,
    )
    return str(out)


def tool_defines(trees: Path, knob_overrides: dict[str, Any], tmp: Path) -> dict[str, str]:
    """The defines the tool's wheel build passes for r570's sgl-kernel (arch 12.0), plus what
    scikit-build-core adds, plus the CPU-torch additions."""
    import torch

    recipe = load_recipes()["r570"]  # sgl-kernel 0.3.21 is r570/r575's (torch 2.9.1)
    pkg = next(p for p in recipe.packages if p.name == "sgl-kernel")
    facts = {"cpu": {"count": 2}, "memory": {"available_bytes": 24 * 1024**3}}
    # The options the entry's patches add (0002: SGL_KERNEL_ONLY_ARCHS), as the build passes.
    added = frozenset().union(
        *(load_patch(recipe.patches_dir / n).options_added for n in pkg.patches)
    )
    knobs = resolve_knobs(
        "sgl-kernel",
        "sgl-kernel",
        recipe.arch,
        facts,
        {**pkg.knobs, **knob_overrides},
        patch_options=added,
        patch_version=pkg.version,
    )
    defines = cmake_defines.defines_from_pip_args(knobs.pip_args)
    dirs = [(d["name"], str(trees / d["dir"])) for d in pkg.dependencies]
    defines.update(cmake_defines.fetchcontent_defines(dirs))
    torch_dir = Path(torch.__file__).parent / "share" / "cmake" / "Torch"
    defines.update(cmake_defines.skbuild_defines(sys.executable, str(torch_dir), str(CUDA_HOME)))
    defines.update(cmake_defines.cpu_torch_defines("13.0", str(CUDA_HOME)))
    defines["CUDA_cuda_driver_LIBRARY"] = libcuda_stub(tmp)
    return defines


def configure(tree: Path, defines: dict[str, str], build: Path) -> dict[str, Any]:
    cmake = _cmake()
    env = {"PATH": f"{CUDA_HOME / 'bin'}:{os.environ['PATH']}"}
    doc = cmake_probe.configure(
        {"src": str(tree), "build_dir": str(build), "cmake": cmake, "defines": defines, "env": env}
    )
    assert doc["ok"], doc.get("log_tail")
    return doc


@pytest.fixture(scope="module")
def sm_only(trees: Path, patched: Path) -> dict[str, Any]:
    build = trees.parent / "build-sm-only"
    defines = tool_defines(trees, {}, trees.parent)
    return {"doc": configure(patched, defines, build), "build": build, "defines": defines}


# ----------------------------------------------------------------------------- tests


def test_sources_fetch_from_the_mirror(fetched: dict[str, Any]) -> None:
    """sources.fetch stores the package tree and its 12 FetchContent trees with a digest each
    (the digest of the mirror's own tree, computed independently); a rerun fetches nothing;
    sources.list shows the same digests and sizes."""
    rows = fetched["doc"]["sources"]
    assert [r["dir"] for r in rows] == DIRS
    assert rows[0]["ref"] == "c86ca12875bbdea8f39267f02a0d55c68ea99d8e"
    assert rows[0]["fetchcontent"] == ""
    assert {r["fetchcontent"] for r in rows[1:]} >= {"repo-cutlass", "json", "nanobind", "dlpack"}
    for row in rows:
        assert re.fullmatch(r"[0-9a-f]{64}", row["digest"]) and row["changed"] is True
        assert row["origin"] == f"mirror {Path(REAL) / row['dir']}"
        assert row["size"] > 0 and row["files"] > 0
    by_dir = {r["dir"]: r for r in rows}
    assert by_dir["cutlass"]["digest"] == fs.tree_hash(str(Path(REAL) / "cutlass"))
    # The mirror's fast-hadamard-transform is the parent project, not the pinned fork; its
    # MANIFEST.tsv says so and the store records it (this assertion depends on that tree).
    if (Path(REAL).parent / "MANIFEST.tsv").is_file():
        assert "48f3c13764dc" in by_dir["fast-hadamard-transform"]["note"]
        assert by_dir["cutlass"]["note"] == ""

    again = run_invoke(
        [
            "sources.fetch",
            "--package",
            "sgl-kernel",
            "--recipe",
            "r570",
            "--mirror",
            REAL,
            "--json",
        ],
        fetched["env"],
    )
    assert again.returncode == 0, again.stderr[-2000:]
    second = json.loads(again.stdout)["sources"]
    assert [r["changed"] for r in second] == [False] * len(DIRS)
    assert [r["digest"] for r in second] == [r["digest"] for r in rows]

    listed = run_invoke(["sources.list", "--json"], fetched["env"])
    assert listed.returncode == 0, listed.stderr[-2000:]
    stored = {r["dir"]: r for r in json.loads(listed.stdout)["sources"]}
    assert set(stored) == set(DIRS)
    assert all(stored[d]["digest"] == by_dir[d]["digest"] for d in DIRS)
    assert all(stored[d]["size"] == by_dir[d]["size"] for d in DIRS)


def test_patches_classified_on_the_real_tree(trees: Path, tmp_path: Path) -> None:
    """The CMake patch "applies" to the real CMakeLists.txt, then is "already applied"; the
    loader patch (in no recipe) still applies to the real load_utils.py."""
    tree = tmp_path / "sgl-kernel"
    shutil.copytree(trees / "sgl-kernel", tree)
    assert patch_tree(tree, CMAKE_PATCH, apply=False) == "applies"
    assert patch_tree(tree, CMAKE_PATCH, apply=True) == "applies"
    assert patch_tree(tree, CMAKE_PATCH, apply=False) == "already applied"
    assert "SGL_KERNEL_ONLY_ARCHS" in (tree / "CMakeLists.txt").read_text()
    assert patch_tree(tree, LOADER_PATCH, apply=False) == "applies"


def test_offline_configure_compiles_only_sm120a(sm_only: dict[str, Any]) -> None:
    """The real CMakeLists, patched, configured offline with the tool's defines: the compile
    commands carry sm_120a only, common_ops once (sm100/), no FA3 or FlashMLA target; the
    targets and gencodes are the ones --explain predicts."""
    targets = sm_only["doc"]["targets"]
    assert sm_only["defines"]["SGL_KERNEL_ONLY_ARCHS"] == "120a"
    assert sm_only["defines"]["FETCHCONTENT_FULLY_DISCONNECTED"] == "ON"
    for gone in ("common_ops_sm90_build", "flash_ops", "flashmla_ops"):
        assert gone not in targets
    for own in ("common_ops_sm100_build", "spatial_ops"):
        assert targets[own]["sass"] == ["sm_120a"] and targets[own]["ptx"] == []
    assert targets["common_ops_sm100_build"]["units"] == 78
    predicted = sglkernel.predict_targets("0.3.21", "13.0", "120a", below_sm90=False)
    assert predicted is not None
    device = {t: i["sass"] for t, i in targets.items() if i["sass"]}
    assert device == predicted


def test_upstream_configure_matches_the_prediction(trees: Path, patched: Path) -> None:
    """knobs.sm120_only = false on the patched tree: upstream's build (the patch is neutral
    when its option is unset): both common_ops variants with five gencodes, FA3, FlashMLA."""
    defines = tool_defines(trees, {"sm120_only": False}, trees.parent)
    assert "SGL_KERNEL_ONLY_ARCHS" not in defines
    targets = configure(patched, defines, trees.parent / "build-upstream")["targets"]
    predicted = sglkernel.predict_targets("0.3.21", "13.0", "", below_sm90=False)
    device = {t: i["sass"] for t, i in targets.items() if i["sass"]}
    assert device == predicted
    assert targets["common_ops_sm90_build"]["sass"] == [
        "sm_90",
        "sm_100a",
        "sm_120a",
        "sm_103a",
        "sm_90a",
    ]
    assert targets["flash_ops"]["sass"] == ["sm_90a"]  # ENABLE_BELOW_SM90=OFF: no sm_80/86


@pytest.mark.timeout(1200)
def test_one_common_ops_unit_has_only_sm120a_sass(sm_only: dict[str, Any], tmp_path: Path) -> None:
    """csrc/memory/store.cu of common_ops_sm100_build, compiled with exactly its command from
    the configure above: the object's only cubin is sm_120a, and it has no PTX."""
    tool = cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump missing (scripts/test.sh installs nvidia-cuda-cuobjdump)")
    out = tmp_path / "store.o"
    doc = cmake_probe.compile_unit(
        {
            "build_dir": str(sm_only["build"]),
            "target": "common_ops_sm100_build",
            "source": "csrc/memory/store.cu",
            "output": str(out),
        }
    )
    assert doc["ok"], doc.get("log_tail")
    assert doc["sass"] == ["sm_120a"]
    elf = subprocess.run([str(tool), "--list-elf", str(out)], capture_output=True, text=True)
    assert re.findall(r"\.(sm_\w+)\.cubin", elf.stdout) == ["sm_120a"], elf.stdout
    ptx = subprocess.run([str(tool), "--list-ptx", str(out)], capture_output=True, text=True)
    assert ".ptx" not in ptx.stdout
