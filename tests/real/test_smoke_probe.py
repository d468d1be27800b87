"""The smoke probe against real artifacts: nvcc/g++-built .so files installed as distributions.

The fixtures (tests/fixtures/smoke/build.py) compile a kernel for several -gencode sets, a torch
op wrapper against the installed torch, and link .so files that are right, lack cudart, lack an
RPATH into torch, reference a symbol of another torch, use the old C++ ABI, need a CUDA 12
runtime that is absent or a libstdc++ newer than the host's. Every failure the probe reports is
one the real loader produces. No GPU exists here: the GPU op check is only seen skipping.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sm120kit.errors import HostFailed, Sm120Error
from sm120kit.remote import extension_probe as probe
from sm120kit.remote.lib import cudaarch, diagnosis, fatbin
from sm120kit.remote.lib import demangle as demangle_lib
from sm120kit.remote.lib import elf as elf_lib
from sm120kit.smoke.report import (
    SmokeReport,
    parse_probe_output,
    probe_args,
    probe_source,
    problem_lines,
    report_from_json,
    table_rows,
    worst_status,
)

NVCC = os.environ.get("SM120KIT_NVCC", "/usr/local/cuda/bin/nvcc")
CUOBJDUMP = shutil.which("cuobjdump") or str(
    Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    / "site-packages" / "nvidia" / "cu13" / "bin" / "cuobjdump"
)  # fmt: skip


def _python38() -> str | None:
    """A working Python 3.8 (pyenv shims exist even where the version is not selected)."""
    candidates = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))
    candidates += [p for p in [shutil.which("python3.8")] if p]
    for path in candidates:
        if subprocess.run([path, "-c", "import sys"], capture_output=True).returncode == 0:
            return path
    return None


PY38 = _python38()

needs_build = pytest.mark.skipif(
    not (os.path.exists(NVCC) and shutil.which("g++") and shutil.which("gcc")),
    reason="needs nvcc and g++ to build the fixtures",
)
needs_cuobjdump = pytest.mark.skipif(not os.path.exists(CUOBJDUMP), reason="no cuobjdump")

FIXTURE_PACKAGES = [
    "smoke-good",
    "smoke-nocudart",
    "smoke-norpath",
    "smoke-oldtorch",
    "smoke-abi",
    "smoke-sm90",
    "smoke-ptx",
    "smoke-variants",
    "smoke-cudart12",
    "smoke-oldstdcxx",
    "sgl-kernel",
    "not-installed-anywhere",
]


# --- facts pinned (the fatbin layout; failure signatures) ------------------------------------


def test_fatbin_facts_are_pinned() -> None:
    assert fatbin.FATBIN_MAGIC == 0xBA55ED50
    assert fatbin.FATBIN_CONTAINER_HEADER == 16
    assert (fatbin.ENTRY_KIND_PTX, fatbin.ENTRY_KIND_ELF) == (1, 2)
    assert fatbin.ENTRY_SM_OFFSET == 28
    # Measured on nvcc 13.0 output (the builds below check them against cuobjdump).
    assert fatbin.FLAG_ARCH_SPECIFIC == 0x100000
    assert fatbin.FLAG_FAMILY == 0x200000
    assert fatbin.FLAG_COMPRESSED_ZSTD == 0x8000 and fatbin.FLAG_COMPRESSED_LZ4 == 0x2000


def _container(entries: list[tuple[int, int, int, bytes]]) -> bytes:
    """A fatbin container in the documented layout: (kind, sm, flags, payload) entries."""
    body = b""
    for kind, sm, flags, payload in entries:
        header = bytearray(64)
        struct.pack_into("<HHIQ", header, 0, kind, 0x101, 64, len(payload))
        struct.pack_into("<I", header, 28, sm)
        struct.pack_into("<Q", header, 40, flags)
        body += bytes(header) + payload
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def test_fatbin_headers_from_documented_layout() -> None:
    # The payload of the first entry carries the magic: the parser must skip payloads.
    fake_payload = struct.pack("<I", 0xBA55ED50) * 4
    data = b"\0" * 8 + _container(
        [(2, 120, 0x100011, fake_payload), (1, 120, 0x8011, b"x" * 8)]
    ) + _container([(2, 86, 0x11, b"")])  # fmt: skip
    got = [(e["target"], e["compressed"]) for e in fatbin.fatbin_entries(data)]
    assert got == [("sm_120a", False), ("compute_120", True), ("sm_86", False)]


@pytest.mark.parametrize(
    ("target", "cc", "runs"),
    [
        ("sm_120", (12, 0), True),
        ("sm_120", (12, 1), True),
        ("sm_120a", (12, 0), True),
        ("sm_120a", (12, 1), False),  # GB10 does not run sm_120a
        ("sm_120f", (12, 1), True),  # family
        ("sm_120f", (13, 0), False),
        ("sm_80", (8, 6), True),
        ("sm_80", (9, 0), False),
        ("sm_80", (12, 0), False),
        ("sm_86", (8, 0), False),
        ("sm_90a", (9, 0), True),
        ("sm_100a", (12, 0), False),
    ],
)
def test_sass_runs_on(target: str, cc: tuple[int, int], runs: bool) -> None:
    assert cudaarch.sass_runs_on(target, cc) is runs


@pytest.mark.parametrize(
    ("target", "cc", "jits"),
    [
        ("compute_80", (12, 0), True),
        ("compute_120", (12, 0), True),
        ("compute_120", (10, 0), False),
        ("compute_120a", (12, 0), True),
        ("compute_120a", (12, 1), False),
        ("compute_120f", (12, 1), True),
    ],
)
def test_ptx_jits_on(target: str, cc: tuple[int, int], jits: bool) -> None:
    assert cudaarch.ptx_jits_on(target, cc) is jits


def test_arch_verdicts() -> None:
    assert cudaarch.arch_verdict(["sm_120"], [], (12, 0))[0] == "pass"
    status, reason = cudaarch.arch_verdict(["sm_90"], ["compute_120"], (12, 0))
    assert status == "warn" and "JIT" in reason and "driver" in reason
    status, reason = cudaarch.arch_verdict(["sm_80", "sm_90"], [], (12, 0))
    assert status == "fail"
    assert "no kernel image is available for execution on the device" in reason
    assert cudaarch.arch_verdict([], [], (12, 0)) == ("skip", "no device code")


def test_parse_cc_and_args() -> None:
    assert cudaarch.parse_cc("12.0") == (12, 0)
    assert cudaarch.parse_cc("120") == (12, 0)
    assert cudaarch.parse_cc("sm_86") == (8, 6)
    assert cudaarch.parse_cc(None) is None
    with pytest.raises(ValueError):
        cudaarch.parse_cc("twelve")
    with pytest.raises(Sm120Error, match="--arch 'twelve'"):
        probe_args(["minikernel"], arch="twelve")
    args = probe_args(["minikernel"], arch="12.0", gpu=True)
    assert args == {"python": None, "packages": ["minikernel"], "arch": "12.0", "gpu": True}


def test_bad_arguments_answer_in_json() -> None:
    proc = subprocess.run(
        [sys.executable, "-", json.dumps({"packages": [], "arch": "twelve"})],
        input=probe_source(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "not a compute capability" in json.loads(proc.stdout)["error"]


def test_diagnosis_rules() -> None:
    """Strings as the loader prints them; the build tests below produce the real ones."""
    torch_info = {"version": "2.9.1", "cxx11_abi": False, "cuda": "12.8"}
    ext = {
        "needed": ["libc10.so"],
        "dlopen_error": "/x/_C.so: undefined symbol: "
        "_ZN3c104cuda9SetDeviceEa",
        "missing_symbols": [],
    }  # fmt: skip
    built_for = {"torch": "==2.7.0", "source": "wheel metadata: Requires-Dist torch==2.7.0"}
    diag = diagnosis.diagnose(ext, torch_info, built_for)
    assert diag[0].startswith(
        "built for torch 2.7.0 (wheel metadata: Requires-Dist torch==2.7.0), "
        "this env has torch 2.9.1: 1 torch symbol(s) missing: _ZN3c104cuda9SetDeviceEa"
    )
    # Nothing says which torch: the line says so instead of inventing one.
    assert "no build record, wheel pin or recipe pin" in diagnosis.diagnose(ext, torch_info)[0]
    ext = {"needed": [], "dlopen_error": "/x.so: undefined symbol: "
           "_ZN5torch3jit11parseSchemaERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEb"}  # fmt: skip
    assert "C++11 ABI mismatch" in diagnosis.diagnose(ext, torch_info, None)[0]
    ext = {
        "needed": [],
        "dlopen_error": "/lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found "
        "(required by /x/_C.so)",
    }
    assert diagnosis.diagnose(ext, torch_info, None)[0].startswith("glibc too old")


def _sym(name: str, expected_from: str | None) -> dict[str, Any]:
    return {
        "name": name,
        "demangled": demangle_lib.Demangler()(name),
        "expected_from": expected_from,
    }


def test_causes_are_sorted_before_a_diagnosis() -> None:
    """A CUDA 12 wheel built for torch 2.9.1 in a CPU torch env: symbols as the real wheel has
    them (tests/real/test_smoke_real_wheel.py checks the real one)."""
    ext = {
        "needed": ["libc10.so", "libc10_cuda.so", "libtorch_cuda.so", "libcudart.so.12"],
        "missing_libs": ["libc10_cuda.so", "libtorch_cuda.so", "libcudart.so.12", "libcuda.so.1"],
        "missing_symbols": [
            _sym("_ZN3c104cuda20getCurrentCUDAStreamEa", "libc10_cuda.so"),
            _sym("__cudaRegisterFatBinary", "libcudart.so.12"),
            _sym("_ZNK2at10TensorBase14const_data_ptrIiLi0EEEPKT_v", "libtorch_cpu.so"),
            _sym("cuGetErrorString", None),
        ],
    }
    cpu_torch = {"version": "2.13.0+cpu", "cuda": None, "cxx11_abi": True}
    built_for = {"torch": "==2.9.1", "source": "recipe pin for sgl-kernel 0.3.21"}
    causes = diagnosis.sort_causes(ext, cpu_torch, built_for, provided=lambda base: [])
    assert [c["cause"] for c in causes] == [
        "torch_abi",
        "torch_cpu_build",
        "cuda_major",
        "no_driver",
    ]
    drift, cpu, cuda, driver = (c["reason"] for c in causes)
    assert drift == (
        "built for torch 2.9.1 (recipe pin for sgl-kernel 0.3.21), this env has torch "
        "2.13.0+cpu: 1 torch symbol(s) missing: int const* at::TensorBase::const_data_ptr<int, 0>() const"
    )
    assert cpu == (
        "torch 2.13.0+cpu is a CPU build: libtorch_cuda/libc10_cuda are not there (1 symbol(s) "
        "need them, e.g. c10::cuda::getCurrentCUDAStream(signed char))"
    )
    assert cuda == (
        "needs CUDA 12 libraries (libcudart.so.12): this env provides none "
        "(CPU torch, no nvidia-* CUDA wheels)"
    )
    assert driver.startswith("libcuda.so.1 (from the NVIDIA driver) not found")
    assert [s.get("cause") for s in ext["missing_symbols"]] == [
        "torch_cpu_build",
        "cuda_major",
        "torch_abi",
        "no_driver",
    ]
    # Another CUDA major present: named with the library that provides it.
    causes = diagnosis.sort_causes(ext, cpu_torch, built_for, provided=lambda b: [f"{b}.so.13"])
    assert "this env provides CUDA 13 (libcudart.so.13)" in causes[2]["reason"]
    # A CUDA torch: the same c10::cuda symbol is drift, not a missing CUDA half.
    cuda_torch = {"version": "2.13.0+cu130", "cuda": "13.0", "cxx11_abi": True}
    ext["missing_libs"] = ["libcudart.so.12"]
    causes = diagnosis.sort_causes(ext, cuda_torch, built_for)
    assert [c["cause"] for c in causes] == ["torch_abi", "cuda_major"]
    assert "2 torch symbol(s) missing" in causes[0]["reason"]


def test_mangled_scope() -> None:
    scope = diagnosis.mangled_scope
    assert scope("_ZNK2at10TensorBase14const_data_ptrIiLi0EEEPKT_v") == (
        "2at10TensorBase14const_data_ptr"
    )
    assert scope("_ZNR5torch7Library4_defEON3c1014FunctionSchemaE") == "5torch7Library4_def"
    assert scope("_ZN3c1013MessageLoggerC1EPKcii") == "3c1013MessageLoggerC"
    assert scope("_ZN3c106SymIntplERKS0_") is None  # an operator: not followed
    assert scope("__cudaRegisterFatBinary") is None


def test_close_variant_in_the_installed_torch() -> None:
    """Read from the real libtorch: torch 2.13 dropped the enable_if parameter of
    const_data_ptr<int> and moved at::Tag to torch::headeronly::Tag."""
    import torch

    lib = Path(torch.__file__).parent / "lib"
    tables = []
    for name in ("libtorch_cpu.so", "libc10.so"):
        elf = elf_lib.open_elf(str(lib / name))
        assert elf is not None
        tables.append(elf.symbols()[1])
    demangle = demangle_lib.Demangler()
    old = _sym("_ZNK2at10TensorBase14const_data_ptrIiLi0EEEPKT_v", None)
    variant = diagnosis.close_variant(old, tables, demangle)
    assert variant is not None and "at::TensorBase::const_data_ptr<int" in variant
    assert variant != old["demangled"]
    if torch.__version__.startswith("2.13."):
        assert variant == "int const* at::TensorBase::const_data_ptr<int>() const"
        tag = _sym(
            "_ZNR5torch7Library4_defEON3c1014FunctionSchemaEPNS1_12OperatorNameERKSt6vectorIN2at3"
            "TagESaIS8_EENS_17_RegisterOrVerifyE",
            None,
        )
        assert "torch::headeronly::Tag" in (diagnosis.close_variant(tag, tables, demangle) or "")


def test_demangler() -> None:
    demangle = demangle_lib.Demangler()
    assert (
        demangle("_ZNK3c106SymInt6sym_neERKS0_") == "c10::SymInt::sym_ne(c10::SymInt const&) const"
    )
    assert demangle("__cudaRegisterFatBinary") == "__cudaRegisterFatBinary"


def test_requires_torch() -> None:
    assert probe.requires_torch(["numpy", "torch==2.9.1"]) == "==2.9.1"
    assert probe.requires_torch(["torch (==2.9.1)"]) == "==2.9.1"
    assert probe.requires_torch(["torch>=2.7; extra == 'gpu'"]) == ">=2.7"
    assert probe.requires_torch(["torch"]) == ""
    assert probe.requires_torch(["torchvision==0.24"]) is None


def test_worst_status() -> None:
    assert worst_status([]) == "skip"
    assert worst_status(["skip", "pass"]) == "pass"
    assert worst_status(["pass", "warn", "skip"]) == "warn"
    assert worst_status(["warn", "fail"]) == "fail"


def test_parse_probe_output_errors_are_one_line() -> None:
    with pytest.raises(HostFailed) as err:
        parse_probe_output("Traceback (most recent call last):\n  boom\n", "gpu1")
    assert "\n" not in str(err.value) and "gpu1" in str(err.value)
    with pytest.raises(HostFailed, match="gpu1: smoke probe JSON is malformed"):
        report_from_json(
            {"packages": {"x": {"installed": True, "checks": [{"check": "a", "status": "meh"}]}}},
            "gpu1",
        )


# --- real builds ------------------------------------------------------------------------------


def run_probe(args: dict[str, Any], python: str = sys.executable) -> dict[str, Any]:
    """Run the probe the way the controller does: the script on stdin, `python - '<json>'`."""
    proc = subprocess.run(
        [python, "-", json.dumps(args)],
        input=probe_source(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n") == 1, "exactly one JSON document on stdout"
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


@pytest.fixture(scope="session")
def report(smoke_fixtures: Any) -> dict[str, Any]:
    """One probe run over every fixture distribution, judged for 12.0, with gpu requested."""
    args = probe_args(FIXTURE_PACKAGES, python=smoke_fixtures.python, arch="12.0", gpu=True)
    return run_probe(args)


def _check(report: dict[str, Any], pkg: str, name: str) -> dict[str, Any]:
    checks = {c["check"]: c for c in report["packages"][pkg]["checks"]}
    assert list(checks) == [
        "import_order",
        "undefined_symbols",
        "arch_coverage",
        "loader",
        "gpu_op",
    ]
    return checks[name]


def _ext(report: dict[str, Any], pkg: str) -> dict[str, Any]:
    (ext,) = [e for e in report["packages"][pkg]["extensions"] if "/_C" in e["path"]]
    return ext


@pytest.mark.slow
@needs_build
def test_report_header(report: dict[str, Any]) -> None:
    import torch

    assert report["torch"]["version"] == torch.__version__
    assert report["torch"]["cxx11_abi"] is True  # torch 2.7+ wheels
    assert report["arch"] == "12.0" and report["arch_source"] == "args"
    assert report["packages"]["not-installed-anywhere"]["installed"] is False


@pytest.mark.slow
@needs_build
def test_right_extension_passes(report: dict[str, Any]) -> None:
    for name in ("import_order", "undefined_symbols", "arch_coverage"):
        assert _check(report, "smoke-good", name)["status"] == "pass", name
    assert _check(report, "smoke-good", "loader")["status"] == "skip"
    gpu = _check(report, "smoke-good", "gpu_op")
    assert gpu["status"] == "skip" and "is_available() is False" in gpu["reason"]
    ext = _ext(report, "smoke-good")
    assert ext["sass"] == ["sm_120"] and ext["ptx"] == []
    assert ext["missing_symbols"] == [] and ext["dlopen_error"] is None


@pytest.mark.slow
@needs_build
def test_not_linked_to_cudart(report: dict[str, Any]) -> None:
    check = _check(report, "smoke-nocudart", "undefined_symbols")
    assert check["status"] == "fail" and "not linked against cudart" in check["reason"]
    ext = _ext(report, "smoke-nocudart")
    assert "undefined symbol: __cudaPushCallConfiguration" in ext["dlopen_error"]
    names = {s["name"]: s for s in ext["missing_symbols"]}
    assert {"__cudaRegisterFatBinary", "__cudaPushCallConfiguration"} <= set(names)
    assert names["__cudaRegisterFatBinary"]["expected_from"].startswith("libcudart")
    assert _check(report, "smoke-nocudart", "import_order")["status"] == "fail"


@pytest.mark.slow
@needs_build
def test_arch_lists_without_12_0(report: dict[str, Any]) -> None:
    sm90 = _check(report, "smoke-sm90", "arch_coverage")
    assert sm90["status"] == "fail"
    assert "no kernel image is available for execution on the device" in sm90["reason"]
    assert _ext(report, "smoke-sm90")["sass"] == ["sm_90"]
    ptx = _check(report, "smoke-ptx", "arch_coverage")
    assert ptx["status"] == "warn" and "compute_120" in ptx["reason"]
    assert (_ext(report, "smoke-ptx")["sass"], _ext(report, "smoke-ptx")["ptx"]) == (
        [],
        ["compute_120"],
    )
    ext = _ext(report, "smoke-variants")
    assert ext["sass"] == ["sm_120a", "sm_120f"] and ext["ptx"] == ["compute_120a"]
    assert _check(report, "smoke-variants", "arch_coverage")["status"] == "pass"
    assert _check(report, "smoke-abi", "arch_coverage")["reason"] == "no device code"


@pytest.mark.slow
@needs_build
def test_needs_torch_first(report: dict[str, Any]) -> None:
    check = _check(report, "smoke-norpath", "import_order")
    assert check["status"] == "warn"
    assert "needs torch first" in check["reason"] and "libc10.so" in check["reason"]
    assert "no RPATH into torch/lib" in check["reason"]
    ext = _ext(report, "smoke-norpath")
    assert "libc10.so" in ext["needs_torch_loaded"] and ext["missing_libs"] == []
    assert "cannot open shared object file" in ext["import_alone_error"]
    assert _check(report, "smoke-norpath", "undefined_symbols")["status"] == "pass"


@pytest.mark.slow
@needs_build
def test_built_against_another_torch(report: dict[str, Any]) -> None:
    import torch

    pkg = report["packages"]["smoke-oldtorch"]
    assert pkg["requires_torch"] == "==2.9.1"
    assert pkg["built_for"]["source"] == "wheel metadata: Requires-Dist torch==2.9.1"
    assert (pkg["torch"]["built_for"], pkg["torch"]["installed"]) == ("2.9.1", torch.__version__)
    check = _check(report, "smoke-oldtorch", "undefined_symbols")
    assert check["status"] == "fail"
    assert (
        "built for torch 2.9.1 (wheel metadata: Requires-Dist torch==2.9.1), "
        f"this env has torch {torch.__version__}: 1 torch symbol(s) missing: "
        "c10::SymInt::sym_ne(c10::SymInt const&) const"
    ) in check["reason"]
    (sym,) = _ext(report, "smoke-oldtorch")["missing_symbols"]
    assert sym["name"] == "_ZNK3c106SymInt6sym_neERKS0_"
    assert sym["demangled"] == "c10::SymInt::sym_ne(c10::SymInt const&) const"
    assert sym["expected_from"] == "libc10.so" and sym["cause"] == "torch_abi"


@pytest.mark.slow
@needs_build
def test_cxx11_abi_mismatch(report: dict[str, Any]) -> None:
    check = _check(report, "smoke-abi", "undefined_symbols")
    assert check["status"] == "fail" and "C++11 ABI mismatch" in check["reason"]
    (sym,) = _ext(report, "smoke-abi")["missing_symbols"]
    assert sym["name"] == "_ZN3c106DeviceC1ERKSs" and "std::string" in sym["demangled"]


@pytest.mark.slow
@needs_build
def test_cuda_runtime_absent(report: dict[str, Any]) -> None:
    check = _check(report, "smoke-cudart12", "undefined_symbols")
    assert check["status"] == "fail"
    assert "needs CUDA 12 libraries (libcudart.so.12): this env provides " in check["reason"]
    ext = _ext(report, "smoke-cudart12")
    assert ext["missing_libs"] == ["libcudart.so.12"]
    assert "not linked against cudart" not in " ".join(ext["diagnosis"])


@pytest.mark.slow
@needs_build
def test_libstdcxx_too_old(report: dict[str, Any]) -> None:
    check = _check(report, "smoke-oldstdcxx", "undefined_symbols")
    assert check["status"] == "fail"
    assert "libstdc++ too old" in check["reason"] and "GLIBCXX_3.4.99" in check["reason"]
    ext = _ext(report, "smoke-oldstdcxx")
    assert [v["version"] for v in ext["missing_versions"]] == ["GLIBCXX_3.4.99"]
    (sym,) = ext["missing_symbols"]
    assert sym["version"] == "GLIBCXX_3.4.99" and sym["expected_from"] == "libstdc++.so.6"


@pytest.mark.slow
@needs_build
def test_sgl_kernel_upstream_loader_on_12_0(report: dict[str, Any]) -> None:
    loader = _check(report, "sgl-kernel", "loader")
    assert loader["status"] == "pass"
    assert loader["details"]["chosen"] == "sgl_kernel/sm100/common_ops.abi3.so"
    assert loader["details"]["chosen_sass"] == ["sm_100a", "sm_120a"]
    arch = _check(report, "sgl-kernel", "arch_coverage")
    assert arch["status"] == "pass"
    assert any(p.endswith("sm90/common_ops.abi3.so") for p in arch["details"]["not_loaded"])
    order = _check(report, "sgl-kernel", "import_order")
    assert order["status"] == "warn" and "libc10.so" in order["reason"]


@pytest.fixture(scope="session")
def sgl_runs(smoke_fixtures: Any) -> dict[str, dict[str, Any]]:
    """sgl-kernel alone, for 12.1 and 9.0 (upstream-like) and 12.1 (patched)."""
    runs = {}
    for key, python, arch in (
        ("upstream-12.1", smoke_fixtures.python, "12.1"),
        ("upstream-9.0", smoke_fixtures.python, "9.0"),
        ("patched-12.1", smoke_fixtures.python_patched, "12.1"),
    ):
        runs[key] = run_probe(probe_args(["sgl-kernel"], python=python, arch=arch))
    return runs


@pytest.mark.slow
@needs_build
def test_sgl_kernel_loader_per_capability(sgl_runs: dict[str, dict[str, Any]]) -> None:
    up = _check(sgl_runs["upstream-12.1"], "sgl-kernel", "loader")
    assert up["status"] == "fail" and "sm100/common_ops" in up["reason"]
    assert "no variant here runs on 12.1" in up["reason"]
    assert _check(sgl_runs["upstream-12.1"], "sgl-kernel", "arch_coverage")["status"] == "fail"
    hopper = _check(sgl_runs["upstream-9.0"], "sgl-kernel", "loader")
    assert (
        hopper["status"] == "pass"
        and hopper["details"]["chosen"] == "sgl_kernel/sm90/common_ops.abi3.so"
    )
    patched = _check(sgl_runs["patched-12.1"], "sgl-kernel", "loader")
    assert patched["status"] == "pass"
    assert patched["details"]["chosen"] == "sgl_kernel/sm120/common_ops.abi3.so"
    assert sgl_runs["patched-12.1"]["packages"]["sgl-kernel"]["version"] == "0.3.21+sm120"


def _cuobjdump_targets(path: Path) -> tuple[list[str], list[str], bool]:
    """(SASS, PTX, any compressed) from cuobjdump's per-entry `arch =` lines."""
    out = subprocess.run([CUOBJDUMP, str(path)], capture_output=True, text=True).stdout
    sass, ptx, compressed = [], [], False
    kind = None
    for line in out.splitlines():
        m = re.match(r"Fatbin (elf|ptx) code:", line)
        if m:
            kind = m.group(1)
        m = re.match(r"arch = sm_(\d+[af]?)", line)
        if m and kind:
            (sass if kind == "elf" else ptx).append(
                ("sm_" if kind == "elf" else "compute_") + m.group(1)
            )
        compressed = compressed or line.strip() == "compressed"
    return sorted(set(sass)), sorted(set(ptx)), compressed


@pytest.mark.slow
@needs_build
@needs_cuobjdump
def test_targets_agree_with_cuobjdump(smoke_fixtures: Any) -> None:
    for name, path in smoke_fixtures.libs.items():
        sass, ptx, _found = fatbin.device_targets(str(path))
        ref_sass, ref_ptx, ref_compressed = _cuobjdump_targets(path)
        assert (sorted(sass), sorted(ptx)) == (ref_sass, ref_ptx), name
        elf = elf_lib.open_elf(str(path))
        assert elf is not None
        entries = [
            e
            for a, b in elf.section_ranges(".nv_fatbin")
            for e in fatbin.fatbin_entries(elf.data, a, b)
        ]
        assert any(e["compressed"] for e in entries) == ref_compressed, name
        # --list-elf names family SASS by its plain arch (sm_120f -> .sm_120.cubin).
        listed = subprocess.run(
            [CUOBJDUMP, "--list-elf", str(path)], capture_output=True, text=True
        ).stdout
        plain = sorted({t.rstrip("f") for t in sass})
        assert sorted(set(re.findall(r"\.(sm_\d+a?)\.cubin", listed))) == plain, name


@pytest.mark.slow
@needs_build
def test_entry_header_bytes(smoke_fixtures: Any) -> None:
    """Byte 28 of the entry header is the SM number; kind 2 is SASS."""
    elf = elf_lib.open_elf(str(smoke_fixtures.libs["sm90"]))
    assert elf is not None
    ((start, _stop),) = elf.section_ranges(".nv_fatbin")
    magic, _ver, hsize, _size = struct.unpack_from("<IHHQ", elf.data, start)
    assert (magic, hsize) == (0xBA55ED50, 16)
    kind, _v, _h, _p = struct.unpack_from("<HHIQ", elf.data, start + 16)
    (sm,) = struct.unpack_from("<I", elf.data, start + 16 + 28)
    assert (kind, sm) == (2, 90)


@pytest.mark.slow
@needs_build
@pytest.mark.skipif(shutil.which("nm") is None, reason="no binutils nm")
def test_elf_reader_agrees_with_nm(smoke_fixtures: Any) -> None:
    path = smoke_fixtures.libs["nocudart"]
    elf = elf_lib.open_elf(str(path))
    assert elf is not None
    ours = {name for name, _v, _w in elf.symbols()[0]}
    out = subprocess.run(
        ["nm", "-D", "--undefined-only", str(path)], capture_output=True, text=True
    )
    theirs = {line.split()[-1].split("@")[0] for line in out.stdout.splitlines() if line.strip()}
    assert ours == theirs
    needed = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout
    assert elf.dynamic()["needed"] == re.findall(r"\(NEEDED\).*\[(.+)\]", needed)


@pytest.mark.slow
@needs_build
def test_controller_rows(report: dict[str, Any]) -> None:
    parsed = parse_probe_output("some banner\n" + json.dumps(report) + "\n", "gpu1")
    assert isinstance(parsed, SmokeReport) and parsed.status == "fail"
    rows = table_rows(parsed)
    assert (
        "not-installed-anywhere",
        "installed",
        "fail",
        f"not installed in {parsed.python}",
    ) in rows
    assert all(status in ("pass", "warn", "fail", "skip") for _p, _c, status, _r in rows)
    assert all("\n" not in reason for *_x, reason in rows)
    good = [r for r in rows if r[0] == "smoke-good"]
    assert [r[1] for r in good] == [
        "import_order",
        "undefined_symbols",
        "arch_coverage",
        "loader",
        "gpu_op",
    ]
    assert parsed.packages["smoke-good"].status == "pass"
    assert parsed.packages["smoke-norpath"].status == "warn"
    lines = problem_lines(parsed.packages["smoke-nocudart"])
    assert any(
        "undefined __cudaRegisterFatBinary" in line and "libcudart" in line for line in lines
    )


@pytest.mark.slow
@needs_build
@pytest.mark.skipif(PY38 is None, reason="no python3.8")
def test_probe_runs_under_python38(smoke_fixtures: Any) -> None:
    """The probe under 3.8 checking a 3.11 env: only the target interpreter imports things."""
    assert PY38 is not None
    doc = run_probe(
        probe_args(["smoke-variants", "smoke-abi"], python=smoke_fixtures.python, arch="12.1"), PY38
    )
    variants = _check(doc, "smoke-variants", "arch_coverage")
    assert variants["status"] == "pass" and "sm_120f" in variants["reason"]  # 12.1 runs only f
    assert "C++11 ABI mismatch" in _check(doc, "smoke-abi", "undefined_symbols")["reason"]
    assert _check(doc, "smoke-abi", "gpu_op")["reason"] == "no GPU run requested (gpu=false)"


def _driverless(gpu: bool, checks: list[dict[str, Any]], exts: list[dict[str, Any]]) -> None:
    from types import SimpleNamespace

    from sm120kit.remote.lib.probe_checks import without_driver

    without_driver(SimpleNamespace(args={"gpu": gpu}), checks, exts)  # type: ignore[arg-type]


def _driver_case() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """sglang-kernel 0.4.10 on a GPU-less host, as its smoke met it: common_ops NEEDS
    libcuda.so.1, so neither its import nor the loader's pick can load; symbols otherwise
    resolve."""
    so = "/env/sgl_kernel/sm100/common_ops.abi3.so"
    exts = [{"path": so, "rel": "sgl_kernel/sm100/common_ops.abi3.so",
             "missing_libs": ["libcuda.so.1"], "causes": [{"cause": "no_driver"}]}]  # fmt: skip
    checks = [
        {"check": "import_order", "status": "fail", "details": {},
         "reason": "sgl_kernel fails even after import torch: ImportError: libcuda.so.1: "
                   "cannot open shared object file"},
        {"check": "undefined_symbols", "status": "fail", "reason": "common_ops: no driver",
         "details": {"failing": [{"path": so}], "not_judged": []}},
        {"check": "loader", "status": "fail", "details": {},
         "reason": "loading it failed (ImportError: libcuda.so.1: cannot open shared object)"},
        {"check": "arch_coverage", "status": "pass", "reason": "ok", "details": {}},
    ]  # fmt: skip
    return checks, exts


def test_a_gpu_less_host_warns_where_only_the_driver_is_missing() -> None:
    """No GPU and no libcuda.so.1: what fails only for want of the driver cannot be checked
    there, and says so as a warning naming the module and the library."""
    checks, exts = _driver_case()
    _driverless(False, checks, exts)
    assert [c["status"] for c in checks] == ["warn", "warn", "warn", "pass"]
    for c in checks[:3]:
        assert c["reason"].startswith(
            "not checkable here: needs the NVIDIA driver (libcuda.so.1, e.g. "
            "sgl_kernel/sm100/common_ops.abi3.so needs it), which this GPU-less host lacks: "
        )
        assert c["details"]["needs_driver"] == ["sgl_kernel/sm100/common_ops.abi3.so"]


def test_a_gpu_host_without_its_driver_fails_as_before() -> None:
    checks, exts = _driver_case()
    _driverless(True, checks, exts)
    assert [c["status"] for c in checks] == ["fail", "fail", "fail", "pass"]


def test_a_failure_the_driver_does_not_explain_stays_a_failure() -> None:
    checks, exts = _driver_case()
    exts[0]["causes"].append({"cause": "torch_abi"})
    checks[0]["reason"] = "sgl_kernel fails even after import torch: undefined symbol: _ZN3c10"
    _driverless(False, checks, exts)
    assert [c["status"] for c in checks] == ["fail", "fail", "warn", "pass"]
