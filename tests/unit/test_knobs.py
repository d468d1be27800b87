"""Knobs: one arch list and a host's size -> each package's own build settings; and the
build-failure classifier (stack facts sections 4-6 (docs/stack-facts.md))."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.builds.knobs import (
    classify_build_failure,
    parse_arch_list,
    plan_parallelism,
    resolve_knobs,
)
from sm120kit.errors import RecipeError
from sm120kit.packages.base import TreeFacts
from sm120kit.remote import build_wheel

GIB = 1024**3
LOGS = Path(__file__).parent.parent / "fixtures" / "build_logs"


def facts(cpus: int, avail_gib: float, total_gib: float | None = None) -> dict:
    return {
        "cpu": {"count": cpus},
        "memory": {
            "available_bytes": int(avail_gib * GIB),
            "total_bytes": int((total_gib or avail_gib) * GIB),
        },
    }


# -- parallelism ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpus", "avail_gib", "jobs", "threads"),
    [
        (2, 24, 1, 2),  # this machine: cpus // 2 = 1 job, threads capped by 2 CPUs
        (16, 64, 7, 4),  # 64 GiB / 9 GB per 4-thread job = 7 jobs
        (64, 512, 32, 4),  # CPU-bound: cpus // 2
        (64, 64, 7, 4),  # memory-bound
        (16, 3, 1, 1),  # 1 thread fits: 1 job x 1 thread, never 0
        (32, 7, 1, 3),  # 3 threads fit: threads shrink before jobs hit 0
        (1, 0.5, 1, 1),  # tiny box: still one job
    ],
)
def test_flash_attn_parallelism_fits_memory(cpus, avail_gib, jobs, threads):
    knobs = resolve_knobs("flash-attn", "flash-attn", ["12.0"], facts(cpus, avail_gib), {})
    assert (int(knobs.env["MAX_JOBS"]), int(knobs.env["NVCC_THREADS"])) == (jobs, threads)
    # The invariant the numbers exist for: jobs x threads x 9/4 GB fits (or it is the minimum).
    assert jobs * threads * 9 / 4 <= max(avail_gib, 9 / 4 * threads)


@pytest.mark.parametrize(
    ("cpus", "avail_gib", "jobs"),
    [(2, 24, 2), (16, 8, 2), (16, 64, 16), (8, 3, 1)],
)
def test_torch_ext_jobs_are_single_threaded_compiles(cpus, avail_gib, jobs):
    knobs = resolve_knobs("minikernel", "torch-ext", ["12.0"], facts(cpus, avail_gib), {})
    assert knobs.env["MAX_JOBS"] == str(jobs)
    assert "NVCC_THREADS" not in knobs.env


@pytest.mark.parametrize(
    ("cpus", "avail_gib"),
    [(64, 256), (32, 100), (16, 60), (128, 1000), (8, 17.9), (8, 18), (4, 200), (6, 9.5)],
)
def test_flash_attn_jobs_follow_its_own_setup_py(cpus, avail_gib):
    """flash-attention v2.8.3 setup.py (NinjaBuildExtension), when MAX_JOBS is unset:
    max(1, min(cpu_count // 2, int(available_GiB / 9))) at its NVCC_THREADS=4. The knobs give
    the same MAX_JOBS wherever 4 threads fit the CPUs and memory."""
    knobs = resolve_knobs("flash-attn", "flash-attn", ["12.0"], facts(cpus, avail_gib), {})
    assert knobs.env["NVCC_THREADS"] == "4"
    assert int(knobs.env["MAX_JOBS"]) == max(1, min(cpus // 2, int(avail_gib / 9)))
    assert "9 GB per job at NVCC_THREADS=4" in dict((n, r) for n, _, r in knobs.explain)["MAX_JOBS"]


def test_gb_per_thread_reaches_the_formula():
    """plan_parallelism at 4 threads and 9/4 GB per thread is that formula exactly."""
    for cpus, gib in [(64, 256), (32, 100), (16, 60)]:
        plan = plan_parallelism(cpus, gib * GIB, threads_default=4, gb_per_thread=9 / 4)
        assert (plan.threads, plan.jobs) == (4, max(1, min(cpus // 2, int(gib / 9))))


def test_total_memory_used_when_available_unknown():
    f = {"cpu": {"count": 16}, "memory": {"total_bytes": 32 * GIB}}
    knobs = resolve_knobs("flash-attn", "flash-attn", ["12.0"], f, {})
    assert knobs.env["MAX_JOBS"] == "3"  # int(32 / 9)
    assert any("total memory" in reason for _, _, reason in knobs.explain)


def test_missing_facts_is_one_line_error():
    with pytest.raises(RecipeError, match="package flash-attn: host facts lack"):
        resolve_knobs("flash-attn", "flash-attn", ["12.0"], {"cpu": {}}, {})


# -- overrides ------------------------------------------------------------------------------


def test_overrides_win_and_are_explained():
    knobs = resolve_knobs(
        "flash-attn",
        "flash-attn",
        ["12.0"],
        facts(64, 512),
        {"MAX_JOBS": 3, "NVCC_THREADS": "2", "CC": "gcc-14"},
        sources={"MAX_JOBS": "inventory host gpu1"},
    )
    assert knobs.env["MAX_JOBS"] == "3"
    assert knobs.env["NVCC_THREADS"] == "2"
    assert knobs.env["CC"] == "gcc-14"
    reasons = {name: reason for name, _, reason in knobs.explain}
    assert reasons["MAX_JOBS"] == "override from inventory host gpu1"
    assert reasons["NVCC_THREADS"] == "override from the run"


def test_overriding_threads_resizes_jobs():
    """Lowering NVCC_THREADS alone lets more jobs fit the same memory."""
    auto = resolve_knobs("flash-attn", "flash-attn", ["12.0"], facts(64, 64), {})
    fewer = resolve_knobs("flash-attn", "flash-attn", ["12.0"], facts(64, 64), {"NVCC_THREADS": 1})
    assert (auto.env["MAX_JOBS"], auto.env["NVCC_THREADS"]) == ("7", "4")
    assert (fewer.env["MAX_JOBS"], fewer.env["NVCC_THREADS"]) == ("28", "1")  # 64 / 2.25


def test_gb_per_thread_override():
    knobs = resolve_knobs(
        "flash-attn", "flash-attn", ["12.0"], facts(64, 64), {"gb_per_nvcc_thread": 2}
    )
    assert knobs.env["MAX_JOBS"] == "8"


@pytest.mark.parametrize("bad", [0, -1, "many", "1.5"])
def test_bad_override_is_one_line_error(bad):
    with pytest.raises(RecipeError, match=r"override MAX_JOBS=.* is not a positive integer"):
        resolve_knobs("flash-attn", "flash-attn", ["12.0"], facts(4, 16), {"MAX_JOBS": bad})


def test_unknown_override_is_refused():
    with pytest.raises(RecipeError, match="unknown build override 'max_jobs'"):
        resolve_knobs("flash-attn", "flash-attn", ["12.0"], facts(4, 16), {"max_jobs": 2})


# -- per-package translation ----------------------------------------------------------------


def test_flash_attn_recipe_env():
    """What the real recipe resolves to for an SM120 host (docs/stack-facts.md section 4)."""
    knobs = resolve_knobs("flash-attn", "flash-attn", ["12.0"], facts(2, 24), {})
    assert knobs.env == {
        "FLASH_ATTN_CUDA_ARCHS": "120",
        "FLASH_ATTENTION_FORCE_BUILD": "TRUE",
        "NVCC_THREADS": "2",
        "MAX_JOBS": "1",
    }
    assert knobs.pip_args == []


@pytest.mark.parametrize("arch_list", [["12.0"], ["12.0a"], ["12.0+PTX"], "12.0;9.0", ["8.0"]])
def test_flash_attn_never_relies_on_torch_cuda_arch_list(arch_list):
    """flash-attn's own flags contain 'arch', so torch ignores TORCH_CUDA_ARCH_LIST: the
    knob must be FLASH_ATTN_CUDA_ARCHS, whatever the list looks like."""
    knobs = resolve_knobs("flash-attn", "flash-attn", arch_list, facts(8, 64), {})
    assert "TORCH_CUDA_ARCH_LIST" not in knobs.env
    assert knobs.env["FLASH_ATTN_CUDA_ARCHS"]
    assert all(a.isdigit() for a in knobs.env["FLASH_ATTN_CUDA_ARCHS"].split(";"))


def test_flash_attn_arch_numbers():
    knobs = resolve_knobs("flash-attn", "flash-attn", "12.0a;9.0;12.0+PTX", facts(8, 64), {})
    assert knobs.env["FLASH_ATTN_CUDA_ARCHS"] == "120;90"


def test_torch_ext_arch_list_passes_through():
    knobs = resolve_knobs(
        "minikernel", "torch-ext", ["12.0", "12.0+PTX", "12.0a"], facts(2, 24), {}
    )
    assert knobs.env["TORCH_CUDA_ARCH_LIST"] == "12.0;12.0+PTX;12.0a"


def test_sgl_kernel_cmake_defines_for_sm120():
    """12.0 only: the SM-only build (sm_120a), one nvcc thread per job since there is one
    gencode, and none of the knobs 0.3.21 does not read (MAX_JOBS, SGL_KERNEL_ENABLE_FA3, from
    the entry's [packages.build]); CMake's policy floor from a subproject the entry records
    (0.3.21's dlpack, cmake_minimum_required 3.2)."""
    tree = TreeFacts(
        version="0.3.21",
        not_set={"SGL_KERNEL_ENABLE_FA3": "shadowed"},
        subprojects=(("dlpack", "3ea601bb413074c49a77c4ce3218bc08f8c4703c", "3.2"),),
    )
    knobs = resolve_knobs("sgl-kernel", "sgl-kernel", ["12.0"], facts(16, 64), {}, tree=tree)
    assert knobs.pip_args == [
        "-Ccmake.define.SGL_KERNEL_ONLY_ARCHS=120a",
        "-Ccmake.define.ENABLE_BELOW_SM90=OFF",
        "-Ccmake.define.CMAKE_POLICY_VERSION_MINIMUM=3.5",
        "-Ccmake.define.SGL_KERNEL_COMPILE_THREADS=1",
    ]
    # 64 GiB / 16 GB per thread (its CUTLASS GEMM units, knobs.SGL_KERNEL_GB_PER_NVCC_THREAD)
    assert knobs.env == {"CMAKE_BUILD_PARALLEL_LEVEL": "4"}
    # sgl-kernel's CMake clears it: setting it would only mislead.
    assert "TORCH_CUDA_ARCH_LIST" not in knobs.env
    notes = {name: value for name, value, _ in knobs.explain}
    assert notes["-Ccmake.define.SGL_KERNEL_ENABLE_FA3"] == "(not set)"
    assert notes["MAX_JOBS"] == "(not set)"


def test_sgl_kernel_full_build_when_the_knob_is_off():
    """knobs.sm120_only = false: upstream's gencodes; nvcc threads default to the five
    gencodes CUDA 13 compiles with below-SM90 code off."""
    knobs = resolve_knobs(
        "sgl-kernel", "sgl-kernel", ["12.0"], facts(32, 256), {"sm120_only": False}
    )
    assert not any("SGL_KERNEL_ONLY_ARCHS" in a for a in knobs.pip_args)
    assert "-Ccmake.define.SGL_KERNEL_COMPILE_THREADS=5" in knobs.pip_args
    assert knobs.env["CMAKE_BUILD_PARALLEL_LEVEL"] == "3"  # 16 threads in flight / 5
    with pytest.raises(RecipeError, match="sm120_only='maybe' is not true or false"):
        resolve_knobs("sgl-kernel", "sgl-kernel", ["12.0"], facts(2, 8), {"sm120_only": "maybe"})
    with pytest.raises(RecipeError, match="sm120_only is for sgl-kernel only"):
        resolve_knobs("fa", "flash-attn", ["12.0"], facts(2, 8), {"sm120_only": True})


def test_sgl_kernel_compile_threads_small_host():
    """Upstream's default of 32 nvcc threads OOMs small hosts: 2 CPUs / 24 GiB gets one thread
    per job (one gencode) and one job (a CUTLASS GEMM unit's cicc took over 15 GB: two of them
    were OOM-killed on such a host)."""
    knobs = resolve_knobs("sgl-kernel", "sgl-kernel", ["12.0"], facts(2, 24), {})
    assert "-Ccmake.define.SGL_KERNEL_COMPILE_THREADS=1" in knobs.pip_args
    assert knobs.env["CMAKE_BUILD_PARALLEL_LEVEL"] == "1"


def test_sgl_kernel_keeps_what_the_arch_list_needs():
    """8.9 and 9.0 in the list: no SM-only build and below-SM90 code stays."""
    knobs = resolve_knobs("sgl-kernel", "sgl-kernel", ["8.9", "9.0", "12.0"], facts(16, 64), {})
    assert not any("ENABLE_BELOW_SM90" in a for a in knobs.pip_args)
    assert not any("SGL_KERNEL_ONLY_ARCHS" in a for a in knobs.pip_args)


def test_sgl_kernel_define_overrides():
    knobs = resolve_knobs(
        "sgl-kernel",
        "sgl-kernel",
        ["12.0"],
        facts(16, 64),
        {
            "SGL_KERNEL_COMPILE_THREADS": 1,
            "cmake.define.ENABLE_BELOW_SM90": "ON",
            "cmake_defines": {"SGL_KERNEL_ENABLE_FP4": "ON"},
        },
    )
    assert "-Ccmake.define.SGL_KERNEL_COMPILE_THREADS=1" in knobs.pip_args
    assert "-Ccmake.define.ENABLE_BELOW_SM90=ON" in knobs.pip_args
    assert "-Ccmake.define.ENABLE_BELOW_SM90=OFF" not in knobs.pip_args
    assert "-Ccmake.define.SGL_KERNEL_ENABLE_FP4=ON" in knobs.pip_args
    assert knobs.env["CMAKE_BUILD_PARALLEL_LEVEL"] == "4"  # 4 threads in flight / 1 per job


def test_explain_names_every_setting_with_a_reason():
    knobs = resolve_knobs("sgl-kernel", "sgl-kernel", ["12.0"], facts(16, 64), {})
    text = knobs.render()
    for name in knobs.env:
        assert f"{name}={knobs.env[name]}" in text
    for arg in knobs.pip_args:
        assert arg in text
    assert all(reason for _, _, reason in knobs.explain)
    assert "hard-codes" in text


@pytest.mark.parametrize("bad", ["sm_120", "12", "12.0b", "12.0+ptx", ""])
def test_bad_arch_is_one_line_error(bad):
    with pytest.raises(RecipeError, match="arch"):
        parse_arch_list([bad] if bad else [], where="recipe r580: arch")


def test_unknown_kind():
    with pytest.raises(RecipeError, match="build kind 'cmake'"):
        resolve_knobs("x", "cmake", ["12.0"], facts(2, 4), {})


# -- failure classification -----------------------------------------------------------------


def test_recorded_oom_log():
    log = (LOGS / "flash_attn_oom.log").read_text()
    kind, advice = classify_build_failure(log, 1, {"MAX_JOBS": "8", "NVCC_THREADS": "4"})
    assert kind == "oom"
    assert "MAX_JOBS=8" in advice and "NVCC_THREADS=4" in advice
    assert "lower" in advice


@pytest.mark.parametrize(
    ("log", "exit_code", "kind"),
    [
        ("c++: fatal error: Killed signal terminated program cc1plus\n", 1, "oom"),
        ("nvcc error   : 'ptxas' died due to signal 9 (Kill signal)\n", 1, "oom"),
        (
            "FAILED: [code=254] CMakeFiles/common_ops_sm100_build.dir/csrc/gemm/x.cu.o\n"
            "cicc terminated (signal: 9)sccache: Compiler killed by signal 9\n",
            1,
            "oom",
        ),
        ("FAILED: a.o\nKilled\nninja: build stopped: subcommand failed.\n", 1, "oom"),
        ("[12/480] Building CUDA object\n", 137, "oom"),
        ("nvcc fatal   : Unsupported gpu architecture 'compute_120'\n", 1, "nvcc_too_old_for_arch"),
        (
            "ptxas fatal   : Value 'sm_120' is not defined for option 'gpu-name'\n",
            1,
            "nvcc_too_old_for_arch",
        ),
        (
            "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA "
            "install root.\n",
            1,
            "cuda_home_missing",
        ),
        (
            'csrc/flash_attn/flash_api.cpp(12): error: namespace "std" has no member '
            '"strong_ordering"\n',
            1,
            "cxx_std",
        ),
        (
            "RuntimeError:\nThe detected CUDA version (13.0) mismatches the version that was used "
            "to compile\nPyTorch (12.8). Please make sure to use the same CUDA versions.\n",
            1,
            "torch_cuda_mismatch",
        ),
        ("error: subprocess-exited-with-error\n", 1, "other"),
    ],
)
def test_classifier_table(log, exit_code, kind):
    assert classify_build_failure(log, exit_code)[0] == kind


def test_oom_advice_for_sgl_kernel_names_its_knobs():
    kind, advice = classify_build_failure(
        "Killed\n", 1, {"SGL_KERNEL_COMPILE_THREADS": "32", "CMAKE_BUILD_PARALLEL_LEVEL": "8"}
    )
    assert kind == "oom"
    assert "SGL_KERNEL_COMPILE_THREADS=32" in advice


def test_one_source_of_truth():
    """The controller's classifier is the remote script's (which must stand alone on hosts)."""
    log = "Killed\n"
    assert classify_build_failure(log) == tuple(build_wheel.classify(log))


def test_killed_inside_a_word_is_not_oom():
    assert classify_build_failure("test_process_Killed_cleanly passed\nerror\n", 1)[0] == "other"


def test_oom_retry_halves_jobs_then_threads() -> None:
    """What an OOM retry lowers: the job knobs first (every one present), then, at one job,
    nvcc's threads (env or sgl-kernel's CMake define); nothing when all are at 1."""
    from sm120kit.builds.knobs import Knobs, lowered_for_oom

    lowered = lowered_for_oom(Knobs({"MAX_JOBS": "5", "NVCC_THREADS": "4"}))
    assert lowered is not None
    knobs, change = lowered
    assert change == "MAX_JOBS 5 -> 2" and knobs.env == {"MAX_JOBS": "2", "NVCC_THREADS": "4"}
    assert ("MAX_JOBS", "2", "halved after the OOM killer stopped the build") in knobs.explain
    lowered = lowered_for_oom(knobs := Knobs({"MAX_JOBS": "1", "NVCC_THREADS": "4"}))
    assert lowered is not None and lowered[1] == "NVCC_THREADS 4 -> 2"
    assert knobs.env["NVCC_THREADS"] == "4"  # the original is not changed
    sgl = Knobs(
        {"CMAKE_BUILD_PARALLEL_LEVEL": "1"},
        ["-Ccmake.define.SGL_KERNEL_COMPILE_THREADS=2", "-Ccmake.define.X=1"],
    )
    lowered = lowered_for_oom(sgl)
    assert lowered is not None and lowered[1] == "SGL_KERNEL_COMPILE_THREADS 2 -> 1"
    assert lowered[0].pip_args == [
        "-Ccmake.define.X=1",
        "-Ccmake.define.SGL_KERNEL_COMPILE_THREADS=1",
    ]
    assert lowered_for_oom(lowered[0]) is None
    assert lowered_for_oom(Knobs({"MAX_JOBS": "1"})) is None
