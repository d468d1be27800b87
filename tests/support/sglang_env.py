"""Venvs holding real released wheels of sglang 0.5.23's stack, installed with --no-deps: the
preflight one (sglang 0.5.23, sglang-kernel 0.4.10, flashinfer-python 0.7.2, no torch:
preflight never imports them, it reads them) and smoke's whole stack beside the suite's torch.

The wheels are downloaded once from PyPI into the test cache (``SM120KIT_TEST_CACHE``, default
``~/.cache/sm120kit-tests``, verified by sha256: tests/support/real_wheels.py), the venv is built
once per set of wheel hashes. Nothing here is simulated.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.real_wheels import real_wheel, wheel_venv

WHEELS = {
    "sglang==0.5.23": "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
    "sglang-kernel==0.4.10": "sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl",
    "flashinfer-python==0.7.2": "flashinfer_python-0.7.2-py3-none-any.whl",
}

#: The rest of sglang 0.5.23's released stack and the CUDA 13 pip pieces of the env the issue
#: met (torch's cuda-toolkit 13.0.3 pins nvidia-cuda-runtime 13.0.96; humming-kernels[cu13]
#: pulls nvidia-cuda-nvcc, its nvidia-cuda-crt and nvidia-cuda-cccl unpinned: 13.5.37, 13.5.37,
#: 13.3.5.0.6): together a real mismatched compiler/headers pair in site-packages/nvidia/cu13.
_MANY = "manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
STACK_WHEELS = {
    "sgl-flash-mla==1.0.0": "sgl_flash_mla-1.0.0-cp310-abi3-manylinux2014_x86_64.whl",
    "flash-attn-4==4.0.0b36": "flash_attn_4-4.0.0b36-py3-none-any.whl",
    "quack-kernels==0.6.5": "quack_kernels-0.6.5-py3-none-any.whl",
    "humming-kernels==0.1.12": "humming_kernels-0.1.12-py3-none-manylinux_2_28_x86_64.whl",
    "sgl-deep-gemm==0.2.3.post2": "sgl_deep_gemm-0.2.3.post2-py3-none-manylinux2014_x86_64.whl",
    "sgl-deep-ep==0.1.2.post1": (
        "sgl_deep_ep-0.1.2.post1-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
    ),
    "nvidia-cuda-nvcc==13.5.37": f"nvidia_cuda_nvcc-13.5.37-py3-none-{_MANY}",
    "nvidia-cuda-crt==13.5.37": f"nvidia_cuda_crt-13.5.37-py3-none-{_MANY}",
    "nvidia-cuda-runtime==13.0.96": f"nvidia_cuda_runtime-13.0.96-py3-none-{_MANY}",
    "nvidia-cuda-cccl==13.3.5.0.6": f"nvidia_cuda_cccl-13.3.5.0.6-py3-none-{_MANY}",
}


def _wheels(table: dict[str, str]) -> list[Path]:
    out = []
    for req, filename in table.items():
        project, _, version = req.partition("==")
        out.append(real_wheel(project, version, filename))
    return out


def wheel_paths() -> list[Path]:
    """The three wheels in the test cache, downloaded when absent (the test fails, saying why,
    when PyPI cannot be reached)."""
    return _wheels(WHEELS)


def sglang_venv() -> Path:
    """The venv (built once per wheel set, under a lock shared by concurrent sessions)."""
    return wheel_venv("sglang-0.5.23", wheel_paths(), system_site_packages=False)


def stack_venv() -> Path:
    """sglang 0.5.23's released stack (all its compiled and JIT packages, --no-deps) beside the
    suite's torch 2.13.0+cpu (the wrong torch: sglang and sglang-kernel pin 2.14.1) and the
    mismatched CUDA 13 pip pieces (`STACK_WHEELS`)."""
    return wheel_venv(
        "sglang-stack-0.5.23", wheel_paths() + _wheels(STACK_WHEELS), system_site_packages=True
    )


def site_packages(venv: Path) -> Path:
    """The venv's site-packages directory."""
    found = sorted(venv.glob("lib/python3*/site-packages"))
    assert found, f"no site-packages under {venv}"
    return found[0]
