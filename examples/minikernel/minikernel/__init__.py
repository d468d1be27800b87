"""minikernel: one CUDA kernel as a torch extension, sm120kit's probe of a build toolchain.

``add_one(t)`` runs the kernel on a GPU; ``arch_list()`` says which archs the extension was
compiled for; ``cuda_runtime_status()`` asks the linked CUDA runtime what it sees.
"""

from __future__ import annotations

from typing import Any

# torch first: _C needs libc10/libtorch loaded (it may carry no RPATH into torch/lib).
import torch

from . import _C  # type: ignore[attr-defined]  # the compiled extension

__version__ = "0.1.0"


def arch_list() -> list[str]:
    """The TORCH_CUDA_ARCH_LIST entries the extension was built for, e.g. ``["12.0"]``."""
    return [entry for entry in str(_C.ARCH_LIST).split(";") if entry]


def build_info() -> dict[str, str]:
    """How the extension was built: archs, nvcc -gencode flags, nvcc and torch versions."""
    return {
        "arch_list": str(_C.ARCH_LIST),
        "gencode_flags": str(_C.GENCODE_FLAGS),
        "nvcc_version": str(_C.NVCC_VERSION),
        "torch_version": str(_C.TORCH_VERSION),
        "cudart": str(_C.CUDART),
    }


def cuda_runtime_status() -> dict[str, Any]:
    """``{"device_count", "error", "runtime_version"}`` from the CUDA runtime linked in."""
    return dict(_C.cuda_runtime_status())


def add_one(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor + 1`` computed by minikernel's CUDA kernel (float32, on the tensor's GPU).

    Raises RuntimeError when torch sees no GPU, and ValueError for a tensor not on a GPU.
    """
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"minikernel.add_one needs an NVIDIA GPU, and torch {torch.__version__} sees none "
            f"(torch CUDA: {torch.version.cuda or 'none, a CPU-only build'}; minikernel was "
            f"built for {', '.join(arch_list())})"
        )
    if not tensor.is_cuda:
        raise ValueError(f"minikernel.add_one: the tensor is on {tensor.device}, not on a GPU")
    out = tensor.to(torch.float32).contiguous().clone()
    with torch.cuda.device(out.device):
        stream = torch.cuda.current_stream(out.device).cuda_stream
        _C.add_one_(out, stream)
    return out


__all__ = ["add_one", "arch_list", "build_info", "cuda_runtime_status"]
