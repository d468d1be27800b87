"""The CUDA math and runtime-compilation libraries a package's build needs from the toolkit.

A full CUDA toolkit (runfile, or NVIDIA's apt meta packages) carries them all. The pip route's
three wheels (nvidia-cuda-nvcc, -runtime, -cccl) do not: they are enough for the sample kernel
and for nvcc itself, not for a build that includes ATen's CUDA headers or links cuBLAS. What
needs what (checked against the real files):

- torch 2.13.0's ``ATen/cuda/CUDAContextLight.h`` (reached from ``ATen/cuda/CUDAContext.h``)
  includes ``cusparse.h``, ``cublas_v2.h``, ``cublasLt.h`` and ``cusolverDn.h`` (`ATEN_CUDA`);
- each package's own needs are in its descriptor (`PackageDescriptor.cuda_libraries`, with
  the evidence beside it).

Headers are looked for in ``<cuda_home>/include`` (and ``targets/*/include``), libraries as the
unversioned ``.so`` a ``-l`` link needs in ``lib64``/``lib`` (and ``targets/*/lib``): the facts
probe reports which components a toolkit has (``remote/lib/cudalibs.py`` holds the files).
On the pip route the tool adds the missing ones with NVIDIA's ``cuda-toolkit`` meta package at
the toolkit's exact release (``cuda-toolkit[cublas,nvrtc,...]==13.0.2`` pins each component
to the version that release ships).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# ATEN_CUDA is defined with the descriptors that name it, which must not import this module.
from ..packages.base import ATEN_CUDA, PackageDescriptor
from ..remote.lib.cudalibs import COMPONENT_FILES

__all__ = [
    "ATEN_CUDA",
    "COMPONENTS",
    "Component",
    "describe",
    "meta_requirement",
    "needed",
    "package_needs",
]


@dataclass(frozen=True)
class Component:
    """One library of the toolkit: its files, and its extra of NVIDIA's cuda-toolkit package."""

    name: str  # the cuda-toolkit extra, e.g. "cublas"
    title: str  # for people, e.g. "cuBLAS/cuBLASLt"
    headers: tuple[str, ...]
    libs: tuple[str, ...]  # unversioned names, as `-lcublas` and FindCUDAToolkit look them up


_TITLES = {
    "cublas": "cuBLAS/cuBLASLt",
    "cusparse": "cuSPARSE",
    "cusolver": "cuSOLVER",
    "curand": "cuRAND",
    "nvrtc": "NVRTC",
}

#: The files come from the table the facts probe uses (remote/lib/cudalibs.py).
COMPONENTS: dict[str, Component] = {
    name: Component(name, _TITLES[name], headers, libs)
    for name, (headers, libs) in COMPONENT_FILES.items()
}


def package_needs(desc: PackageDescriptor) -> tuple[str, ...]:
    """The components a build by descriptor `desc` needs with a CUDA torch."""
    return desc.cuda_libraries


def needed(packages: Iterable[PackageDescriptor]) -> tuple[str, ...]:
    """The components the builds of `packages` (their descriptors) need, in table order."""
    want = {c for p in packages for c in package_needs(p)}
    return tuple(name for name in COMPONENTS if name in want)


def describe(names: Iterable[str]) -> str:
    """``cuBLAS/cuBLASLt, NVRTC`` for people."""
    return ", ".join(COMPONENTS[n].title for n in names)


def meta_requirement(names: Iterable[str], version: str) -> str:
    """NVIDIA's meta package pinning each component to release `version`, e.g.
    ``cuda-toolkit[cublas,nvrtc]==13.0.2``."""
    return f"cuda-toolkit[{','.join(names)}]=={version}"
