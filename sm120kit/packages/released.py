"""The serving stack's packages the tool installs from releases and never builds: descriptors
that do not build (no `kind`, no `knobs`).

What their released wheels carry (each module's device code, the CUDA runtime it links, the
files that look up a CUDA toolchain) is in the release catalogues (``locks/*/catalogue.toml``),
read from the wheels. What is written here is only what reading the wheel's bytes cannot
decide: which toolchain lookup rule (``remote/lib/jit_toolchain.RULES``) a package that
compiles CUDA code at run time follows, each citing the package's own files it was read from
(docs/stack-facts.md section 8 lists the releases read).
"""

from __future__ import annotations

from .base import PackageDescriptor

DESCRIPTORS = (
    # vLLM's own compiled modules (vllm/_C, _moe_C, vllm_flash_attn/_vllm_fa2_C, ...): their
    # device code is the catalogue's (locks/vllm-0.33.0/catalogue.toml); the engine itself is
    # sm120kit/engines.py's.
    PackageDescriptor("vllm", serving=True),
    # Their modules' device code (FlashMLA has no 12.0 code; DeepEP keeps sm_120 only as
    # relocatable device code) is the catalogue's, read from the wheels.
    PackageDescriptor("sgl-flash-mla", serving=True),
    PackageDescriptor("sgl-deep-ep", serving=True),
    # deep_gemm/_C.so holds no device code: its kernels are compiled at run time.
    PackageDescriptor(
        "sgl-deep-gemm",
        serving=True,
        jit="deep-gemm",
        jit_source="deep_gemm/cuda_helpers.py find_cuda_home(); deep_gemm/__init__.py _C.init; "
        "deep_gemm/build_ext.py include dirs (sgl-deep-gemm 0.2.3.post2)",
    ),
    PackageDescriptor(
        "flashinfer-python",
        serving=True,
        jit="flashinfer",
        jit_source="flashinfer/jit/cpp_ext.py get_cuda_path(), generate_ninja_build_for_op(); "
        "flashinfer/compilation_context.py _normalize_cuda_arch() (flashinfer-python 0.7.2)",
    ),
    PackageDescriptor(
        "flash-attn-4",
        serving=True,
        jit="cute-dsl",
        jit_source="Requires-Dist nvidia-cutlass-dsl>=4.6.2, no nvcc or CUDA_HOME lookup in its "
        "sources; flash_attn/cute/cute_dsl_ptxas.py runs CUTE_DSL_PTXAS_PATH (flash-attn-4 "
        "4.0.0b36)",
    ),
    PackageDescriptor(
        "quack-kernels",
        serving=True,
        jit="cute-dsl",
        jit_source="Requires-Dist nvidia-cutlass-dsl>=4.7, no nvcc or CUDA_HOME lookup in its "
        "sources (quack-kernels 0.6.5)",
    ),
    PackageDescriptor(
        "tilelang",
        serving=True,
        jit="tilelang",
        jit_source="tilelang/env.py _find_cuda_home(); tilelang/contrib/nvcc.py "
        "get_nvcc_compiler(), -I<home>/include (tilelang 0.1.12)",
    ),
    PackageDescriptor(
        "humming-kernels",
        serving=True,
        jit="humming",
        jit_source="humming/utils/cuda.py find_all_cuda_paths(), filter_cuda_paths(); "
        "humming/jit/compiler.py; humming/jit/runtime.py _get_compiler() (humming-kernels 0.1.12)",
    ),
)
