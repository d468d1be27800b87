"""The package descriptor: everything that makes one kernel package's build, check and smoke
different from another's, so that the ops, knobs and smoke code ask it instead of naming
packages.

A descriptor is data plus two small functions: how an arch list and a host's size become the
package's own build settings (`PackageDescriptor.knobs`), and, where its build silently
ignores values it does not know, what is wrong with an arch value (`arch_value_problem`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..remote.lib.arch import Arch

#: Build front ends the tool drives: setuptools (torch's cpp_extension, ninja) or
#: scikit-build-core over CMake (which needs cmake and scikit-build-core in the env).
FRONT_ENDS = ("setuptools", "scikit-build-core")

#: Memory one nvcc thread may take when a descriptor does not say (about 3-5 GB on these
#: packages' heavy units).
DEFAULT_GB_PER_NVCC_THREAD = 4.0

#: ATen's CUDA headers, which any torch CUDA extension including ATen/cuda/CUDAContext.h reads
#: (toolkit components, sm120kit.builds.cuda_libraries).
ATEN_CUDA = ("cublas", "cusparse", "cusolver")

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
    ``min(cpus // 2, budget // threads)`` for multi-threaded nvcc (flash-attention 2.8.3's setup.py
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


@dataclass(frozen=True)
class TreeFacts:
    """What the recipe entry and its chosen patches say about the tree a build configures, so
    a descriptor's reasons hold for that tree and not for another release's (`KnobRequest`).

    `options`: CMake option a patch adds -> (patch file, what it does: its ``Option:`` header
    line, "" when it has none); `not_set`: options the tool leaves unset -> why, and
    `no_full_build`: why upstream's full build cannot be pinned ("" = it can), both from the
    entry's ``[packages.build]`` (empty when a host var moved source.ref or version off the
    entry's tree); `subprojects`: (dir, ref, VERSION) of each dependency whose own
    ``cmake_minimum_required`` the entry records (a tree the build configures itself)."""

    version: str = ""
    options: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    not_set: Mapping[str, str] = field(default_factory=dict)
    no_full_build: str = ""
    subprojects: tuple[tuple[str, str, str], ...] = ()


@dataclass
class KnobRequest:
    """What a descriptor's knob function gets: the package, its arch list, the host's size and
    the run's overrides (`given` pops a positive integer override, `origin` says where an
    override came from, `switches` holds the descriptor's boolean knobs, None when unset).
    `patch_options`: the build options (CMake cache variables) the entry's patches for this
    version add (`Patch.options_added`), so a descriptor sets such a define only where a
    patch makes the tree read it; None when the caller does not know the patches."""

    package: str
    archs: list[Arch]
    cpus: int
    mem_bytes: int
    gb_per_thread: float
    mem_what: str
    given: Callable[[str], int | None]
    origin: Callable[[str], str]
    switches: Mapping[str, bool | None]
    overrides: dict[str, Any]
    patch_options: frozenset[str] | None = None
    patch_version: str = ""  # the package version `patch_options` was found for
    tree: TreeFacts = field(default_factory=TreeFacts)


#: Fills a Knobs from a request (env vars, CMake defines, explain-only notes).
KnobFunction = Callable[["Knobs", KnobRequest], None]
#: The arch knob's value for an arch list (``12.0a;9.0`` -> ``120;90``).
ArchValue = Callable[[list["Arch"]], str]
#: (package version, CUDA X.Y, CMake defines) -> target -> SASS it compiles, or None when the
#: version's CMake is not known.
TargetPrediction = Callable[[str, str, Mapping[str, str]], "dict[str, list[str]] | None"]
#: (package version, arch knob value) -> why the package's build would not honour it, or None.
ArchValueCheck = Callable[[str, str], "str | None"]


@dataclass(frozen=True)
class LoaderChoice:
    """Which build of one extension module a package's own loader imports on a GPU: the
    per-arch directory (``sm90/``, ``sm100/``) it picks for a compute capability. Made from
    the release catalogues (`sm120kit.packages.stack.loader`, read from the wheels' own
    loader source), never written by hand.

    - `package`, `module`: the import package and the module it loads (``sgl_kernel``,
      ``common_ops``);
    - `by_capability`: ``(("9.0", "sm90"),)``: capabilities the loader names explicitly;
    - `otherwise`: the directory for any other capability; `without_gpu`: with no GPU
      (``torch.cuda.is_available()`` False);
    - `versions`: the releases whose loader this was read from; `source`: what was read.
    """

    package: str
    module: str
    by_capability: tuple[tuple[str, str], ...]
    otherwise: str
    without_gpu: str
    versions: tuple[str, ...]
    source: str

    def directory(self, cc: tuple[int, int] | None) -> str:
        """The directory the loader picks for capability `cc` (None: no GPU)."""
        if cc is None:
            return self.without_gpu
        for cap, directory in self.by_capability:
            major, _, minor = cap.partition(".")
            if (int(major), int(minor or 0)) == tuple(cc):
                return directory
        return self.otherwise

    def to_json(self) -> dict[str, Any]:
        """The probe's argument form (the hosts' library has no descriptors)."""
        return {
            "package": self.package,
            "module": self.module,
            "by_capability": dict(self.by_capability),
            "otherwise": self.otherwise,
            "without_gpu": self.without_gpu,
            "versions": list(self.versions),
            "source": self.source,
        }


@dataclass(frozen=True)
class PackageDescriptor:
    """One package the tool knows: one it builds (a kernel package, or one build kind for the
    generic torch extension), or one it only installs from releases (a descriptor that does
    not build: no `knobs`, no `kind`). Every name its distribution is published under finds
    it (`registry.find`). What its released files carry (device code, loader, toolchain
    lookups) is not written here: the release catalogues (``locks/*/catalogue.toml``) hold it,
    read from the wheels.

    - `name`: the recipe's package name, or the distribution's (``""`` for a kind that any
      recipe package may use);
    - `kind`: the build kind `knobs.resolve_knobs` is asked for (``""``: it does not build);
    - `front_end`: one of FRONT_ENDS;
    - `arch_knob`: the variable (or CMake define) that carries the package's target archs;
    - `threads_knob`: what ``--nvcc-threads`` / host var ``nvcc_threads`` set (None: nothing);
    - `oom_job_knobs`, `oom_thread_env`, `oom_thread_defines`: what an OOM retry halves, jobs
      first (each job is a whole nvcc), then threads;
    - `gb_per_nvcc_thread`: memory per nvcc thread when sizing jobs;
    - `switches`: the boolean knobs it takes (``sm120_only``);
    - `cmake_defines`: whether ``cmake.define.X`` overrides and ``cmake_defines`` apply;
    - `cmake_checked`: host prerequisites and a real configure before its build
      (builds/cmake_config.py), when built from the tool's own sources;
    - `cuda_libraries`: the toolkit components its build needs (builds/cuda_libraries.py);
    - `smoke_by_default`: checked by ``smoke`` when neither --package nor a recipe names one;
    - `knobs`: how the arch list and the host's size become its build settings;
    - `arch_value`: the arch knob's value for an arch list (needed with `arch_value_problem`);
    - `arch_value_problem`: why a value of `arch_knob` would not be built as asked, or None;
    - `predict_targets`: a CMake build's targets and their SASS before any configure (the
      dry-run answer of ``--explain``), None for a version it does not know;
    - `arch_targets`: the configured targets whose SASS must cover every arch of the recipe
      (a build without is refused before it starts);
    - `build_task`: the help line of its own ``invoke build-<name>`` task ("" = none: ``invoke
      build --package <name>`` builds it all the same);
    - `distributions`: the names its wheels are published under besides `name`, newest first
      (sgl-kernel: ``sglang-kernel`` from 0.4.0 on): smoke finds the package under any of them;
    - `serving`: part of the serving stack: smoke looks for it in an env it was not asked
      about;
    - `jit`: the toolchain lookup rule (``remote/lib/jit_toolchain.RULES``) of a package that
      compiles CUDA code at run time, None for one that ships compiled code; `jit_source`: the
      files of the package that rule was read from (its citation).
    """

    name: str
    kind: str = ""
    knobs: KnobFunction | None = None
    front_end: str = "setuptools"
    arch_knob: str = "TORCH_CUDA_ARCH_LIST"
    threads_knob: str | None = None
    oom_job_knobs: tuple[str, ...] = ("MAX_JOBS",)
    oom_thread_env: tuple[str, ...] = ()
    oom_thread_defines: tuple[str, ...] = ()
    gb_per_nvcc_thread: float = DEFAULT_GB_PER_NVCC_THREAD
    switches: tuple[str, ...] = ()
    cmake_defines: bool = False
    cmake_checked: bool = False
    cuda_libraries: tuple[str, ...] = ()
    smoke_by_default: bool = False
    arch_value: ArchValue | None = None
    arch_value_problem: ArchValueCheck | None = None
    predict_targets: TargetPrediction | None = None
    arch_targets: tuple[str, ...] = ()
    build_task: str = ""
    distributions: tuple[str, ...] = ()
    serving: bool = False
    jit: str | None = None
    jit_source: str = ""

    def __post_init__(self) -> None:
        if self.front_end not in FRONT_ENDS:
            raise ValueError(
                f"package {self.name}: front end {self.front_end!r} is not one of {FRONT_ENDS}"
            )
        if bool(self.kind) != (self.knobs is not None):
            raise ValueError(f"package {self.name}: a build kind and its knobs go together")
        if self.jit and not self.jit_source:
            raise ValueError(f"package {self.name}: a toolchain rule cites the files read")

    @property
    def builds(self) -> bool:
        """Whether the tool builds it (a release-only package is installed, never built)."""
        return self.knobs is not None

    @property
    def cmake(self) -> bool:
        """Whether its build runs CMake (scikit-build-core)."""
        return self.front_end == "scikit-build-core"
