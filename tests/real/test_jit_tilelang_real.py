"""tilelang's toolchain rule (tests/unit/test_jit_tilelang.py) judged with this machine's real
CUDA toolkit (nvcc --version, cuda_runtime_api.h): it passes for 12.0. Skipped without a
toolkit with nvcc and headers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sm120kit.remote.lib.jit_toolchain import check_jit


def _toolkit() -> Path | None:
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda-13.0", "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").exists():
            if (Path(home) / "include" / "cuda_runtime_api.h").exists():
                return Path(home)
    return None


def test_a_real_toolkit_passes_for_12_0() -> None:
    home = _toolkit()
    if home is None:
        pytest.skip("no CUDA toolkit with nvcc and headers on this machine")
    packages = {"tilelang": {"rule": "tilelang", "version": "0.1.12", "location": ""}}
    res = check_jit(packages, [], (12, 0), "13.0", env={"CUDA_HOME": str(home), "PATH": ""})
    got = res["packages"]["tilelang"]
    assert got["status"] == "pass", got
    assert got["nvcc"] == str(home / "bin" / "nvcc") and got["headers"] == str(home / "include")
    assert got["reason"].endswith(f"(CUDA home {home}, from $CUDA_HOME)")
