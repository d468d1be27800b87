"""Why a wheel build failed, from its log: the kind of failure and what to do about it.

Both sides use this module: remote/build_wheel.py on hosts (bundled with it) and the
controller (`sm120kit.builds.knobs.classify_build_failure`). Stdlib only.
"""

from __future__ import annotations

import re

#: Settings that bound a build's memory, in the order advice should name them.
PARALLEL_KNOBS = (
    "MAX_JOBS",
    "NVCC_THREADS",
    "SGL_KERNEL_COMPILE_THREADS",
    "CMAKE_BUILD_PARALLEL_LEVEL",
)

# (kind, compiled pattern). Order matters: the environmental causes come first because a
# missing toolkit or a version clash explains every later error in the log.
FAILURE_PATTERNS = [
    (
        "cuda_home_missing",
        re.compile(
            r"CUDA_HOME environment variable is not set"
            r"|nvcc: (?:command )?not found"
            r"|No such file or directory: '[^']*/bin/nvcc'"
            r"|Failed to find nvcc"
            r"|No CMAKE_CUDA_COMPILER could be found"
            r"|Could NOT find CUDAToolkit"
        ),
    ),
    (
        "torch_cuda_mismatch",
        re.compile(
            r"The detected CUDA version \([^)]*\) mismatches the version that was used to "
            r"compile\s+PyTorch"
        ),
    ),
    (
        "nvcc_too_old_for_arch",
        re.compile(
            r"Unsupported gpu architecture '(?:compute|sm)_1[2-9]\d[af]?'"
            r"|Value '(?:sm|compute)_1[2-9]\d[af]?' is not defined for option 'gpu-name'"
        ),
    ),
    (
        "oom",
        re.compile(
            r"Killed signal terminated program"
            r"|died due to signal 9"
            # The same kill seen through the compile cache (sccache 0.16.0 runs nvcc's steps
            # itself), as a real CMake kernel build logged it:
            # "cicc terminated (signal: 9)sccache: Compiler killed by signal 9".
            r"|terminated \(signal: 9\)"
            r"|Compiler killed by signal 9"
            r"|^\s*Killed\s*$"
            r"|fatal error: Killed"
            r"|virtual memory exhausted"
            r"|std::bad_alloc",
            re.MULTILINE,
        ),
    ),
    (
        "cxx_std",
        re.compile(
            r"namespace \"std\" has no member \"strong_ordering\""
            r"|'strong_ordering' in namespace 'std' does not name a type"
            r"|requires (?:at least )?C\+\+20"
            r"|#error C\+\+20 or later compatible compiler is required"
        ),
    ),
]


def _knob_values(env):
    """The parallelism settings present in `env`, rendered 'NAME=value'."""
    found = []
    for name in PARALLEL_KNOBS:
        if env and name in env:
            found.append(f"{name}={env[name]}")
    return found


def _advice(kind, env, evidence):
    if kind == "oom":
        now = _knob_values(env)
        named = ", ".join(now) if now else "MAX_JOBS / NVCC_THREADS / SGL_KERNEL_COMPILE_THREADS"
        return (
            f"the build was killed by the OOM killer ({evidence}): each nvcc thread needs about 3-5 GB "
            "(CUTLASS GEMM units can take over 15 GB); "
            f"lower {named} (host vars max_jobs / nvcc_threads, or --max-jobs / --nvcc-threads) "
            "and rebuild"
        )
    if kind == "nvcc_too_old_for_arch":
        return (
            f"nvcc does not know this GPU architecture ({evidence}): sm_120 needs CUDA toolkit >= 12.8 "
            "(sm_120f >= 12.9); point CUDA_HOME at a newer toolkit"
        )
    if kind == "cuda_home_missing":
        return (
            f"no usable CUDA toolkit for the build ({evidence}): set CUDA_HOME to a toolkit with nvcc; "
            "with a CPU-only torch, cpp_extension ignores CUDA_HOME, so install a CUDA (cu128+) "
            "torch in the build env"
        )
    if kind == "cxx_std":
        return (
            f"the package compiles with -std=c++17 but the torch headers need C++20 ({evidence}): pin a "
            "torch whose headers accept C++17 for this version, or patch the -std flag"
        )
    if kind == "torch_cuda_mismatch":
        return (
            f"nvcc's major CUDA version differs from the one torch was built with ({evidence}): use a "
            "toolkit of torch's CUDA major, or a torch from the matching index"
        )
    return "the build failed; see the log for the first error"


def classify(log_text, exit_code=None, env=None):
    """Classify a failed build from its log: returns (kind, advice).

    kind is one of oom, nvcc_too_old_for_arch, cuda_home_missing, cxx_std,
    torch_cuda_mismatch, other. `env` (the build's knob env) lets the OOM advice name the
    current values of the settings to lower. Exit status 137 / -9 (SIGKILL) counts as OOM
    when nothing more specific is in the log.
    """
    kind, evidence = classify_evidence(log_text, exit_code)
    return kind, _advice(kind, env, evidence)


def classify_evidence(log_text, exit_code=None):
    """(kind, the log line or exit status that decided it)."""
    for kind, pattern in FAILURE_PATTERNS:
        match = pattern.search(log_text)
        if match:
            start = log_text.rfind("\n", 0, match.start()) + 1
            end = log_text.find("\n", match.end())
            line = log_text[start : end if end != -1 else len(log_text)].strip()
            return kind, line[:200]
    if exit_code in (137, -9):
        return "oom", f"exit status {exit_code} (SIGKILL)"
    return "other", f"exit status {exit_code}"
