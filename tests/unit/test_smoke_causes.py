"""Smoke's cause sorting as a table: one extension's load facts in (missing libraries,
versions and symbols, the loader's error, the env's torch), its causes out, root causes first
(sm120kit/remote/lib/diagnosis.sort_causes). No host, no artifact: the facts are what the
probe reads from real .so files in tests/real/test_smoke_probe.py, written out by hand here."""

from __future__ import annotations

from typing import Any

import pytest

from sm120kit.remote.lib.diagnosis import CAUSE_ORDER, diagnose, sort_causes

CUDA_TORCH = {"version": "2.13.0+cu130", "cuda": "13.0", "dir": "/env/torch", "cxx11_abi": True}
CPU_TORCH = {"version": "2.13.0+cpu", "cuda": None, "dir": "/env/torch", "cxx11_abi": True}


def sym(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "demangled": name, "expected_from": None, **extra}


#: (case, ext facts, torch, CUDA sonames the env provides, the causes in order)
ROWS: list[tuple[str, dict[str, Any], dict[str, Any], list[str], list[str]]] = [
    (
        "glibc too old",
        {"missing_versions": [{"version": "GLIBC_2.38", "library": "libc.so.6"}]},
        CUDA_TORCH,
        [],
        ["glibc_too_old"],
    ),
    (
        "libstdc++ too old",
        {"missing_versions": [{"version": "GLIBCXX_3.4.32", "library": "libstdc++.so.6"}]},
        CUDA_TORCH,
        [],
        ["libstdcxx_too_old"],
    ),
    (
        "another symbol version",
        {"missing_versions": [{"version": "FOO_1.0", "library": "libfoo.so.1"}]},
        CUDA_TORCH,
        [],
        ["symbol_version"],
    ),
    (
        "built for CUDA 12, the env has CUDA 13's runtime",
        {"missing_libs": ["libcudart.so.12"], "needed": ["libcudart.so.12"]},
        CUDA_TORCH,
        ["libcudart.so.13"],
        ["cuda_major"],
    ),
    (
        "no driver on the host",
        {"missing_libs": ["libcuda.so.1"], "needed": ["libcuda.so.1"]},
        CUDA_TORCH,
        [],
        ["no_driver"],
    ),
    (
        "cudart symbols, cudart not linked",
        {"missing_symbols": [sym("cudaLaunchKernel")], "needed": ["libc.so.6"]},
        CUDA_TORCH,
        [],
        ["cudart_not_linked"],
    ),
    (
        "torch's library not found (no RPATH into torch/lib)",
        {"missing_libs": ["libc10.so"], "needed": ["libc10.so"]},
        CUDA_TORCH,
        [],
        ["torch_lib_missing"],
    ),
    (
        "a CUDA extension beside a CPU torch",
        {"missing_libs": ["libc10_cuda.so"], "needed": ["libc10_cuda.so"]},
        CPU_TORCH,
        [],
        ["torch_cpu_build"],
    ),
    (
        "another library missing",
        {"missing_libs": ["libnuma.so.1"], "needed": ["libnuma.so.1"]},
        CUDA_TORCH,
        [],
        ["library_missing"],
    ),
    (
        "only the loader's words",
        {"dlopen_error": "something odd happened"},
        CUDA_TORCH,
        [],
        ["load_error"],
    ),
    (
        "the loader's words carry a missing library",
        {"dlopen_error": "libnuma.so.1: cannot open shared object file: No such file"},
        CUDA_TORCH,
        [],
        ["library_missing"],
    ),
    (
        "two causes: the root first",
        {
            "missing_libs": ["libnuma.so.1"],
            "missing_versions": [{"version": "GLIBC_2.38", "library": "libc.so.6"}],
        },
        CUDA_TORCH,
        [],
        ["glibc_too_old", "library_missing"],
    ),
]


@pytest.mark.parametrize(
    ("ext", "torch", "provided", "want"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS]
)
def test_causes(
    ext: dict[str, Any], torch: dict[str, Any], provided: list[str], want: list[str]
) -> None:
    causes = sort_causes(dict(ext), torch, None, lambda base: provided)
    assert [c["cause"] for c in causes] == want
    assert all(c["reason"] for c in causes)
    assert diagnose(dict(ext), torch, None, lambda base: provided) == [c["reason"] for c in causes]


def test_nothing_wrong_is_no_cause() -> None:
    assert sort_causes({}, CUDA_TORCH) == []


def test_every_row_cause_is_ordered() -> None:
    assert {c for r in ROWS for c in r[4]} <= set(CAUSE_ORDER) | {"load_error"}
