"""sgl-kernel (sglang's sgl-kernel, the ``sglang-kernel`` wheel): a scikit-build-core build of
upstream's CMake.

Its CMake hard-codes its gencode list; only its CMake options can drop targets
(``-Ccmake.define.X=Y``): ``ENABLE_BELOW_SM90`` upstream, ``SGL_KERNEL_ONLY_ARCHS`` with
patches/sgl-kernel/0002-cmake-sm-only-build.patch (the SM-only build), plus
``SGL_KERNEL_COMPILE_THREADS`` (nvcc --threads) and the env's ``CMAKE_BUILD_PARALLEL_LEVEL``.
What its CMake build does, known before a configure, is in `sgl_kernel_cmake`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import RecipeError
from ..remote.lib.arch import Arch
from .base import (
    ATEN_CUDA,
    KnobRequest,
    Knobs,
    PackageDescriptor,
    plan_parallelism,
)
from .sgl_kernel_cmake import predict_targets

NAME = "sgl-kernel"

#: The SM-only build's CMake option, and the patch that adds it (docs/sgl-kernel.md).
ONLY_ARCHS = "SGL_KERNEL_ONLY_ARCHS"
SM_ONLY_PATCH = "patches/sgl-kernel/0002-cmake-sm-only-build.patch"

#: The PyPI name from 0.4.0 on; sgl-kernel itself stops at 0.3.21. The import package is still
#: ``sgl_kernel`` (the sglang-kernel 0.4.10 wheel's top_level).
DISTRIBUTIONS = ("sglang-kernel",)

# What its released wheels carry (each module's device code, and the per-arch directory its
# own loader, sgl_kernel/load_utils.py, picks) is not written here: locks/*/catalogue.toml
# holds it, read from the wheels.

#: sgl-kernel 0.3.21's CUTLASS GEMM units: in the by-hand SM-only build (docs/sgl-kernel.md)
#: one cicc of csrc/gemm/fp8_blockwise_gemm_kernel.cu for sm_120a alone, nvcc --threads=1,
#: reached 15.8 GB peak RSS and was killed by the OOM killer at 12.6 GB anonymous RSS beside a
#: second job on a 24 GB host; nvfp4_scaled_mm_kernels.cu's cicc took 7.5-8.1 GB. At 4 GB per
#: thread a 24 GB host ran two such jobs and lost the build after 74 minutes.
SGL_KERNEL_GB_PER_NVCC_THREAD = 16.0

#: Under CUDA >= 13.0 on x86_64, with below-SM90 code off, both trees the recipes pin compile
#: each common_ops file for sm_90, sm_100a, sm_120a, sm_103a and sm_90a (CMakeLists.txt of
#: sgl-kernel/ at sglang c86ca128, 0.3.21; of python/sglang/kernels/aot/ at d9632eb7, where
#: sm_90a comes with FA3); nvcc --threads splits work per gencode target, so more threads than
#: that gain nothing.
SGL_KERNEL_NVCC_THREADS = 5


def sm_only_archs(archs: list[Arch]) -> str:
    """``SGL_KERNEL_ONLY_ARCHS`` for an arch list: sgl-kernel's own spelling, one ``<sm>a``
    (architecture-specific SASS, as its CMake's ``compute_120a,code=sm_120a``) per arch;
    an explicit ``f`` suffix is kept."""
    out: list[str] = []
    for arch in archs:
        code = f"{arch.sm}{arch.suffix or 'a'}"
        if code not in out:
            out.append(code)
    return ",".join(out)


def sgl_kernel_knobs(knobs: Knobs, req: KnobRequest) -> None:
    """The SM-only and below-SM90 switches, nvcc threads, parallel jobs and CMake defines."""
    archs, cpus, mem, gb, mem_what = (
        req.archs,
        req.cpus,
        req.mem_bytes,
        req.gb_per_thread,
        req.mem_what,
    )
    given, origin = req.given, req.origin
    defines: dict[str, Any] = req.overrides.pop("cmake_defines", None) or {}
    sm_only = req.switches.get("sm120_only")
    tree = req.tree
    release = f"sgl-kernel {tree.version or req.patch_version}".strip()
    knobs.note(
        "arch list",
        ";".join(str(a) for a in archs),
        f"{release}'s CMakeLists.txt hard-codes its gencodes per CUDA version and clears "
        "TORCH_CUDA_ARCH_LIST; only its options can drop targets (the targets rows say which "
        "gencodes each one gets)",
    )
    all_12 = all(a.major == 12 for a in archs)
    if sm_only is None:
        sm_only = all_12
        why = "default for an arch list of 12.x only"
    else:
        why = f"knob sm120_only = {str(sm_only).lower()}"
    # SGL_KERNEL_ONLY_ARCHS is this tool's option, added by an SM-only patch: no upstream
    # CMakeLists.txt reads it, so without such a patch the define would claim an SM-only
    # build while upstream builds every target.
    unpatched = req.patch_options is not None and ONLY_ARCHS not in req.patch_options
    if sm_only and unpatched:
        if req.switches.get("sm120_only"):
            raise RecipeError(
                f"package {req.package}: knob sm120_only = true needs a patch that adds "
                f"{ONLY_ARCHS}; {release}'s recipe entry lists none, so its CMake would "
                "build every target"
            )
        knobs.note(
            "-Ccmake.define." + ONLY_ARCHS,
            "(not set)",
            f"upstream's full build: no patch of {release}'s recipe entry adds {ONLY_ARCHS} "
            "and upstream's CMake has no such option",
        )
        sm_only = False
    elif sm_only:
        only = sm_only_archs(archs)
        patch, doc = tree.options.get(ONLY_ARCHS, ("an SM-only patch", ""))
        knobs.define(
            ONLY_ARCHS,
            only,
            f"SM-only build ({why}; {patch} adds it): "
            + (doc or f"every -gencode of the package's own targets becomes one per arch of {only}")
            + f" ({only} here)",
        )
    else:
        knobs.note(
            "-Ccmake.define." + ONLY_ARCHS,
            "(not set)",
            f"upstream's full build ({why}): every target and gencode of {release}'s "
            "CMakeLists.txt",
        )
    if not sm_only and tree.no_full_build:
        raise RecipeError(
            f"package {req.package}: upstream's full build of {release} ({why}) is not "
            f"pinned: {tree.no_full_build} (build for 12.x archs only)"
        )
    if all(a.sm >= 90 for a in archs):
        knobs.define(
            "ENABLE_BELOW_SM90",
            "OFF",
            "no arch below 9.0 in the list: skips the sm_80/sm_89 code in every file",
        )
    else:
        knobs.note(
            "-Ccmake.define.ENABLE_BELOW_SM90",
            "(default ON)",
            "the arch list has an arch below 9.0",
        )
    for option, reason in tree.not_set.items():
        knobs.note("-Ccmake.define." + option, "(not set)", f"{reason} (recipe entry)")
    knobs.note(
        "MAX_JOBS",
        "(not set)",
        "its CMakeLists.txt does not read it; CMAKE_BUILD_PARALLEL_LEVEL bounds the jobs",
    )
    # CMake 4 refuses a project declaring cmake_minimum_required below 3.5 unless this floor
    # is set; only a dependency the build configures itself (the entry records its VERSION)
    # can bring one in.
    old = [s for s in tree.subprojects if _version_below(s[2], "3.5")]
    if old:
        knobs.define(
            "CMAKE_POLICY_VERSION_MINIMUM",
            "3.5",
            "; ".join(
                f"{d} ({r[:12]}) declares cmake_minimum_required(VERSION {v})" for d, r, v in old
            )
            + ", which CMake 4 refuses without it (recipe entry's dependencies)",
        )
    threads = given("SGL_KERNEL_COMPILE_THREADS")
    jobs = given("CMAKE_BUILD_PARALLEL_LEVEL") or given("MAX_JOBS")
    gencodes = len(sm_only_archs(archs).split(",")) if sm_only else SGL_KERNEL_NVCC_THREADS
    plan = plan_parallelism(
        cpus,
        mem,
        threads_default=gencodes,
        gb_per_thread=gb,
        jobs_override=jobs,
        threads_override=threads,
    )
    knobs.define(
        "SGL_KERNEL_COMPILE_THREADS",
        plan.threads,
        origin("SGL_KERNEL_COMPILE_THREADS")
        if threads
        else f"nvcc --threads (upstream default 32 OOMs small hosts); one per gencode target "
        f"({gencodes}) at most, capped by CPUs and memory ({plan.reason})",
    )
    reason = (
        origin("CMAKE_BUILD_PARALLEL_LEVEL")
        if jobs
        else f"parallel compile jobs = min(cpus{' // 2' if plan.threads > 1 else ''}, "
        f"threads in flight // SGL_KERNEL_COMPILE_THREADS) ({plan.reason}, {mem_what})"
    )
    knobs.set_env("CMAKE_BUILD_PARALLEL_LEVEL", plan.jobs, reason)
    for name, value in defines.items():
        knobs.define(str(name), value, origin(f"cmake_defines.{name}"))


def _version_below(version: str, floor: str) -> bool:
    return tuple(int(x) for x in version.split(".")) < tuple(int(x) for x in floor.split("."))


def sgl_kernel_targets(
    version: str, cuda: str, defines: Mapping[str, str]
) -> dict[str, list[str]] | None:
    """Targets and their SASS from the SM-only and below-SM90 defines (sgl_kernel_cmake.py)."""
    return predict_targets(
        version,
        cuda,
        defines.get("SGL_KERNEL_ONLY_ARCHS", ""),
        defines.get("ENABLE_BELOW_SM90", "ON") != "OFF",
    )


SGL_KERNEL = PackageDescriptor(
    name=NAME,
    kind=NAME,
    knobs=sgl_kernel_knobs,
    front_end="scikit-build-core",
    arch_knob="SGL_KERNEL_ONLY_ARCHS",
    threads_knob="SGL_KERNEL_COMPILE_THREADS",
    oom_job_knobs=("CMAKE_BUILD_PARALLEL_LEVEL", "MAX_JOBS"),
    oom_thread_defines=("SGL_KERNEL_COMPILE_THREADS",),
    gb_per_nvcc_thread=SGL_KERNEL_GB_PER_NVCC_THREAD,
    switches=("sm120_only",),
    cmake_defines=True,
    cmake_checked=True,
    # With a CUDA torch, ATen's CUDA headers (cuda_libraries.ATEN_CUDA); sgl-kernel 0.3.21
    # (sglang c86ca128) links cublas cublasLt into common_ops (CMakeLists.txt lines 421-422)
    # and nvrtc into deep_gemm_cpp (line 555, which CMake's FindCUDAToolkit resolves through
    # CUDA_nvrtc_LIBRARY: without libnvrtc the configure stops with "CUDA_nvrtc_LIBRARY ...
    # set to NOTFOUND"), and flashinfer's sampling.cuh, compiled into common_ops, includes
    # curand_kernel.h.
    cuda_libraries=(*ATEN_CUDA, "curand", "nvrtc"),
    smoke_by_default=True,
    build_task="Build sgl-kernel for the recipe's arch (CMake defines, SM120 loader patch).",
    predict_targets=sgl_kernel_targets,
    # common_ops, built once per variant directory, is what the loader imports.
    arch_targets=("common_ops_sm90_build", "common_ops_sm100_build"),
    distributions=DISTRIBUTIONS,
    serving=True,
)

DESCRIPTORS = (SGL_KERNEL,)
