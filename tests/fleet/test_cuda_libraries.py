"""The toolkit libraries a CUDA-torch build needs (cuBLAS & co): facts, matching, install plans.

Real parts: the facts probe reads a real directory tree; `plan` runs over the real sshd fleet
against this machine's CUDA 13.0 (nvcc only, no cuBLAS), where it must pass that toolkit over
for sgl-kernel and plan the pip route with NVIDIA's cuda-toolkit meta package. Nothing is
downloaded here (a real install of the libraries is about 1.5 GB; docs/sgl-kernel.md records
the by-hand build that used one).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sm120kit import drivers as drv
from sm120kit.builds import cuda_libraries as cudalibs
from sm120kit.ops import toolkit as tk
from sm120kit.packages.registry import descriptor
from sm120kit.remote import facts_probe, lib_closure, script_source
from tests.conftest import invoke_env, json_of, run_invoke
from tests.real.test_toolkit import _entry, _spec, step_of, tree_hash, write_inventory
from tests.support.fleet import Fleet

SGL = cudalibs.needed([descriptor("sgl-kernel")])


def test_sgl_kernel_needs_aten_headers_curand_and_nvrtc() -> None:
    assert SGL == ("cublas", "cusparse", "cusolver", "curand", "nvrtc")
    assert cudalibs.needed([descriptor("minikernel"), descriptor("flash-attn")]) == ()
    assert cudalibs.meta_requirement(SGL, "13.0.2") == (
        "cuda-toolkit[cublas,cusparse,cusolver,curand,nvrtc]==13.0.2"
    )
    assert drv.apt_library_packages("13.0", SGL) == [
        "libcublas-dev-13-0",
        "libcusparse-dev-13-0",
        "libcusolver-dev-13-0",
        "libcurand-dev-13-0",
        "cuda-nvrtc-dev-13-0",
    ]


def test_the_remote_probe_checks_the_same_files() -> None:
    # The probe's table travels to the host in its bundle (the hosts' library).
    assert "sm120kit.remote.lib.cudalibs" in lib_closure(script_source("facts_probe"))
    files = sys.modules[facts_probe.toolkit_components.__module__].COMPONENT_FILES
    probe = {k: (tuple(h), tuple(s)) for k, (h, s) in files.items()}
    ours = {c.name: (c.headers, c.libs) for c in cudalibs.COMPONENTS.values()}
    assert probe == ours


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")


def test_facts_probe_reports_components_with_headers_and_plain_sonames(tmp_path: Path) -> None:
    root = tmp_path / "cuda"
    for h in ("cuda_runtime.h", "cublas_v2.h", "cublasLt.h", "cusparse.h", "nvrtc.h"):
        _touch(root / "include" / h)
    _touch(root / "lib" / "libcublas.so")
    _touch(root / "lib" / "libcublasLt.so")
    # A wheel ships only libnvrtc.so.13: `-lnvrtc` and FindCUDAToolkit cannot use it.
    _touch(root / "lib" / "libnvrtc.so.13")
    assert facts_probe.toolkit_components(str(root)) == ["cublas", "cusparse"]
    (root / "lib" / "libnvrtc.so").symlink_to("libnvrtc.so.13")
    # A runfile toolkit's layout: headers under targets/<arch>/include.
    _touch(root / "targets" / "x86_64-linux" / "include" / "cusolverDn.h")
    assert facts_probe.toolkit_components(str(root)) == ["cublas", "cusolver", "cusparse", "nvrtc"]


def _with(spec: tk.ToolkitSpec, components: tuple[str, ...]) -> tk.ToolkitSpec:
    return replace(spec, components=components, components_for=("sgl-kernel",))


def test_a_toolkit_without_the_libraries_does_not_serve(tmp_path: Path) -> None:
    spec = _with(_spec("13.0.2"), SGL)
    bare: dict[str, Any] = {**_entry("/usr/local/cuda-13.0", "13.0.88", "13.0.88")}
    bare["components"] = ["cublas"]
    why = tk.toolkit_mismatch(bare, spec, "580.95.05")
    assert why == (
        "lacks cuSPARSE, cuSOLVER, cuRAND, NVRTC (headers/libraries the sgl-kernel build needs)"
    )
    full = {**bare, "components": list(SGL)}
    assert tk.toolkit_mismatch(full, spec, "580.95.05") is None
    # Builds that need none of them keep taking nvcc-only toolkits.
    assert tk.toolkit_mismatch(bare, _spec("13.0.2"), "580.95.05") is None


def test_pip_route_adds_the_meta_package_and_plain_sonames() -> None:
    spec = _with(_spec("13.0.2"), SGL)
    plan = tk.install_plan(spec, python="python3", token="0" * 8, host_vars={})
    text = "\n".join(plan.commands)
    assert "'cuda-toolkit[cublas,cusparse,cusolver,curand,nvrtc]==13.0.2'" in text
    tree = "/w/toolkits/.cuda-13.0.2.tmp-00000000/site-packages/nvidia/cu13"
    links = {(s["path"], s["target"]) for s in plan.steps if s["op"] == "link"}
    for lib in ("libcudart.so", "libcublas.so", "libcublasLt.so", "libnvrtc.so"):
        assert (f"{tree}/lib/{lib}", f"{lib}.13") in links
    # nvcc looks for its libraries at <real bin>/../lib64, inside the wheel tree.
    assert (f"{tree}/lib64", "lib") in links
    # Without components: the three wheels only, as before.
    plain = tk.install_plan(_spec("13.0.2"), python="python3", token="0" * 8, host_vars={})
    assert "cuda-toolkit[" not in "\n".join(plain.commands)


@pytest.mark.skipif(not Path("/usr/local/cuda-13.0/bin/nvcc").exists(), reason="no CUDA 13.0")
def test_plan_passes_over_a_toolkit_without_cublas_for_sgl_kernel(
    fleet: Fleet, tmp_path: Path
) -> None:
    """This machine's /usr/local/cuda-13.0 has nvcc but no cuBLAS: for sgl-kernel with a CUDA
    torch, `plan` says so and would install the recipe's pip toolkit with the libraries."""
    if "cublas" in facts_probe.toolkit_components("/usr/local/cuda-13.0"):
        pytest.skip("this machine's CUDA 13.0 has cuBLAS")
    work = tmp_path / "work"
    inv = write_inventory(tmp_path, fleet, "gpu1", provision_packages=["sgl-kernel"])
    before = tree_hash(work)
    # The shipped r580 builds nothing that needs the libraries (sgl-kernel 0.3.21 is r570's, on
    # torch 2.9.1): a copy with an sgl-kernel entry for its torch stands in for such a build.
    repo = Path(__file__).resolve().parents[2]
    recipes = tmp_path / "cfg" / "recipes"
    recipes.mkdir(parents=True)
    (tmp_path / "cfg" / "patches").symlink_to(repo / "patches")
    for f in (repo / "recipes").glob("*.toml"):
        (recipes / f.name).write_text(f.read_text())
    shared = (repo / "recipes" / "shared" / "packages.toml").read_text()
    start = shared.index('[[packages]]\nname = "sgl-kernel"\nversion = "0.3.21"')
    stop = shared.find("\n[[packages]]", start + 1)  # the 0.3.21 entry alone
    sgl = shared[start : stop if stop != -1 else len(shared)] + "\n"
    r580 = recipes / "r580.toml"
    text = r580.read_text()
    at = text.index("# The serving stack:")
    r580.write_text(text[:at] + sgl.replace('torch = "==2.9.1"\n', "") + text[at:])
    proc = run_invoke(
        ["plan", "-H", "gpu1", "--driver", "580.95.05", "-i", str(inv), "--json"],
        invoke_env(fleet, tmp_path, INVOKE_SM120KIT_RECIPES_DIR=str(recipes)),
    )
    doc = json_of(proc)
    assert "gpu1" in doc["hosts"], proc.stdout + proc.stderr
    entry = doc["hosts"]["gpu1"]
    step = step_of(entry, "toolkit")
    assert step["message"] == (
        f"would install CUDA 13.0.2 (pip) into {work}/toolkits/cuda-13.0.2; "
        "/usr/local/cuda-13.0 lacks cuBLAS/cuBLASLt, cuSPARSE, cuSOLVER, cuRAND, NVRTC "
        "(headers/libraries the sgl-kernel build needs); needs nvcc, CUDA headers and "
        "cuBLAS/cuBLASLt, cuSPARSE, cuSOLVER, cuRAND, NVRTC (the sgl-kernel build)"
    ), step
    text = "\n".join(step["commands"])
    assert "cuda-toolkit[cublas,cusparse,cusolver,curand,nvrtc]==13.0.2" in text
    assert tree_hash(work) == before
