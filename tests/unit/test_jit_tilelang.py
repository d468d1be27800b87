"""tilelang 0.1.12's CUDA toolchain lookup (sm120kit/remote/lib/jit_toolchain.py, rule
``tilelang``), step by step as ``tilelang/env.py`` ``_find_cuda_home()`` takes it.

The lookup-order tests lay out directories and a dist-info RECORD in a temp dir (no nvcc
runs here): the rule reads only paths, PATH and RECORD files. The verdict with this machine's
real CUDA toolkit is tests/real/test_jit_tilelang_real.py.
"""

from __future__ import annotations

from pathlib import Path

from sm120kit.packages.stack import jit_rules
from sm120kit.remote.lib.jit_toolchain import _tilelang_home, check_jit


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_tilelang_is_a_jit_package_of_the_stack() -> None:
    assert jit_rules()["tilelang"]["rule"] == "tilelang"


def test_cuda_home_then_cuda_path_are_taken_as_given(tmp_path: Path) -> None:
    env = {"CUDA_HOME": "/nowhere", "CUDA_PATH": str(tmp_path), "PATH": ""}
    assert _tilelang_home(env, []) == ("/nowhere", "$CUDA_HOME")
    del env["CUDA_HOME"]
    assert _tilelang_home(env, []) == (str(tmp_path), "$CUDA_PATH")


def test_nvcc_on_path_then_the_pip_nvcc(tmp_path: Path) -> None:
    nvcc = _exe(tmp_path / "cuda-13.0" / "bin" / "nvcc")
    home, how = _tilelang_home({"PATH": str(nvcc.parent)}, [])
    assert (home, how) == (str(tmp_path / "cuda-13.0"), f"which nvcc ({nvcc})")
    hpc = _exe(tmp_path / "hpc_sdk" / "Linux_x86_64" / "25.7" / "compilers" / "bin" / "nvcc")
    assert _tilelang_home({"PATH": str(hpc.parent)}, [])[0] == str(
        tmp_path / "hpc_sdk" / "Linux_x86_64" / "25.7"
    )
    # No nvcc on PATH: the nvidia-cuda-nvcc distribution's own nvcc, found by its RECORD.
    site = tmp_path / "site"
    info = site / "nvidia_cuda_nvcc-13.0.88.dist-info"
    info.mkdir(parents=True)
    (info / "RECORD").write_text("nvidia/cu13/bin/nvcc,sha256=x,1\nnvidia/cu13/bin/ptxas,,\n")
    _exe(site / "nvidia" / "cu13" / "bin" / "nvcc")
    home, how = _tilelang_home({"PATH": ""}, [str(site)])
    assert home == str(site / "nvidia" / "cu13") and how.startswith("nvidia-cuda-nvcc's nvcc")
    # The distribution without an nvcc: tilelang's own assertion stops its import.
    (info / "RECORD").write_text("nvidia/cu13/bin/ptxas,,\n")
    home, how = _tilelang_home({"PATH": ""}, [str(site)])
    assert home is None and "fails to import" in how


def test_no_cuda_home_fails_with_the_reason(tmp_path: Path) -> None:
    packages = {"tilelang": {"rule": "tilelang", "version": "0.1.12", "location": ""}}
    env = {"CUDA_HOME": str(tmp_path / "gone"), "PATH": ""}
    got = check_jit(packages, [], (12, 0), "13.0", env=env)["packages"]["tilelang"]
    assert got["status"] == "fail" and got["nvcc"] == str(tmp_path / "gone" / "bin" / "nvcc")
