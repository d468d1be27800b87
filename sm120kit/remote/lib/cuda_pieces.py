"""Every CUDA toolchain piece a Python env holds, by distribution and version, and whether
their CUDA minors are mixed.

pip resolves each CUDA piece on its own: torch 2.14.1's cuda-toolkit 13.0.3.0 pins
nvidia-cuda-runtime 13.0.96 (CUDA 13.0's headers and cudart) and nvidia-cuda-nvrtc 13.0.88,
while humming-kernels[cu13] 0.1.12 requires nvidia-cuda-nvcc unpinned, which brings nvcc
13.5.37 (and nvidia-cuda-crt, nvidia-nvvm 13.5.37) into the same ``site-packages/nvidia/cu13``.
Nothing fails at install; a compile that takes that nvcc with those headers stops at CCCL's
``cuda_toolkit.h`` ``#error`` (``jit_toolchain.py`` judges each JIT package's real pair). This
check names every piece, so a mix is seen even where no JIT package's lookup reaches it.

Which distributions are versioned by the CUDA release (major.minor = the toolkit's): the
components cuda-toolkit 13.0.3.0's METADATA pins at 13.0.x (``nvidia-cuda-nvcc==13.0.88.*``,
``nvidia-cuda-runtime==13.0.96.*``, ``nvidia-cuda-cccl==13.0.85.*``, ...; ``nvidia-nvjitlink``
as ``>=13.0.88,<14``). Its math libraries carry their own versions (nvidia-cublas 13.1.1.3,
nvidia-cufft 12.0.0.61 in CUDA 13.0) and are not compared. CUDA 12's wheels carry a ``-cu12``
suffix (``nvidia-cuda-nvcc-cu12``).

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any

from sm120kit.remote.lib.names import dist_name

#: Distribution (suffix ``-cu12``/``-cu13`` dropped) -> what it is.
PIECES = {
    "cuda-toolkit": "the CUDA toolkit metapackage",
    "nvidia-cuda-nvcc": "nvcc",
    "nvidia-cuda-crt": "nvcc's crt headers",
    "nvidia-nvvm": "NVVM (cicc)",
    "nvidia-cuda-runtime": "cudart and cuda_runtime_api.h",
    "nvidia-cuda-nvrtc": "NVRTC",
    "nvidia-nvjitlink": "nvJitLink",
    "nvidia-nvptxcompiler": "the PTX compiler library",
    "nvidia-nvfatbin": "nvFatbin",
    "nvidia-cuda-cccl": "CCCL headers",
    "nvidia-cuda-culibos": "culibos",
    "nvidia-cuda-cuxxfilt": "cu++filt",
    "nvidia-cuda-cupti": "CUPTI",
    "nvidia-cuda-profiler-api": "the profiler API",
    "nvidia-cuda-sanitizer-api": "the sanitizer API",
    "nvidia-cuda-opencl": "OpenCL",
    "nvidia-nvml-dev": "NVML headers",
    "nvidia-nvtx": "NVTX",
}
#: The pair whose mix stops a compile: the compiler, and the headers it compiles against.
COMPILER = "nvidia-cuda-nvcc"
HEADERS = "nvidia-cuda-runtime"


def piece_name(distribution: str) -> str | None:
    """The `PIECES` key of a distribution name (any spelling, ``-cu12`` suffix), or None."""
    base = re.sub(r"-cu1\d$", "", dist_name(distribution))
    return base if base in PIECES else None


def minor_of(version: str | None) -> str | None:
    """``13.5`` from ``13.5.37`` (None when not a version)."""
    m = re.match(r"^(\d+)\.(\d+)", version or "")
    return f"{m.group(1)}.{m.group(2)}" if m else None


def installed_pieces(sys_path: list[str]) -> list[dict[str, Any]]:
    """``[{"distribution", "version", "cuda", "what"}]`` of the pieces installed on `sys_path`
    (from the ``.dist-info`` names), by name; the first of a name on the path wins."""
    found: dict[str, dict[str, Any]] = {}
    for entry in sys_path:
        for info in sorted(glob.glob(os.path.join(entry, "*.dist-info"))):
            dist, _, version = os.path.basename(info)[: -len(".dist-info")].partition("-")
            key = piece_name(dist)
            if key is None or dist_name(dist) in found:
                continue
            found[dist_name(dist)] = {
                "distribution": dist_name(dist),
                "version": version,
                "cuda": minor_of(version),
                "what": PIECES[key],
            }
    return [found[k] for k in sorted(found)]


def judge_pieces(
    pieces: list[dict[str, Any]], torch_version: str | None, torch_cuda: str | None
) -> dict[str, Any]:
    """The ``cuda_toolchain`` check: every piece named, ``warn`` naming both sides when their
    CUDA minors differ (the compiler against the headers first), ``pass`` when they are one
    minor, ``skip`` when the env has none."""
    rows = list(pieces)
    if torch_cuda:
        rows.append({"distribution": "torch", "version": torch_version, "cuda": minor_of(torch_cuda),
                     "what": f"built with CUDA {torch_cuda}"})  # fmt: skip
    details: dict[str, Any] = {"pieces": rows}
    if not pieces:
        return {"check": "cuda_toolchain", "status": "skip",
                "reason": "no CUDA toolchain distribution in this env", "details": details}  # fmt: skip
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["cuda"] or "?", []).append(row)

    def label(row: dict[str, Any]) -> str:
        return f"{row['distribution']} {row['version']}"

    listed = "; ".join(
        "{}: {}".format(cuda, ", ".join(label(r) for r in members))
        for cuda, members in sorted(groups.items())
    )
    details["minors"] = sorted(groups)
    if len(groups) == 1:
        return {"check": "cuda_toolchain", "status": "pass",
                "reason": f"one CUDA minor: {listed}", "details": details}  # fmt: skip
    by_name = {r["distribution"]: r for r in rows}
    compiler = next((r for n, r in by_name.items() if piece_name(n) == COMPILER), None)
    headers = next((r for n, r in by_name.items() if piece_name(n) == HEADERS), None)
    if compiler and headers and compiler["cuda"] != headers["cuda"]:
        first, second = compiler, headers
        why = (
            f"{label(first)} ({first['what']}, CUDA {first['cuda']}) beside {label(second)} "
            f"({second['what']}, CUDA {second['cuda']}): a compile with this nvcc and these "
            "headers stops at CCCL's #error"
        )
    else:
        ref = headers or by_name.get("torch") or rows[0]
        first = next(r for r in rows if r["cuda"] != ref["cuda"])
        second = ref
        why = (
            f"{label(first)} ({first['what']}, CUDA {first['cuda']}) beside {label(second)} "
            f"({second['what']}, CUDA {second['cuda']})"
        )
    details["mixed"] = [first["distribution"], second["distribution"]]
    return {"check": "cuda_toolchain", "status": "warn",
            "reason": f"CUDA minors are mixed: {why}; {listed}", "details": details}  # fmt: skip
