"""CMake defines of a scikit-build-core build, as a configure outside pip must reproduce them:
the ``-Ccmake.define.X=Y`` arguments a build passes, what scikit-build-core adds itself, what
points FetchContent at local trees, and what a CUDA torch would define that a CPU torch does not.

Package-independent: what one package's CMake build does (its targets and gencodes) is its
descriptor's business (`sm120kit.packages`).
"""

from __future__ import annotations

from collections.abc import Iterable


def defines_from_pip_args(pip_args: Iterable[str]) -> dict[str, str]:
    """The ``-Ccmake.define.X=Y`` arguments as a dict (what CMake gets as ``-DX=Y``)."""
    out: dict[str, str] = {}
    for arg in pip_args:
        if arg.startswith("-Ccmake.define."):
            name, _, value = arg[len("-Ccmake.define.") :].partition("=")
            out[name] = value
    return out


def fetchcontent_defines(dirs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """``FETCHCONTENT_SOURCE_DIR_<NAME>`` per (FetchContent name, absolute path), plus
    ``FETCHCONTENT_FULLY_DISCONNECTED=ON``. CMake upper-cases the name and keeps dashes."""
    out = {f"FETCHCONTENT_SOURCE_DIR_{name.upper()}": path for name, path in dirs}
    out["FETCHCONTENT_FULLY_DISCONNECTED"] = "ON"
    return out


def skbuild_defines(python: str, torch_cmake_dir: str, cuda_home: str) -> dict[str, str]:
    """What scikit-build-core (with a pyproject asking for cp310 abi3 and Release, as the
    CMake-built packages' do) adds to a configure; a configure outside pip needs them to see
    the same build."""
    return {
        "CMAKE_BUILD_TYPE": "Release",
        "SKBUILD_SABI_COMPONENT": "Development.SABIModule",
        "SKBUILD_SABI_VERSION": "3.10",
        "Python_EXECUTABLE": python,
        "Python3_EXECUTABLE": python,
        "Torch_DIR": torch_cmake_dir,
        "CMAKE_CUDA_COMPILER": f"{cuda_home}/bin/nvcc",
        "CMAKE_EXPORT_COMPILE_COMMANDS": "ON",
    }


def cpu_torch_defines(cuda_version: str, cuda_home: str, extra_include: str = "") -> dict[str, str]:
    """What a CUDA build of torch would provide and a CPU torch does not (configure only:
    a full build needs the CUDA torch). `extra_include` holds cuBLAS/cuSPARSE/... headers
    when the toolkit lacks them."""
    cuda_flags = "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE"
    if extra_include:
        cuda_flags += f" -isystem {extra_include}"
    # A runfile toolkit keeps its headers under targets/<arch>/include, the PyPI one under
    # include/; a directory that does not exist costs nothing.
    cxx = cuda_flags
    for inc in (f"{cuda_home}/targets/x86_64-linux/include", f"{cuda_home}/include"):
        cxx += f" -isystem {inc} -isystem {inc}/cccl"
    return {
        "CUDA_VERSION": cuda_version,
        "CMAKE_CUDA_ARCHITECTURES": "OFF",
        "CMAKE_CUDA_FLAGS": cuda_flags,
        "CMAKE_CXX_FLAGS": cxx,
    }


__all__ = ["cpu_torch_defines", "defines_from_pip_args", "fetchcontent_defines", "skbuild_defines"]
