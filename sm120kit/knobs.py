"""Build knobs: one arch list and the host's facts, translated into each package's own settings.

Every package reads its target architectures and its parallelism from a different place:

- plain torch extensions (the sample `minikernel`): ``TORCH_CUDA_ARCH_LIST`` and ``MAX_JOBS``;
- flash-attn: ``FLASH_ATTN_CUDA_ARCHS`` (it ignores ``TORCH_CUDA_ARCH_LIST``, its own nvcc flags
  carry ``arch``), ``FLASH_ATTENTION_FORCE_BUILD=TRUE``, ``MAX_JOBS`` x ``NVCC_THREADS``;
- sgl-kernel: a hard-coded gencode list in its CMake; only its CMake options can drop targets
  (``-Ccmake.define.X=Y``): ``ENABLE_BELOW_SM90`` upstream, ``SGL_KERNEL_ONLY_ARCHS`` with
  patches/sgl-kernel/0002-cmake-sm-only-build.patch (the SM-only build), plus
  ``SGL_KERNEL_COMPILE_THREADS`` (nvcc --threads) and the env's ``CMAKE_BUILD_PARALLEL_LEVEL``.

`resolve_knobs` returns the env, the extra front-end arguments and, for ``--explain``, the
reason for every value. Parallelism is sized so that jobs x nvcc threads x GB per thread fits
the host's available memory: an over-parallel CUDA build gets killed by the OOM killer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from .errors import RecipeError
from .remote.lib.buildlog import PARALLEL_KNOBS
from .remote.lib.buildlog import classify as _classify
from .sglkernel import defines_from_pip_args

KINDS = ("torch-ext", "flash-attn", "sgl-kernel")

#: Memory one nvcc thread may take (about 3-5 GB on these packages' heavy units). flash-attn
#: uses its own setup.py's figure instead (FLASH_ATTN_GB_PER_JOB below).
DEFAULT_GB_PER_NVCC_THREAD = 4.0

#: flash-attn's own NVCC_THREADS default (flash-attention v2.8.3 setup.py, append_nvcc_threads).
FLASH_ATTN_NVCC_THREADS = 4

#: Memory one flash-attn compile job takes at NVCC_THREADS=4. flash-attention v2.8.3 setup.py
#: (NinjaBuildExtension) sets MAX_JOBS, when unset, to max(1, min(cpu_count // 2,
#: int(available_GiB / 9))), "each JOB peak memory cost is ~8-9GB when threads = 4"; so
#: 9 / 4 GB per nvcc thread, and at 4 threads plan_parallelism gives exactly that formula.
FLASH_ATTN_GB_PER_JOB = 9.0
#: sgl-kernel 0.3.21's CUTLASS GEMM units: in the by-hand SM-only build (docs/sgl-kernel.md)
#: one cicc of csrc/gemm/fp8_blockwise_gemm_kernel.cu for sm_120a alone, nvcc --threads=1,
#: reached 15.8 GB peak RSS and was killed by the OOM killer at 12.6 GB anonymous RSS beside a
#: second job on a 24 GB host; nvfp4_scaled_mm_kernels.cu's cicc took 7.5-8.1 GB. At 4 GB per
#: thread a 24 GB host ran two such jobs and lost the build after 74 minutes.
SGL_KERNEL_GB_PER_NVCC_THREAD = 16.0

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

#: sgl-kernel 0.3.21 under CUDA >= 13.0 compiles each file for sm_90, sm_100a, sm_120a, sm_103a
#: and sm_90a once below-SM90 code is off (CMakeLists.txt at sglang c86ca128); nvcc --threads
#: splits work per gencode target, so more threads than that gain nothing.
SGL_KERNEL_NVCC_THREADS = 5

_ARCH = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")
_GIB = 1024**3


@dataclass
class Knobs:
    """What a build needs: env vars, extra front-end arguments, and why each value was chosen."""

    env: dict[str, str] = field(default_factory=dict)
    pip_args: list[str] = field(default_factory=list)
    explain: list[tuple[str, str, str]] = field(default_factory=list)

    def set_env(self, name: str, value: Any, reason: str) -> None:
        self.env[name] = str(value)
        self._note(name, str(value), reason)

    def define(self, name: str, value: Any, reason: str) -> None:
        """A CMake define passed through scikit-build-core's config settings."""
        arg = f"-Ccmake.define.{name}={value}"
        self.pip_args = [a for a in self.pip_args if not a.startswith(f"-Ccmake.define.{name}=")]
        self.pip_args.append(arg)
        self._note(arg, str(value), reason)

    def note(self, name: str, value: str, reason: str) -> None:
        """An explain-only line (something deliberately *not* set, and why)."""
        self.explain.append((name, value, reason))

    def _note(self, name: str, value: str, reason: str) -> None:
        self.explain = [e for e in self.explain if e[0] != name]
        self.explain.append((name, value, reason))

    def render(self) -> str:
        """The ``--explain`` text: one line per setting, its value and its reason."""
        width = max((len(n) + len(v) for n, v, _ in self.explain), default=0) + 1
        lines = []
        for name, value, reason in self.explain:
            shown = f"{name}={value}" if not name.startswith("-C") else name
            lines.append(f"{shown:<{width + 1}}  # {reason}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Arch:
    """One TORCH_CUDA_ARCH_LIST-style entry such as ``12.0``, ``12.0a`` or ``12.0+PTX``."""

    major: int
    minor: int
    suffix: str = ""
    ptx: bool = False

    @property
    def sm(self) -> int:
        return self.major * 10 + self.minor

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}{self.suffix}{'+PTX' if self.ptx else ''}"


def parse_arch_list(arch_list: list[str] | str, where: str = "arch_list") -> list[Arch]:
    """Parse ``["12.0", "9.0a"]`` or ``"12.0;9.0a"``; a bad entry raises a one-line RecipeError."""
    if isinstance(arch_list, str):
        items = arch_list.replace(",", ";").replace(" ", ";").split(";")
    else:
        items = [str(a).strip() for a in arch_list]
    archs = []
    for item in (i for i in items if i):
        match = _ARCH.match(item)
        if not match:
            raise RecipeError(f"{where}: '{item}' is not an arch like 12.0, 12.0a or 12.0+PTX")
        archs.append(Arch(int(match[1]), int(match[2]), match[3], bool(match[4])))
    if not archs:
        raise RecipeError(f"{where}: the arch list is empty")
    return archs


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
            "accepted values to sm120kit.knobs.FLASH_ATTN_ARCHS after reading its setup.py"
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


@dataclass(frozen=True)
class Parallelism:
    """Jobs and nvcc threads per job, and the arithmetic that produced them."""

    jobs: int
    threads: int
    reason: str


def plan_parallelism(
    cpus: int,
    mem_bytes: int,
    *,
    threads_default: int,
    gb_per_thread: float = DEFAULT_GB_PER_NVCC_THREAD,
    jobs_override: int | None = None,
    threads_override: int | None = None,
) -> Parallelism:
    """Size parallel compile jobs and nvcc threads to the CPUs and the memory.

    The memory budget is ``mem_GB / gb_per_thread`` nvcc threads in flight. Threads per job
    default to `threads_default` but shrink to what the budget allows; jobs are then
    ``min(cpus // 2, budget // threads)`` for multi-threaded nvcc (flash-attn 2.8.3's own
    formula when threads = 4 and gb_per_thread = 9 / 4) and ``min(cpus, budget)`` for
    single-threaded compiles.
    """
    cpus = max(1, int(cpus))
    mem_gb = mem_bytes / _GIB
    budget = max(1, int(mem_gb // gb_per_thread))
    if threads_override is not None:
        threads = threads_override
    else:
        threads = max(1, min(threads_default, budget, cpus))
    cpu_cap = max(1, cpus // 2) if threads_default > 1 else cpus
    jobs = jobs_override if jobs_override is not None else max(1, min(cpu_cap, budget // threads))
    reason = (
        f"{cpus} CPUs, {mem_gb:.1f} GiB available / {gb_per_thread:g} GB per nvcc thread = "
        f"{budget} thread(s) in flight"
    )
    return Parallelism(jobs=jobs, threads=threads, reason=reason)


def resolve_knobs(
    package: str,
    kind: str,
    arch_list: list[str] | str,
    facts: dict[str, Any],
    overrides: dict[str, Any] | None = None,
    *,
    sources: dict[str, str] | None = None,
    version: str | None = None,
) -> Knobs:
    """Translate one arch list and a host's facts into `package`'s build settings.

    `facts` needs ``facts["cpu"]["count"]`` and ``facts["memory"]["available_bytes"]`` (or
    ``total_bytes``). `overrides` (inventory vars or ``--set`` flags, already merged) may set
    ``MAX_JOBS``, ``NVCC_THREADS``, ``CMAKE_BUILD_PARALLEL_LEVEL``,
    ``SGL_KERNEL_COMPILE_THREADS``, ``gb_per_nvcc_thread``, ``cmake.define.X`` or
    ``cmake_defines`` (a dict; sgl-kernel only) and ``env`` (a dict of extra variables,
    applied last); any other upper-case key is taken as an env var. `sources` names where each override came from, for the explain text.
    `version` (the package's) lets flash-attn's FLASH_ATTN_CUDA_ARCHS be checked against what
    that release's setup.py accepts; a value it would drop raises RecipeError.
    """
    if kind not in KINDS:
        raise RecipeError(
            f"package {package}: build kind '{kind}' is not one of {', '.join(KINDS)}"
        )
    overrides = dict(overrides or {})
    sources = sources or {}
    archs = parse_arch_list(arch_list, where=f"package {package}: arch_list")
    sm_only = overrides.pop("sm120_only", None)
    if sm_only is not None and kind != "sgl-kernel":
        raise RecipeError(f"package {package}: knob sm120_only is for sgl-kernel only")
    cpus, mem_bytes, mem_what = _host_size(facts, package)
    gb_default = (
        FLASH_ATTN_GB_PER_JOB / FLASH_ATTN_NVCC_THREADS
        if kind == "flash-attn"
        else SGL_KERNEL_GB_PER_NVCC_THREAD
        if kind == "sgl-kernel"
        else DEFAULT_GB_PER_NVCC_THREAD
    )
    gb = _positive_number(
        overrides.pop("gb_per_nvcc_thread", gb_default), "gb_per_nvcc_thread", package
    )

    def given(name: str) -> int | None:
        if name not in overrides:
            return None
        return _positive_int(overrides.pop(name), name, package)

    def origin(name: str) -> str:
        return f"override from {sources.get(name, 'the run')}"

    knobs = Knobs()
    if kind == "torch-ext":
        _torch_ext(knobs, archs, cpus, mem_bytes, gb, mem_what, given, origin)
    elif kind == "flash-attn":
        _flash_attn(knobs, archs, cpus, mem_bytes, gb, mem_what, given, origin)
        value = (overrides.get("env") or {}).get("FLASH_ATTN_CUDA_ARCHS")
        value = overrides.get("FLASH_ATTN_CUDA_ARCHS", value)
        value = knobs.env["FLASH_ATTN_CUDA_ARCHS"] if value is None else str(value)
        problem = flash_attn_arch_problem(version, value) if version else None
        if problem:
            raise RecipeError(f"package {package}: {problem}")
    else:
        _sgl_kernel(
            knobs,
            archs,
            cpus,
            mem_bytes,
            gb,
            mem_what,
            given,
            origin,
            overrides.pop("cmake_defines", None) or {},
            _switch(sm_only, "sm120_only", package),
        )
    extra_env = overrides.pop("env", None) or {}
    for name, value in list(overrides.items()) + list(dict(extra_env).items()):
        name = str(name)
        if name.startswith("cmake.define.") and kind == "sgl-kernel":
            knobs.define(name[len("cmake.define.") :], value, origin(name))
        elif re.match(r"^[A-Z_][A-Z0-9_]*$", name):
            knobs.set_env(name, value, origin(name))
        else:
            raise RecipeError(
                f"package {package}: unknown build override '{name}' (env vars are upper "
                "case; cmake.define.X is for sgl-kernel)"
            )
    return knobs


def _torch_ext(
    knobs: Knobs,
    archs: list[Arch],
    cpus: int,
    mem: int,
    gb: float,
    mem_what: str,
    given: Any,
    origin: Any,
) -> None:
    knobs.set_env(
        "TORCH_CUDA_ARCH_LIST",
        ";".join(str(a) for a in archs),
        "torch.utils.cpp_extension turns each entry into -gencode (12.0 -> sm_120, "
        "+PTX adds compute_120, 12.0a -> sm_120a)",
    )
    jobs = given("MAX_JOBS")
    plan = plan_parallelism(cpus, mem, threads_default=1, gb_per_thread=gb, jobs_override=jobs)
    knobs.set_env(
        "MAX_JOBS",
        plan.jobs,
        origin("MAX_JOBS")
        if jobs
        else f"{plan.reason} ({mem_what}); one job = one single-threaded compile",
    )


def _flash_attn(
    knobs: Knobs,
    archs: list[Arch],
    cpus: int,
    mem: int,
    gb: float,
    mem_what: str,
    given: Any,
    origin: Any,
) -> None:
    dropped = [str(a) for a in archs if a.suffix or a.ptx]
    knobs.set_env(
        "FLASH_ATTN_CUDA_ARCHS",
        flash_attn_archs(archs),
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
    jobs, threads = given("MAX_JOBS"), given("NVCC_THREADS")
    plan = plan_parallelism(
        cpus,
        mem,
        threads_default=FLASH_ATTN_NVCC_THREADS,
        gb_per_thread=gb,
        jobs_override=jobs,
        threads_override=threads,
    )
    knobs.set_env(
        "NVCC_THREADS",
        plan.threads,
        origin("NVCC_THREADS")
        if threads
        else f"flash-attn's default {FLASH_ATTN_NVCC_THREADS}, capped by CPUs and memory "
        f"({plan.reason})",
    )
    knobs.set_env(
        "MAX_JOBS",
        plan.jobs,
        origin("MAX_JOBS")
        if jobs
        else f"min(cpus // 2, threads in flight // NVCC_THREADS) ({plan.reason}, {mem_what}; "
        f"flash-attn 2.8.3's setup.py budgets {FLASH_ATTN_GB_PER_JOB:g} GB per job at "
        f"NVCC_THREADS={FLASH_ATTN_NVCC_THREADS})",
    )


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


def _sgl_kernel(
    knobs: Knobs,
    archs: list[Arch],
    cpus: int,
    mem: int,
    gb: float,
    mem_what: str,
    given: Any,
    origin: Any,
    defines: dict[str, Any],
    sm_only: bool | None,
) -> None:
    knobs.note(
        "arch list",
        ";".join(str(a) for a in archs),
        "sgl-kernel's CMake hard-codes its gencodes (sm_90 always, sm_90a with CUDA >= 12.4, "
        "sm_100a and sm_120a with CUDA >= 12.8, sm_103a with CUDA >= 13.0) and clears "
        "TORCH_CUDA_ARCH_LIST; only its options can drop targets",
    )
    all_12 = all(a.major == 12 for a in archs)
    if sm_only is None:
        sm_only = all_12
        why = "default for an arch list of 12.x only"
    else:
        why = f"knob sm120_only = {str(sm_only).lower()}"
    if sm_only:
        only = sm_only_archs(archs)
        knobs.define(
            "SGL_KERNEL_ONLY_ARCHS",
            only,
            f"SM-only build ({why}; patch 0002-cmake-sm-only-build): every target gets "
            f"-gencode=arch=compute_X,code=sm_X for {only} only; common_ops is built once (the "
            "sm100/ variant load_utils.py picks on 12.x), no FA3 flash_ops, no flashmla_ops",
        )
    else:
        knobs.note(
            "-Ccmake.define.SGL_KERNEL_ONLY_ARCHS",
            "(not set)",
            f"upstream's full build ({why}): common_ops twice, FA3 and FlashMLA, every gencode",
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
    knobs.note(
        "-Ccmake.define.SGL_KERNEL_ENABLE_FA3",
        "(not set)",
        "shadowed at 0.3.21: its CMakeLists runs set(SGL_KERNEL_ENABLE_FA3 ON) for CUDA >= 12.4; "
        "the SM-only build turns FA3 off after that line",
    )
    knobs.note(
        "MAX_JOBS",
        "(not set)",
        "sgl-kernel's CMake does not read it (only its Makefile does); "
        "CMAKE_BUILD_PARALLEL_LEVEL bounds the jobs",
    )
    knobs.define(
        "CMAKE_POLICY_VERSION_MINIMUM",
        "3.5",
        "dlpack v1.1 (pulled in by mscclpp) declares cmake_minimum_required(VERSION 3.2), "
        "which CMake 4 refuses without it",
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


def _switch(value: Any, name: str, package: str) -> bool | None:
    """A boolean knob (true/false, on/off, 1/0); None when unset."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if text in ("true", "1", "on", "yes"):
        return True
    if text in ("false", "0", "off", "no"):
        return False
    raise RecipeError(f"package {package}: knob {name}={value!r} is not true or false")


def _host_size(facts: dict[str, Any], package: str) -> tuple[int, int, str]:
    try:
        cpus = int(facts["cpu"]["count"])
        memory = facts["memory"]
    except (KeyError, TypeError, ValueError):
        raise RecipeError(
            f"package {package}: host facts lack cpu.count / memory (gather facts first)"
        ) from None
    if memory.get("available_bytes"):
        return cpus, int(memory["available_bytes"]), "memory available now"
    if memory.get("total_bytes"):
        return cpus, int(memory["total_bytes"]), "total memory (available unknown)"
    raise RecipeError(f"package {package}: host facts lack memory.available_bytes")


def _positive_int(value: Any, name: str, package: str) -> int:
    try:
        number = int(str(value))
    except ValueError:
        number = 0
    if number < 1:
        raise RecipeError(f"package {package}: override {name}={value!r} is not a positive integer")
    return number


def _positive_number(value: Any, name: str, package: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = 0.0
    if number <= 0:
        raise RecipeError(f"package {package}: override {name}={value!r} is not a positive number")
    return number


def classify_build_failure(
    log_text: str, exit_code: int | None = None, env: dict[str, str] | None = None
) -> tuple[str, str]:
    """(kind, advice) for a failed build's log; kinds: oom, nvcc_too_old_for_arch,
    cuda_home_missing, cxx_std, torch_cuda_mismatch, other.

    The patterns live in `sm120kit.remote.lib.buildlog` (which runs on hosts and must stand
    alone); this is the controller's entry point to the same code.
    """
    kind, advice = _classify(log_text, exit_code, env)
    return str(kind), str(advice)


#: The knobs that bound parallel compile jobs and nvcc threads, per build front end, in the
#: order an OOM retry lowers them: jobs first (each job is a whole nvcc), then threads.
_JOB_KNOBS = ("CMAKE_BUILD_PARALLEL_LEVEL", "MAX_JOBS")
_THREAD_KNOBS = ("NVCC_THREADS",)
_THREAD_DEFINES = ("SGL_KERNEL_COMPILE_THREADS",)


def _positive(value: str | None) -> int | None:
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return None
    return number if number >= 1 else None


def lowered_for_oom(knobs: Knobs) -> tuple[Knobs, str] | None:
    """A copy of `knobs` with half the parallel jobs (or, at one job, half the nvcc threads),
    and a line saying what changed; None when everything is already at 1.

    None of these knobs is a wheel-cache key input, so the retry builds under the same key.
    """
    lowered = Knobs(dict(knobs.env), list(knobs.pip_args), list(knobs.explain))
    why = "halved after the OOM killer stopped the build"
    changes = []
    for name in _JOB_KNOBS:
        value = _positive(knobs.env.get(name))
        if value and value > 1:
            lowered.set_env(name, value // 2, why)
            changes.append(f"{name} {value} -> {value // 2}")
    if changes:
        return lowered, ", ".join(changes)
    for name in _THREAD_KNOBS:
        value = _positive(knobs.env.get(name))
        if value and value > 1:
            lowered.set_env(name, value // 2, why)
            return lowered, f"{name} {value} -> {value // 2}"
    defines = defines_from_pip_args(knobs.pip_args)
    for name in _THREAD_DEFINES:
        value = _positive(defines.get(name))
        if value and value > 1:
            lowered.define(name, value // 2, why)
            return lowered, f"{name} {value} -> {value // 2}"
    return None


__all__ = [
    "FLASH_ATTN_ARCHS",
    "FLASH_ATTN_GB_PER_JOB",
    "SGL_KERNEL_GB_PER_NVCC_THREAD",
    "Arch",
    "Knobs",
    "PARALLEL_KNOBS",
    "Parallelism",
    "classify_build_failure",
    "flash_attn_arch_problem",
    "flash_attn_archs",
    "lowered_for_oom",
    "parse_arch_list",
    "plan_parallelism",
    "resolve_knobs",
]
