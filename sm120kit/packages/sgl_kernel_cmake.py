"""What sgl-kernel's CMake build does, known before a configure: its targets and gencodes
(the data behind its descriptor's `predict_targets` and `arch_targets`, packages/sgl_kernel.py).

`predict_targets` mirrors, per version, the tree its recipe entry pins plus that entry's SM-only
patch: for 0.3.21 CMakeLists.txt and cmake/flashmla.cmake of sgl-kernel/ at sglang commit
c86ca12875bbdea8f39267f02a0d55c68ea99d8e (patches/sgl-kernel/0002-cmake-sm-only-build.patch);
for 0.4.10 CMakeLists.txt of python/sglang/kernels/aot/ at sglang d9632eb7, the closest tree
read (patches/sgl-kernel/0003-cmake-sm-only-build-aot.patch; its cmake/flashmla.cmake was not
read there, so flashmla_ops' SASS is the released 0.4.10 wheel's, locks/sglang-0.5.23's
catalogue). It is the dry-run answer of ``--explain``.
Where the tree is present, `sm120kit.remote.cmake_probe` configures it and reads the real
compile commands instead (see docs/sgl-kernel.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from packaging.version import InvalidVersion, Version

#: Versions `predict_targets` knows the CMake of.
KNOWN_VERSIONS = ("0.3.21", "0.4.10")

#: The targets that compile CUDA code for the package's own gencode list.
OWN_TARGETS = ("common_ops_sm90_build", "common_ops_sm100_build", "spatial_ops")


def _ge(cuda: str, floor: str) -> bool:
    try:
        return Version(cuda) >= Version(floor)
    except InvalidVersion:
        return False


def _gt(cuda: str, floor: str) -> bool:
    try:
        return Version(cuda) > Version(floor)
    except InvalidVersion:
        return False


def upstream_gencodes(cuda: str, below_sm90: bool = True) -> list[str]:
    """SGL_KERNEL_CUDA_FLAGS' SASS targets at 0.3.21 on x86_64, in the order CMake adds them."""
    codes = ["sm_90"]
    if below_sm90:
        codes += ["sm_80", "sm_89"]
    if _ge(cuda, "12.8"):
        codes += ["sm_100a", "sm_120a"]
        if _ge(cuda, "13.0"):
            codes.append("sm_103a")
    if _ge(cuda, "12.4"):
        codes.append("sm_90a")
    return codes


def predict_targets(
    version: str, cuda: str, only_archs: str = "", below_sm90: bool = True
) -> dict[str, list[str]] | None:
    """Target -> SASS targets it compiles (x86_64), or None for a version this does not know.

    `cuda` is the CUDA version CMake sees as ``CUDA_VERSION`` (torch's CUDA build);
    `only_archs` is ``SGL_KERNEL_ONLY_ARCHS`` ("" = the upstream build). deep_gemm_cpp (one
    .cpp) and the non-CUDA targets of mscclpp, nanobind and dlpack compile no device code.
    """
    if version not in KNOWN_VERSIONS:
        return None
    if version == "0.4.10":
        return _aot_targets(cuda, only_archs, below_sm90)
    if only_archs:
        own = [f"sm_{a}" for a in only_archs.split(",") if a]
    else:
        own = upstream_gencodes(cuda, below_sm90)
    targets: dict[str, list[str]] = {}
    if not only_archs:
        targets["common_ops_sm90_build"] = list(own)
    targets["common_ops_sm100_build"] = list(own)
    targets["spatial_ops"] = list(own)
    if not only_archs and _ge(cuda, "12.4"):
        targets["flash_ops"] = ["sm_90a"] + (["sm_80", "sm_86"] if below_sm90 else [])
    if not only_archs:
        mla = (["sm_90a"] if _gt(cuda, "12.4") else []) + (["sm_100a"] if _gt(cuda, "12.8") else [])
        targets["flashmla_ops"] = mla
    # mscclpp's CMakeLists sets CMAKE_CUDA_ARCHITECTURES to 80, plus 90 for CUDA >= 12.
    mscclpp = ["sm_80"] + (["sm_90"] if _ge(cuda, "12.0") else [])
    targets["mscclpp_obj"] = mscclpp
    targets["mscclpp_nccl_obj"] = list(mscclpp)
    return targets


def _aot_targets(cuda: str, only_archs: str, below_sm90: bool) -> dict[str, list[str]]:
    """The targets of python/sglang/kernels/aot/CMakeLists.txt at sglang d9632eb7 (x86_64):
    FA3 is an option there, ON by default for CUDA >= 12.4, and adds sm_90a to every own
    target; infllm_ops has its own list (sm_80 unless below-SM90 is off, sm_90, sm_120a with
    CUDA >= 12.8); no mscclpp or DeepGEMM."""
    fa3 = not only_archs and _ge(cuda, "12.4")
    if only_archs:
        own = [f"sm_{a}" for a in only_archs.split(",") if a]
        infllm = list(own)
    else:
        own = ["sm_90"] + (["sm_80", "sm_89"] if below_sm90 else [])
        if _ge(cuda, "12.8"):
            own += ["sm_100a", "sm_120a"] + (["sm_103a"] if _ge(cuda, "13.0") else [])
        own += ["sm_90a"] if fa3 else []
        infllm = (["sm_80"] if below_sm90 else []) + ["sm_90"]
        infllm += ["sm_120a"] if _ge(cuda, "12.8") else []
    targets: dict[str, list[str]] = {}
    if not only_archs:
        targets["common_ops_sm90_build"] = list(own)
    targets["common_ops_sm100_build"] = list(own)
    if fa3:
        targets["flash_ops"] = ["sm_90a"] + (["sm_80", "sm_86"] if below_sm90 else [])
    targets["infllm_ops"] = infllm
    targets["spatial_ops"] = list(own)
    if not only_archs:
        mla = (["sm_90a"] if _gt(cuda, "12.4") else []) + (["sm_100f"] if _gt(cuda, "12.8") else [])
        targets["flashmla_ops"] = mla + (["sm_103a"] if _ge(cuda, "13.0") else [])
    return targets


def missing_arch(targets: dict[str, list[str]], want: Iterable[str]) -> list[str]:
    """The wanted SASS targets (``sm_120a``) that no common_ops build carries."""
    have = set()
    for name in ("common_ops_sm90_build", "common_ops_sm100_build"):
        have.update(targets.get(name) or [])
    return [w for w in want if w not in have]


__all__ = [
    "KNOWN_VERSIONS",
    "OWN_TARGETS",
    "missing_arch",
    "predict_targets",
    "upstream_gencodes",
]
