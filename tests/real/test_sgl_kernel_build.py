"""sgl-kernel through the build operation over the sshd fleet: the --explain dry run from the
recipe alone, and (with the real upstream trees, ``SM120KIT_REAL_SOURCES``) the store-managed
sources uploaded to a host, patched, checked and configured there.

Simulated: the GPU (cross-build vars, as in tests/real/test_build_op.py) and, in the realsrc test,
the NVIDIA driver's libcuda.so (host var ``cuda_driver_library`` points at a gcc-built stub:
only link steps read it, and nothing here links). A full sgl-kernel build is not run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sm120kit.builds.cmake_config import require_arch
from sm120kit.inventory.host import Host
from sm120kit.ops.compile import link_driver
from sm120kit.ops.deps import ensure_dependencies
from sm120kit.ops.prerequisites import ensure_prerequisites
from sm120kit.plays.build import ensure_patched, ensure_source, package_knobs, target_explain
from sm120kit.plays.plan import PlanOptions, prepare
from sm120kit.remote.cmake_probe import DRIVER_API
from sm120kit.runner.connection import ConnectOptions
from sm120kit.runner.pool import HostContext, Runner, RunOptions
from sm120kit.runner.results import RunResult
from sm120kit.state import Toolkit
from tests.real.test_build_op import (
    CROSS,
    SSH_HOST,
    invoke,
    json_of,
    make_env,
    sgl_recipes,
    steps,
    toolkit,  # noqa: F401  (the session fixture)
    write_inventory,
)
from tests.support.fleet import Fleet

REAL = os.environ.get("SM120KIT_REAL_SOURCES", "")
PIN = "c86ca12875bbdea8f39267f02a0d55c68ea99d8e"


def test_explain_is_a_dry_run_from_the_recipe(fleet: Fleet, tmp_path: Path) -> None:
    """`invoke build --package sgl-kernel --explain` on a host where nothing exists yet, with
    the real recipe: the pin, every FetchContent dependency with its commit, the patch, the
    defines and each target's gencodes (predicted: SM-only, sm_120a) come out; the CPU torch
    of this cross-build box then stops the host with one line, before anything is written."""
    # r570's pin, given as a host var: the recipe copy's r580 entry has none (its torch is 2.14.1)
    pin = {"recipe.packages.sgl-kernel.torch": "==2.9.1"}
    inventory = write_inventory(tmp_path, fleet, {"sk": pin})
    proc = invoke(
        tmp_path,
        fleet,
        inventory,
        "build",
        "--package",
        "sgl-kernel",
        "-H",
        "sk",
        "--explain",
        INVOKE_SM120KIT_RECIPES_DIR=str(sgl_recipes(tmp_path)),
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    sk = json_of(proc)["hosts"]["sk"]
    assert "torch 2.13.0" in sk["error"] and "==2.9.1" in sk["error"]
    rows = {r["name"]: r for r in sk["explain"]}
    assert rows["source"]["value"] == f"https://github.com/sgl-project/sglang@{PIN} (sgl-kernel)"
    cutlass = rows["FETCHCONTENT_SOURCE_DIR_REPO-CUTLASS"]
    assert cutlass["value"].endswith("@57e3cfb47a2d9e0d46eb6335c3dc411498efa198")
    assert "FETCHCONTENT_SOURCE_DIR_REPO-FLASH-ATTENTION" in rows  # dashes kept
    assert {"FETCHCONTENT_SOURCE_DIR_JSON", "FETCHCONTENT_SOURCE_DIR_DLPACK"} <= set(rows)
    assert rows["patch 0002-cmake-sm-only-build.patch"]["value"].startswith("unknown")
    assert rows["-Ccmake.define.SGL_KERNEL_ONLY_ARCHS=120a"]["value"] == "120a"
    assert rows["target common_ops_sm100_build"]["value"] == "sm_120a"
    assert rows["target spatial_ops"]["value"] == "sm_120a"
    assert "predicted" in rows["target common_ops_sm100_build"]["reason"]
    for gone in ("common_ops_sm90_build", "flash_ops", "flashmla_ops"):
        assert f"target {gone}" not in rows
    work = tmp_path / "sk" / "work"
    assert not (work / "src").exists() and not (work / "build").exists()  # only the run lock


# ------------------------------------------------------------------------------- realsrc


def _stub_libcuda(tmp: Path, names: tuple[str, ...] = DRIVER_API) -> str:
    """A libcuda.so with the driver's soname defining `names` (there is no GPU driver here)."""
    src = tmp / "stub.c"
    src.write_text("".join(f"void {n}(void) {{}}\n" for n in names))
    out = tmp / "libcuda.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(out), str(src)],
        check=True,
    )
    return str(out)


def _env_with_cmake(tmp: Path) -> Any:
    """The test env (system torch) with cmake and ninja in its bin/, as the managed env has."""
    env = make_env(tmp / "env")
    try:
        import cmake
        import ninja
    except ImportError:
        pytest.skip("cmake/ninja from PyPI missing (scripts/test.sh installs them)")
    bindir = Path(env.python).parent
    (bindir / "cmake").symlink_to(Path(cmake.CMAKE_BIN_DIR) / "cmake")
    (bindir / "ninja").symlink_to(Path(ninja.BIN_DIR) / "ninja")
    return env


@pytest.mark.realsrc
@pytest.mark.skipif(not REAL, reason="SM120KIT_REAL_SOURCES is unset (docs/sgl-kernel.md)")
@pytest.mark.timeout(1200)
def test_store_managed_sources_configure_on_the_host(
    fleet: Fleet,
    tmp_path: Path,
    toolkit: Toolkit,  # noqa: F811
) -> None:
    """The real recipe's sgl-kernel on a fleet host: its source and 12 dependency trees come
    from the controller's store (filled from the mirror), are uploaded and verified, the CMake
    patch applies, the prerequisites are found, and a configure on the host with the build's
    defines carries sm_120a only; a second run changes nothing."""
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    host_vars = {
        **fleet.all_vars(fleet.by_name(SSH_HOST)),
        "work_root": str(tmp_path / "sk" / "work"),
        **CROSS,
        "recipe.packages.sgl-kernel.torch": ">=2.0",
        "recipe.packages.sgl-kernel.needs_cuda_torch": False,
        "sources_mirror": REAL,
        "cuda_driver_library": _stub_libcuda(tmp_path),
    }
    sk = Host("sk", vars=host_vars)
    env = _env_with_cmake(tmp_path)
    opts = PlanOptions(packages=["sgl-kernel"], recipes_dir=str(sgl_recipes(tmp_path)))

    def op(ctx: HostContext) -> None:
        state = prepare(ctx, opts)
        state.toolkit, state.env = toolkit, env
        knobs = package_knobs(state, "sgl-kernel")
        source = ensure_source(ctx, state, "sgl-kernel")
        deps = ensure_dependencies(ctx, state, "sgl-kernel")
        assert deps is not None and deps.complete
        patched = ensure_patched(ctx, state, "sgl-kernel", source)
        ensure_prerequisites(ctx, state, "sgl-kernel", knobs)
        from sm120kit.plays.build import add_dependency_defines

        add_dependency_defines(knobs, deps.dirs, deps.reasons)
        rows = target_explain(ctx, state, "sgl-kernel", knobs, patched.tree, cmake_checked=True)
        targets = {r["name"][len("target ") :]: r["value"] for r in rows}
        require_arch(
            state.resolved.packages["sgl-kernel"],
            {t: {"sass": v.split(", ")} for t, v in targets.items()},
            ["12.0"],
        )
        ctx.set(
            digest=source.digest,
            deps=[list(d) for d in deps.digests],
            targets=targets,
            patches=patched.patches,
            dirs=deps.dirs,
        )

    def run() -> RunResult:
        runner = Runner(
            RunOptions(
                run_root=str(tmp_path / "runs"),
                connect=ConnectOptions(known_hosts=str(fleet.known_hosts)),
            )
        )
        runner.settings = {  # type: ignore[attr-defined]
            "cache": {"controller": False},
            "sources_store": str(tmp_path / "store"),
        }
        return runner.run("sgl-test", [sk], op)

    first = run()
    assert first.hosts["sk"].status == "changed", first.hosts["sk"].error
    data = first.hosts["sk"].data
    assert steps(first, "sk")["source:sgl-kernel"][0] == "changed"
    assert steps(first, "sk")["deps:sgl-kernel"] == (
        "changed",
        "uploaded 12 of 12 dependency trees",
    )
    assert data["digest"].startswith("tree:") and len(data["deps"]) == 12
    assert [(p["name"], p["state"]) for p in data["patches"]] == [
        ("0002-cmake-sm-only-build.patch", "applies")
    ]
    assert data["targets"]["common_ops_sm100_build"] == "sm_120a"
    assert data["targets"]["spatial_ops"] == "sm_120a"
    assert "flash_ops" not in data["targets"] and "common_ops_sm90_build" not in data["targets"]
    for name, path in data["dirs"]:
        assert Path(path).is_dir() and Path(path).is_absolute(), name

    second = run()
    assert second.hosts["sk"].status == "ok", steps(second, "sk")
    assert steps(second, "sk")["deps:sgl-kernel"] == ("ok", "12 dependency trees present")
    assert second.hosts["sk"].data["deps"] == data["deps"]
    assert [p["state"] for p in second.hosts["sk"].data["patches"]] == ["already applied"]


@pytest.mark.timeout(300)
def test_minus_lcuda_links_on_a_driver_only_host(fleet: Fleet, tmp_path: Path) -> None:
    """sgl-kernel links `cuda` by name (-lcuda), so the linker needs a file named libcuda.so;
    a GPU host's driver has only libcuda.so.1. The prerequisites step puts a link directory
    first on the build's LIBRARY_PATH (the host's value follows) and the build makes
    libcuda.so there: a real g++ -shared ... -lcuda then links, against libcuda.so.1. The
    driver library is a stub built here with the driver's soname (there is no GPU driver)."""
    if shutil.which("gcc") is None or shutil.which("g++") is None:
        pytest.skip("no gcc/g++")
    driver_dir = tmp_path / "driver"
    driver_dir.mkdir()
    driver = Path(_stub_libcuda(driver_dir)).rename(driver_dir / "libcuda.so.1")
    work = tmp_path / "dl" / "work"
    sk = Host(
        "dl",
        vars={
            **fleet.all_vars(fleet.by_name(SSH_HOST)),
            "work_root": str(work),
            **CROSS,
            "cuda_driver_library": str(driver),
        },
    )
    fake_cuda = tmp_path / "cuda"
    (fake_cuda / "bin").mkdir(parents=True)
    seen: dict[str, Any] = {}

    def op(ctx: HostContext) -> None:
        state = prepare(
            ctx, PlanOptions(packages=["sgl-kernel"], recipes_dir=str(sgl_recipes(tmp_path)))
        )
        state.toolkit = Toolkit(
            version="13.0.2",
            release="13.0",
            nvcc_version=None,
            cuda_home=str(fake_cuda),
            nvcc=str(fake_cuda / "bin" / "nvcc"),
            source="work_root",
        )
        knobs = package_knobs(state, "sgl-kernel")
        ensure_prerequisites(ctx, state, "sgl-kernel", knobs)
        link_driver(ctx, knobs)
        seen.update(
            env=dict(knobs.env), explain=[e for e in knobs.explain if e[0] == "LIBRARY_PATH"]
        )

    runner = Runner(
        RunOptions(
            run_root=str(tmp_path / "runs"),
            connect=ConnectOptions(known_hosts=str(fleet.known_hosts)),
        )
    )
    result = runner.run("link-test", [sk], op)
    assert result.hosts["dl"].status in ("ok", "changed"), result.hosts["dl"].error
    link_dir = Path(seen["env"]["LIBRARY_PATH"])
    assert link_dir == work / "build" / "sgl-kernel" / "work" / ".sm120kit-link"
    assert os.readlink(link_dir / "libcuda.so") == str(driver)
    assert "-lcuda" in seen["explain"][0][2]
    obj = tmp_path / "ext.c"
    obj.write_text("void cuMemCreate(void);\nvoid use(void) { cuMemCreate(); }\n")
    out = tmp_path / "ext.so"

    def link(library_path: str) -> subprocess.CompletedProcess[str]:
        # --as-needed explicitly: some distributions' gcc passes it by default, some not.
        return subprocess.run(
            ["g++", "-shared", "-fPIC", "-Wl,--as-needed", "-x", "c", str(obj), "-o", str(out)]
            + ["-lcuda"],
            capture_output=True,
            text=True,
            env={**os.environ, "LIBRARY_PATH": library_path},
        )

    plain = link("")
    assert plain.returncode != 0 and "cannot find -lcuda" in plain.stderr
    linked = link(str(link_dir))
    assert linked.returncode == 0, linked.stderr
    needed = subprocess.run(["readelf", "-d", str(out)], capture_output=True, text=True).stdout
    assert "Shared library: [libcuda.so.1]" in needed

    # A stub that defines too little links without an error, and --as-needed drops
    # libcuda.so.1: the module would fail to load on a GPU host. prereqs refuses it.
    thin_dir = tmp_path / "thin"
    thin_dir.mkdir()
    thin = Path(_stub_libcuda(thin_dir, ("cuInit",)))
    (thin_dir / "link").mkdir()
    (thin_dir / "link" / "libcuda.so").symlink_to(thin)
    assert link(str(thin_dir / "link")).returncode == 0
    needed = subprocess.run(["readelf", "-d", str(out)], capture_output=True, text=True).stdout
    assert "libcuda.so.1" not in needed
    sk.vars["cuda_driver_library"] = str(thin)
    refused = runner.run("link-test", [sk], op)
    error = refused.hosts["dl"].error or ""
    assert refused.hosts["dl"].status == "failed"
    assert error.startswith("sgl-kernel: host prerequisites missing: ")
    assert f"{thin} does not define the CUDA driver API (lacks cuDriverGetVersion, " in error
    assert "--as-needed drops libcuda.so.1" in error
