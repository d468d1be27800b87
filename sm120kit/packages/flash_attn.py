"""flash-attn (Dao-AILab flash-attention v2): a setuptools build with its own arch knob.

It reads ``FLASH_ATTN_CUDA_ARCHS`` (and ignores ``TORCH_CUDA_ARCH_LIST``: its own nvcc flags
carry ``arch``), downloads a prebuilt wheel unless ``FLASH_ATTENTION_FORCE_BUILD=TRUE``, and
runs ``MAX_JOBS`` x ``NVCC_THREADS`` nvcc threads. Its setup.py silently drops arch entries it
does not know, so a value it would drop is refused (`arch_problem`).
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from ..remote.lib.arch import Arch
from .base import KnobRequest, Knobs, PackageDescriptor, plan_parallelism

NAME = "flash-attn"

#: flash-attn's own NVCC_THREADS default (flash-attention v2.8.3 setup.py, append_nvcc_threads).
FLASH_ATTN_NVCC_THREADS = 4

#: Memory one flash-attn compile job takes at NVCC_THREADS=4. flash-attention v2.8.3 setup.py
#: (NinjaBuildExtension) sets MAX_JOBS, when unset, to max(1, min(cpu_count // 2,
#: int(available_GiB / 9))), "each JOB peak memory cost is ~8-9GB when threads = 4"; so
#: 9 / 4 GB per nvcc thread, and at 4 threads plan_parallelism gives exactly that formula.
FLASH_ATTN_GB_PER_JOB = 9.0

#: What FLASH_ATTN_CUDA_ARCHS may hold, per flash-attn release. flash-attention v2.8.3 setup.py
#: (tag v2.8.3 = commit 060c9188beec3a8b62b33a3bfa6d5d2d44975fab, the same file as in the PyPI
#: sdist; tag v2.8.3.post1 changes only get_wheel_url) splits the variable on ';' and tests
#: `"80" in cuda_archs()` ... `"120" in cuda_archs()`: exact strings, each giving
#: `-gencode arch=compute_N,code=sm_N` (90 with nvcc >= 11.8; 100 and 120 with nvcc >= 12.8).
#: Any other entry (121, 86, 12.0, " 120") is dropped without a word, and when none is left
#: its nvcc flags carry no arch, so torch's cpp_extension falls back to its own arch list.
#: The 2.8.3.post2 sdist's setup.py is byte-identical to tag v2.8.3.post1's (commit
#: a8aa52b1ab3e9ca574c8a33b3f35afc017ffa2e2), so the same list. A release not listed here was
#: not read: its value is refused (flash_attn_arch_problem) rather than passed unchecked.
FLASH_ATTN_ARCHS: dict[str, tuple[str, ...]] = {
    "2.8.3": ("80", "90", "100", "120"),
    "2.8.3.post1": ("80", "90", "100", "120"),
    "2.8.3.post2": ("80", "90", "100", "120"),
}


def flash_attn_archs(archs: list[Arch]) -> str:
    """FLASH_ATTN_CUDA_ARCHS for an arch list: plain SM numbers, ``12.0a`` and ``12.0+PTX``
    becoming ``120`` (flash-attn compiles ``compute_N,code=sm_N`` itself)."""
    sms: list[str] = []
    for arch in archs:
        if str(arch.sm) not in sms:
            sms.append(str(arch.sm))
    return ";".join(sms)


def flash_attn_arch_problem(version: str, value: str) -> str | None:
    """Why flash-attn `version`'s setup.py would not build FLASH_ATTN_CUDA_ARCHS=`value` as
    asked, or None.

    Its setup.py splits on ';' and matches exact strings (FLASH_ATTN_ARCHS): an entry it does
    not know is skipped silently, and an empty result hands the arch choice to torch. A release
    whose setup.py was not read here gets a problem too: its handling of the value is unknown,
    and passing it unchecked would let a silent arch drop through.
    """
    try:
        base = str(Version(str(version)))
    except InvalidVersion:
        base = str(version)
    accepted = FLASH_ATTN_ARCHS.get(base)
    if accepted is None:
        return (
            f"FLASH_ATTN_CUDA_ARCHS={value!r}: flash-attn {base}'s setup.py was not read by "
            f"sm120kit, so whether it builds that value is unknown (read: "
            f"{', '.join(FLASH_ATTN_ARCHS)}); pin one of those releases, or add the release's "
            "accepted values to sm120kit.packages.flash_attn.FLASH_ATTN_ARCHS after reading "
            "its setup.py"
        )
    entries = str(value).split(";")
    unknown = [e for e in entries if e not in accepted]
    if not unknown:
        return None
    kept = [e for e in entries if e in accepted]
    what = ", ".join(repr(e) for e in unknown)
    return (
        f"FLASH_ATTN_CUDA_ARCHS={value!r}: flash-attn {base}'s setup.py knows only "
        f"{', '.join(accepted)} and silently drops {what}"
        + (
            f", so it would build only {';'.join(kept)}"
            if kept
            else ", leaving no arch, so torch's own arch list would decide what is compiled"
        )
    )


def flash_attn_knobs(knobs: Knobs, req: KnobRequest) -> None:
    """FLASH_ATTN_CUDA_ARCHS, FLASH_ATTENTION_FORCE_BUILD, NVCC_THREADS and MAX_JOBS."""
    dropped = [str(a) for a in req.archs if a.suffix or a.ptx]
    knobs.set_env(
        "FLASH_ATTN_CUDA_ARCHS",
        flash_attn_archs(req.archs),
        "flash-attn's own arch knob (default 80;90;100;120); each arch dropped cuts build time "
        "and memory"
        + (
            f"; it takes plain SM numbers, so {', '.join(dropped)} became their base SM"
            if dropped
            else ""
        ),
    )
    knobs.note(
        "TORCH_CUDA_ARCH_LIST",
        "(not used)",
        "flash-attn's nvcc flags already contain 'arch', so torch ignores this variable",
    )
    knobs.set_env(
        "FLASH_ATTENTION_FORCE_BUILD",
        "TRUE",
        "otherwise setup.py first downloads a prebuilt wheel from GitHub whose name carries no "
        "GPU arch",
    )
    jobs, threads = req.given("MAX_JOBS"), req.given("NVCC_THREADS")
    plan = plan_parallelism(
        req.cpus,
        req.mem_bytes,
        threads_default=FLASH_ATTN_NVCC_THREADS,
        gb_per_thread=req.gb_per_thread,
        jobs_override=jobs,
        threads_override=threads,
    )
    knobs.set_env(
        "NVCC_THREADS",
        plan.threads,
        req.origin("NVCC_THREADS")
        if threads
        else f"flash-attn's default {FLASH_ATTN_NVCC_THREADS}, capped by CPUs and memory "
        f"({plan.reason})",
    )
    knobs.set_env(
        "MAX_JOBS",
        plan.jobs,
        req.origin("MAX_JOBS")
        if jobs
        else f"min(cpus // 2, threads in flight // NVCC_THREADS) ({plan.reason}, {req.mem_what}; "
        f"flash-attn 2.8.3's setup.py budgets {FLASH_ATTN_GB_PER_JOB:g} GB per job at "
        f"NVCC_THREADS={FLASH_ATTN_NVCC_THREADS})",
    )


FLASH_ATTN = PackageDescriptor(
    name=NAME,
    kind=NAME,
    knobs=flash_attn_knobs,
    arch_knob="FLASH_ATTN_CUDA_ARCHS",
    arch_value=flash_attn_archs,
    arch_value_problem=flash_attn_arch_problem,
    threads_knob="NVCC_THREADS",
    oom_job_knobs=("MAX_JOBS",),
    oom_thread_env=("NVCC_THREADS",),
    gb_per_nvcc_thread=FLASH_ATTN_GB_PER_JOB / FLASH_ATTN_NVCC_THREADS,
    # What its 2.8.3 sources reach of the toolkit's libraries was not checked here.
    cuda_libraries=(),
    smoke_by_default=True,
    build_task="Build flash-attn for the recipe's arch (FLASH_ATTN_CUDA_ARCHS, forced source build).",
)

DESCRIPTORS = (FLASH_ATTN,)
