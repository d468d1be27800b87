"""`invoke smoke` on today's serving env: sglang 0.5.23's released stack, the way a new user
meets it, from real files only.

The env (tests/support/sglang_env.stack_venv, built once and cached) holds the PyPI wheels of
sglang 0.5.23, sglang-kernel 0.4.10, flashinfer-python 0.7.2, sgl-flash-mla 1.0.0,
sgl-deep-gemm 0.2.3.post2, sgl-deep-ep 0.1.2.post1, flash-attn-4, quack-kernels 0.6.5 and
humming-kernels 0.1.12, installed --no-deps beside the
suite's torch 2.13.0+cpu (the wrong torch: both sglang and sglang-kernel pin 2.14.1), plus the
CUDA 13 pip pieces of the env the issue met: nvidia-cuda-nvcc 13.5.37 beside
nvidia-cuda-runtime 13.0.96's headers in one ``site-packages/nvidia/cu13``. The second nvcc is
the real CUDA 13.0 toolkit at /usr/local/cuda-13.0. There is no GPU and no driver: ``import
sglang`` runs through the probe's driver stub (torch.cuda faked as one GPU of capability 12.0),
and the tests assert that it did.
"""

from __future__ import annotations

import re
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from sm120kit.output.checks import render_smoke
from sm120kit.packages import stack as serving
from sm120kit.remote.lib.jit_toolchain import check_jit, judge_pair
from sm120kit.runner.results import HostResult, RunResult
from tests.conftest import invoke_env, json_of, run_invoke
from tests.support.real_wheels import real_wheel
from tests.support.sglang_env import site_packages, stack_venv, wheel_paths

# The sglang-kernel wheel is 373 MB (flash_ops.abi3.so alone 1.1 GB unpacked): minutes here.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

CUDA_13_0 = Path("/usr/local/cuda-13.0")


@pytest.fixture(scope="session")
def stack_env() -> Path:
    """The cached venv of sglang 0.5.23's stack (see the module docstring)."""
    return stack_venv()


@pytest.fixture(scope="session")
def cu13(stack_env: Path) -> Path:
    """The pip CUDA 13 tree: nvcc 13.5.37 beside CUDA 13.0.96's runtime headers."""
    return site_packages(stack_env) / "nvidia" / "cu13"


def _smoke(tmp: Path, *args: str, **env: str) -> tuple[int, dict[str, Any]]:
    proc = run_invoke(
        ["smoke", "-H", "local", *args, "--arch", "12.0", "--json"],
        invoke_env(None, tmp, **env),
        timeout=1800,
    )
    return proc.returncode, json_of(proc)["hosts"]["local"]


@pytest.fixture(scope="session")
def whole_env(
    stack_env: Path, cu13: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """`invoke smoke -H local --python VENV --arch 12.0 --json`, no --package, with
    CUDA_HOME naming the pip CUDA tree (flashinfer's first lookup)."""
    rc, host = _smoke(
        tmp_path_factory.mktemp("smoke-stack"), "--python", str(stack_env), CUDA_HOME=str(cu13)
    )
    assert rc == 2, host  # nothing loads without a CUDA torch: a failed host
    return host


def _smoke_package(tmp: Path, env: Path, package: str) -> dict[str, Any]:
    """`invoke smoke ... --package <package>` on the stack env: a failed host (no CUDA torch)."""
    rc, host = _smoke(tmp, "--python", str(env), "--package", package)
    assert rc == 2, host
    return host


@pytest.fixture(scope="session")
def named(stack_env: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`invoke smoke ... --package sgl-kernel` on the same env (installed as sglang-kernel)."""
    return _smoke_package(tmp_path_factory.mktemp("smoke-named"), stack_env, "sgl-kernel")


@pytest.fixture(scope="session")
def named_new(stack_env: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same, under today's PyPI name: `--package sglang-kernel`."""
    return _smoke_package(tmp_path_factory.mktemp("smoke-named-new"), stack_env, "sglang-kernel")


def _checks(host: dict[str, Any], package: str) -> dict[str, dict[str, Any]]:
    return {c["check"]: c for c in host["packages"][package]["checks"]}


def _sass(host: dict[str, Any], package: str) -> dict[str, list[str]]:
    exts = host["smoke"]["packages"][package]["extensions"]
    return {e["rel"]: e["sass"] for e in exts}


def test_package_flag_resolves_the_new_distribution_name(named: dict[str, Any]) -> None:
    pkg = named["packages"]["sgl-kernel"]
    assert pkg["installed"] is True
    assert (pkg["distribution"], pkg["version"]) == ("sglang-kernel", "0.4.10")
    assert "not installed" not in (named["error"] or "")
    # Named alone: the serving stack is not checked.
    assert named["stack"] is None and list(named["packages"]) == ["sgl-kernel"]


def test_smoke_under_either_name_gives_the_same_verdicts(
    named: dict[str, Any], named_new: dict[str, Any]
) -> None:
    """The descriptor is sgl-kernel's, today's PyPI name sglang-kernel: the same facts give the
    same verdicts under both (issue 32)."""
    verdicts = {}
    for name, host in (("sgl-kernel", named), ("sglang-kernel", named_new)):
        pkg = host["packages"][name]
        assert (pkg["distribution"], pkg["version"]) == ("sglang-kernel", "0.4.10"), pkg
        verdicts[name] = {c["check"]: c["status"] for c in pkg["checks"]}
    assert verdicts["sglang-kernel"] == verdicts["sgl-kernel"], verdicts
    assert verdicts["sgl-kernel"]  # there were checks to compare


def test_every_compiled_module_of_the_stack_is_checked(whole_env: dict[str, Any]) -> None:
    packages = whole_env["packages"]
    for name in ("sgl-kernel", "sgl-flash-mla", "sgl-deep-ep", "sgl-deep-gemm", "humming-kernels"):
        assert packages[name]["installed"] is True, name
    sass = _sass(whole_env, "sgl-kernel")
    assert set(sass) == {
        "sgl_kernel/flash_ops.abi3.so",
        "sgl_kernel/flashmla_ops.abi3.so",
        "sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so",
        "sgl_kernel/spatial_ops.abi3.so",
        "sgl_kernel/sm100/common_ops.abi3.so",
        "sgl_kernel/sm90/common_ops.abi3.so",
    }
    assert "sm_120a" in sass["sgl_kernel/sm100/common_ops.abi3.so"]
    assert set(_sass(whole_env, "sgl-flash-mla")) == {
        "flash_mla/cuda.abi3.so",
        "flash_mla/_C_legacy.abi3.so",
    }
    # sgl-deep-ep 0.1.2.post1: the loaded fatbin has sm_90, sm_100, sm_103; its sm_120 SASS
    # and PTX are relocatable device code only (cuobjdump lists them only with -all). In the
    # release catalogue (read from the wheel): not for 12.0, reported as info with the reason.
    deep_ep = _checks(whole_env, "sgl-deep-ep")["arch_coverage"]
    [ep] = deep_ep["details"]["files"]
    assert ep["status"] == "info" and deep_ep["status"] != "fail"
    assert (
        "sgl-deep-ep 0.1.2.post1" in ep["reason"] and "sm_90, sm_100, sm_103 only" in ep["reason"]
    )
    assert "relocatable device code" in ep["reason"]
    checked = whole_env["checked"]
    assert checked.startswith("sgl-kernel (sglang-kernel 0.4.10), ")
    assert checked.endswith("import sglang, 5 JIT toolchain(s)")


def test_module_facts_match_the_real_wheels(whole_env: dict[str, Any]) -> None:
    """The committed catalogue (locks/sglang-0.5.23/catalogue.toml, made by `invoke
    lock.catalogue` from the wheels) says what the probe reads from the installed files:
    every shared object of sglang-kernel, sgl-flash-mla and sgl-deep-ep, with its SASS."""
    [cat] = [c for c in serving.catalogues() if c.source.startswith("locks/sglang-0.5.23/")]
    for package, dist, version in (
        ("sgl-kernel", "sglang-kernel", "0.4.10"),
        ("sgl-flash-mla", "sgl-flash-mla", "1.0.0"),
        ("sgl-deep-ep", "sgl-deep-ep", "0.1.2.post1"),
    ):
        rel = cat.lookup(package, version).facts
        assert rel is not None and rel.distribution == dist, package
        read = {m.path: list(m.sass) for m in rel.modules() if "cpython-312" not in m.path}
        assert read == _sass(whole_env, package), package


def test_not_for_arch_modules_are_info_with_reason_and_source(whole_env: dict[str, Any]) -> None:
    files = {
        f["rel"]: f for f in _checks(whole_env, "sgl-kernel")["arch_coverage"]["details"]["files"]
    }
    fa3 = files["sgl_kernel/flash_ops.abi3.so"]
    assert fa3["status"] == "info"
    assert (
        "sglang-kernel 0.4.10 sgl_kernel/flash_ops.abi3.so: .nv_fatbin holds sm_80, sm_86, "
        "sm_90a only: no code for 12.0" in fa3["reason"]
    )
    mla = files["sgl_kernel/flashmla_ops.abi3.so"]
    assert mla["status"] == "info" and "sm_90a, sm_100f, sm_103a only" in mla["reason"]
    for rel in ("sgl_kernel/sm100/common_ops.abi3.so", "sgl_kernel/spatial_ops.abi3.so"):
        assert files[rel]["status"] == "pass" and "sm_120a runs on 12.0" in files[rel]["reason"]
    infllm = files["sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so"]
    assert infllm["status"] == "pass"
    declared = whole_env["smoke"]["packages"]["sgl-kernel"]["declared"]
    assert declared["source"] == (
        "release catalogue locks/sglang-0.5.23/catalogue.toml (module_archs of sgl-kernel 0.4.10)"
    )
    mla_files = _checks(whole_env, "sgl-flash-mla")["arch_coverage"]["details"]["files"]
    assert {f["status"] for f in mla_files} == {"info"}
    cuda = next(f for f in mla_files if f["rel"] == "flash_mla/cuda.abi3.so")
    assert "sm_100a, sm_103a, sm_107a only" in cuda["reason"]


def test_loader_choice_is_the_descriptors(whole_env: dict[str, Any]) -> None:
    loader = _checks(whole_env, "sgl-kernel")["loader"]
    assert loader["details"]["chosen"] == "sgl_kernel/sm100/common_ops.abi3.so"
    assert loader["details"]["declared"]["chosen"] == "sgl_kernel/sm100/common_ops.abi3.so"
    assert "declared_mismatch" not in loader["details"]


def test_catalogue_loader_rule_is_the_released_load_utils() -> None:
    """Both real wheels' sgl_kernel/load_utils.py: 9.0 -> sm90/, anything else (12.0, no
    GPU) -> sm100/; the catalogues (read from those wheels) say the same, under either name."""
    old = real_wheel(
        "sgl-kernel", "0.3.21", "sgl_kernel-0.3.21-cp310-abi3-manylinux2014_x86_64.whl"
    )
    new = next(w for w in wheel_paths() if w.name.startswith("sglang_kernel-0.4.10"))
    rule = re.compile(
        r'if compute_capability == 90:\s+ops_subdir = "sm90".*?'
        r'elif compute_capability is not None:\s+ops_subdir = "sm100".*?'
        r'else:\s+ops_subdir = "sm100"',
        re.S,
    )
    for wheel in (old, new):
        with zipfile.ZipFile(wheel) as zf:
            assert rule.search(zf.read("sgl_kernel/load_utils.py").decode()), wheel.name
    loader = serving.loader("sglang-kernel")
    assert loader is not None and loader.versions == ("0.3.21", "0.4.10")
    assert loader == serving.loader("sgl-kernel")
    assert [loader.directory(cc) for cc in ((9, 0), (12, 0), (10, 0), None)] == [
        "sm90",
        "sm100",
        "sm100",
        "sm100",
    ]


def test_wrong_torch_names_both_versions(whole_env: dict[str, Any]) -> None:
    import torch

    pkg = whole_env["packages"]["sgl-kernel"]
    assert pkg["torch"]["summary"] == (
        "built for torch 2.14.1 (wheel metadata: Requires-Dist torch==2.14.1), "
        f"this env has torch {torch.__version__}"
    )
    stack = {c["check"]: c for c in whole_env["stack"]["checks"]}
    pins = stack["pins"]
    assert pins["status"] == "fail"
    assert f"torch {torch.__version__} (pinned ==2.14.1)" in pins["reason"]
    rows = {r["package"]: r for r in pins["details"]["pins"]}
    assert rows["sglang-kernel"] == {
        "package": "sglang-kernel",
        "pinned": "0.4.10",
        "installed": "0.4.10",
        "ok": True,
    }


def test_import_sglang_through_the_driver_stub(whole_env: dict[str, Any]) -> None:
    """No GPU here: the import ran with torch.cuda faked; the env was installed --no-deps, so
    the import stops at the first missing dependency, reported by its first line."""
    check = next(c for c in whole_env["stack"]["checks"] if c["check"] == "import")
    assert check["details"]["stub"] == "torch.cuda faked as one GPU of capability 12.0"
    assert check["status"] == "fail"
    first = check["details"]["first_line"]
    assert check["reason"] == f"import sglang fails: {first}"
    assert "\n" not in first and first.startswith("ModuleNotFoundError: No module named ")
    assert check["details"]["missing_module"] in first


def test_jit_mismatched_pair_fails(whole_env: dict[str, Any], cu13: Path) -> None:
    jit = whole_env["stack"]["jit"]
    assert set(jit["packages"]) == {
        "sgl-deep-gemm",
        "flashinfer-python",
        "flash-attn-4",
        "quack-kernels",
        "humming-kernels",
    }
    fi = jit["packages"]["flashinfer-python"]
    assert (fi["cuda_home"], fi["cuda_home_from"]) == (str(cu13), "$CUDA_HOME")
    assert (fi["nvcc_version"], fi["headers_version"]) == ("13.5.37", "13.0")
    assert fi["status"] == "fail"
    assert fi["reason"].startswith(
        "CUDA compiler and CUDA toolkit headers are incompatible: nvcc 13.5.37"
    )
    assert fi["cccl_version"] == "3.6.0"  # flashinfer 0.7.2's vendored CCCL
    dg = jit["packages"]["sgl-deep-gemm"]  # the same home lookup, the same pair
    assert (dg["nvcc_version"], dg["headers_version"], dg["status"]) == ("13.5.37", "13.0", "fail")
    assert "JIT toolchain: " in whole_env["error"]
    # The CuTe DSL packages need no nvcc, but their compiler package is not in this env.
    assert (
        "nvidia-cutlass-dsl, which is not installed" in jit["packages"]["quack-kernels"]["reason"]
    )
    # humming asks torch.version.cuda for the toolkit's major: a CPU torch has none.
    assert "torch has no CUDA" in jit["packages"]["humming-kernels"]["reason"]


def test_every_cuda_piece_is_named_and_the_mixed_minors_warned(whole_env: dict[str, Any]) -> None:
    """Issue 32: the env's CUDA toolchain by distribution; humming-kernels' nvcc 13.5.37 beside
    torch's cuda-toolkit's 13.0.96 runtime headers is warned, naming both."""
    check = next(c for c in whole_env["stack"]["checks"] if c["check"] == "cuda_toolchain")
    assert check["status"] == "warn", check
    assert check["details"]["mixed"] == ["nvidia-cuda-nvcc", "nvidia-cuda-runtime"]
    assert (
        "nvidia-cuda-nvcc 13.5.37 (nvcc, CUDA 13.5) beside nvidia-cuda-runtime 13.0.96"
        in check["reason"]
    )
    named = {p["distribution"]: p["version"] for p in check["details"]["pieces"]}
    assert named["nvidia-cuda-crt"] == "13.5.37" and named["nvidia-cuda-cccl"] == "13.3.5.0.6"


def test_checks_are_forked_not_started(whole_env: dict[str, Any]) -> None:
    """Each import and dlopen runs in a child of one of the probe's two fork servers: a few
    interpreters, not one per check (the verdicts above are theirs)."""
    runs = whole_env["smoke"]["runs"]
    assert runs["forked"] > 20 and runs["interpreters"] <= 4, runs


def test_the_mismatched_pair_really_stops_nvcc(cu13: Path, tmp_path: Path) -> None:
    """The verdict above is nvcc's: the pip nvcc 13.5 preprocessing a CCCL include against the
    13.0 headers stops at CCCL's #error."""
    src = tmp_path / "a.cu"
    src.write_text("#include <cuda/std/cstdint>\nint main() { return 0; }\n")
    proc = subprocess.run(
        [str(cu13 / "bin" / "nvcc"), "-E", "-x", "cu", str(src), "-o", "/dev/null"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "CUDA compiler and CUDA toolkit headers are incompatible" in proc.stderr


@pytest.mark.skipif(not (CUDA_13_0 / "bin" / "nvcc").exists(), reason="needs /usr/local/cuda-13.0")
def test_jit_consistent_toolkit_passes(stack_env: Path) -> None:
    """The real CUDA 13.0 toolkit: nvcc 13.0.88 with its own headers; flashinfer targets
    compute_120f (CUDA >= 12.9); humming (asked as for a CUDA 13 torch) prefers the system
    toolkit, whose minor it knows, over the pip tree."""
    sp = str(site_packages(stack_env))
    packages = {
        "flashinfer-python": {"rule": "flashinfer", "version": "0.7.2", "location": sp},
        "humming-kernels": {"rule": "humming", "version": "0.1.12", "location": sp},
    }
    env = {"CUDA_HOME": str(CUDA_13_0), "PATH": "/usr/bin:/bin"}
    res = check_jit(packages, [sp], (12, 0), "13.0", env=env)
    fi = res["packages"]["flashinfer-python"]
    assert (fi["status"], fi["nvcc_version"], fi["headers_version"]) == ("pass", "13.0.88", "13.0")
    assert fi["target"] == "compute_120f"
    hum = res["packages"]["humming-kernels"]
    assert hum["compiler"] == "nvcc" and hum["status"] == "pass", hum
    assert hum["nvcc"].startswith("/usr/local/cuda") and hum["nvcc_version"] == "13.0.88"
    assert res["status"] == "pass"


def test_nvcc_too_old_for_the_arch() -> None:
    """The arch rule (flashinfer/compilation_context.py): 12.0 needs CUDA >= 12.8, 12.1 >= 12.9."""
    assert judge_pair("nvcc", "12.6.85", "/inc", "12.6", (12, 0)) == (
        "fail",
        "nvcc 12.6.85 cannot target 12.0: needs CUDA >= 12.8",
    )
    assert judge_pair("nvcc", "12.8.93", "/inc", "12.8", (12, 1))[0] == "fail"
    assert judge_pair("nvcc", "12.8.93", "/inc", "12.8", (12, 0))[0] == "pass"


def test_human_output(whole_env: dict[str, Any]) -> None:
    keys = ("smoke", "packages", "python", "python_source", "arch", "arch_source", "stack")
    host = HostResult("local", status=whole_env["status"], error=whole_env["error"])
    host.data.update({k: whole_env[k] for k in keys})
    console = Console(record=True, width=400)
    render_smoke(console, RunResult("smoke", {"local": host}))
    out = console.export_text()
    assert "checked: sgl-kernel (sglang-kernel 0.4.10), " in out
    assert re.search(r"flashinfer-python\s*│\s*jit_toolchain\s*│\s*fail\s*│\s*CUDA compiler", out)
    assert re.search(r"sglang\s*│\s*import\s*│\s*fail\s*│\s*import sglang fails: ", out)
