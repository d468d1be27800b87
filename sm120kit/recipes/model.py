"""A recipe as data: the typed records `recipes/select.py` loads, selects and resolves."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .. import drivers as drv
from .. import engines
from ..builds import knobs
from ..errors import RecipeError
from ..packages import registry
from ..packages.base import PackageDescriptor
from ..stack.lock import Lock, StackSpec
from .checks import (
    _SOURCE_KEYS,
    SOURCE_KINDS,
    _arch_admitted,
    _display,
    _torch_admits,
    _torch_problem,
    normalize_arch,
    spec_text,
)
from .resolved import (
    CudaValues,
    KnobValue,
    PackageValues,
    Resolved,
    StackValues,
    Target,
    TorchValues,
    frozen,
)

# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class CudaChoice:
    """The effective toolkit settings for one driver sub-range (or the ``[cuda]`` default).

    `origins` maps each field to the table that set it (``"cuda"``, ``"cuda.choices[1]"``)
    or ``"derived"`` (from `sm120kit.drivers`).
    """

    key: str
    drivers: SpecifierSet | None
    version: str
    method: str
    gcc_max: int
    runfile: str
    sha256: str
    pip_packages: tuple[str, ...]
    origins: Mapping[str, str]


@dataclass
class CudaSpec:
    """The ``[cuda]`` table: the branch default plus per-driver choices."""

    version: str
    method: str
    gcc_max: int
    mirror: str
    default: CudaChoice
    choices: list[CudaChoice] = field(default_factory=list)

    def choose(self, driver: Version | None) -> CudaChoice:
        """First choice whose ``drivers`` admits `driver`, else the default."""
        if driver is not None:
            for choice in self.choices:
                if choice.drivers is not None and choice.drivers.contains(driver):
                    return choice
        return self.default

    def all(self) -> list[CudaChoice]:
        return [self.default, *self.choices]


@dataclass
class TorchSpec:
    version: str
    index: str
    cuda: str  # the torch build's CUDA "X.Y", or "cpu"


@dataclass
class PackageSpec:
    name: str
    version: str
    source: dict[str, str]
    patches: list[str] = field(default_factory=list)
    knobs: dict[str, Any] = field(default_factory=dict)
    torch: SpecifierSet | None = None
    needs_cuda_torch: bool = True
    #: Extension modules that by design carry no code for the recipe's arch, with the reason
    #: (``smoke`` reports them as info instead of judging them); module name -> reason.
    not_for_arch: dict[str, str] = field(default_factory=dict)
    dependencies: list[dict[str, Any]] = field(default_factory=list)
    #: ``[packages.build]`` (read from the pinned tree): CMake options the tool leaves unset ->
    #: why (``--explain`` rows), and why upstream's full build cannot be pinned ("" = it can).
    not_set: dict[str, str] = field(default_factory=dict)
    no_full_build: str = ""
    #: Not written in the recipe: taken from its serving stack's lock (the locked release of a
    #: package the tool builds, `files.derive_stack_packages`); says from where, for `plan`.
    derived: str = ""


@dataclass
class Recipe:
    """One validated recipe file."""

    name: str
    path: Path
    description: str
    drivers: SpecifierSet
    arch: list[str]
    python: str
    cuda: CudaSpec
    torch: TorchSpec
    packages: list[PackageSpec]
    raw: dict[str, Any]
    patches_dir: Path
    #: The serving stack (``[stack]``) and its lock, checked on load (sm120kit/stack/lock.py).
    stack: StackSpec | None = None
    lock: Lock | None = None
    #: ``python`` in order of preference (`python` is its first), and the stack's lock of
    #: each Python it has one for (sm120kit/python_choice.py picks one per host).
    pythons: tuple[str, ...] = ()
    locks: dict[str, Lock] = field(default_factory=dict)
    #: Where `torch` came from when not the recipe's own [torch]: the shared stack's line,
    #: e.g. "recipes/shared/stacks.toml (stack cu13)"; "" for the recipe file.
    torch_from: str = ""
    #: Engine name -> this recipe with its [stack] the shared line that engine's `engines`
    #: entry names (torch, lock and derived packages its own): `for_engine` picks one.
    variants: dict[str, Recipe] = field(default_factory=dict)

    def for_engine(self, engine: str | None, where: str = "") -> Recipe:
        """This recipe for a host choosing `engine` (None or the stack's own: itself); a
        RecipeError naming `where` (the var or flag) when its stack offers no such engine."""
        own = engines.for_top(self.stack.top) if self.stack is not None else None
        if not engine or (own is not None and own.name == engine):
            return self
        if engine in self.variants:
            return self.variants[engine]
        offered = [own.name] if own is not None else []
        offered += sorted(self.variants)
        raise RecipeError(
            f"{where or 'engine'} {engine!r}: recipe {self.name} offers "
            f"{', '.join(offered) or 'no serving stack'}"
            + (
                f" (known engines: {', '.join(engines.names())})"
                if engines.find(engine) is None
                else ""
            )
        )

    @property
    def source(self) -> str:
        """The file as error messages and `plan` name it."""
        return _display(self.path)

    def admits_driver(self, driver: object) -> bool:
        return self.drivers.contains(drv.parse_driver_version(driver))

    def admits_arch(self, arch: object) -> bool:
        return _arch_admitted(normalize_arch(arch), self.arch)

    def packages_for(self, torch_version: str) -> list[PackageSpec]:
        """One entry per package name, in recipe order: the entry whose ``torch`` admits
        `torch_version`. A name listed once is that entry whatever the torch (the build layer
        then names the mismatch as a problem); a name listed per torch range with none admitting
        the torch falls back to its first entry, and the same problem says why."""
        chosen: dict[str, PackageSpec] = {}
        for pkg in self.packages:
            current = chosen.get(pkg.name)
            if current is None or (
                not _torch_admits(current.torch, torch_version)
                and _torch_admits(pkg.torch, torch_version)
            ):
                chosen[pkg.name] = pkg
        return list(chosen.values())


@dataclass
class Selection:
    """Which recipe and toolkit serve a driver/arch, and why (one line)."""

    recipe: Recipe
    cuda: CudaChoice
    driver: str | None
    arch: str | None
    forced: bool
    reason: str

    @property
    def cuda_version(self) -> str:
        return self.cuda.version


#: A host's checked ``recipe.packages.<name>.*`` overrides: package name -> the key under
#: ``packages.<name>.`` (``version``, ``source.ref``, ``knobs.MAX_JOBS``) -> (value, where it
#: was set). Kept on the resolved recipe: a package's entry, and so what they apply to, depends
#: on the torch (`ResolvedRecipe.with_torch`).
PackageOverrides = Mapping[str, Mapping[str, tuple[Any, str]]]


@dataclass(frozen=True)
class ResolvedRecipe:
    """A selected recipe with inventory overrides applied, resolved once per host.

    `typed` holds the frozen values every operation reads (`Resolved`: ``resolved.torch``,
    ``resolved.cuda``, ``resolved.target``, ``resolved.stack``, ``resolved.packages`` are its
    fields, read through here). `sources` maps the override scheme's flat dotted keys
    (``"cuda.version"``, ``"packages.mypkg.knobs.MAX_JOBS"``) to where each value came from
    (``"recipes/r580.toml"``, ``"inventory/host_vars/gpu1.yaml (recipe.torch.index)"``,
    ``"--driver flag"``, ...): plan's provenance table (`rows`). `problems` lists, per package,
    why it cannot be built with these values (the build layer refuses those packages);
    `notes` are warnings for `plan`. `specs` are the recipe's package entries for the torch
    (`Recipe.packages_for`) and `overrides` the host's package overrides, so `with_torch`
    gives the same recipe for another torch without resolving it again.
    """

    recipe: Recipe
    selection: Selection
    typed: Resolved
    sources: Mapping[str, str]
    problems: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    specs: tuple[PackageSpec, ...] = ()
    overrides: PackageOverrides = field(default_factory=dict)

    @property
    def torch(self) -> TorchValues:
        return self.typed.torch

    @property
    def cuda(self) -> CudaValues:
        return self.typed.cuda

    @property
    def target(self) -> Target:
        return self.typed.target

    @property
    def stack(self) -> StackValues | None:
        return self.typed.stack

    @property
    def packages(self) -> Mapping[str, PackageValues]:
        return self.typed.packages

    @property
    def arch(self) -> tuple[str, ...]:
        """The recipe's target archs after overrides (TORCH_CUDA_ARCH_LIST entries)."""
        return self.typed.arch

    @property
    def python(self) -> tuple[str, ...]:
        """X.Y in order of preference, after overrides."""
        return self.typed.python

    @property
    def values(self) -> dict[str, Any]:
        """The values under the override scheme's flat dotted keys, derived from `typed`
        (what plan's rows show; operations read `typed`, tests/rules/test_no_dotted_reads.py)."""
        return self.typed.flat()

    def rows(self) -> list[tuple[str, Any, str]]:
        """(key, value, source) for every value, sorted by key: what `plan` prints, derived
        from the typed values."""
        flat = self.typed.flat()
        return [(k, flat[k], self.sources.get(k, "")) for k in sorted(flat)]

    def package_names(self) -> list[str]:
        return [p.name for p in self.specs]

    def package_specs(self) -> list[PackageSpec]:
        """The package entries these values came from, one per name."""
        return list(self.specs)

    def descriptor(self, name: str) -> PackageDescriptor:
        """The descriptor building package `name`: its resolved entry's (`PackageValues.
        descriptor`), or, for a name this recipe lacks (a host var naming another package),
        the registry's answer for it."""
        pkg = self.packages.get(name)
        return pkg.descriptor if pkg is not None else registry.descriptor(name)

    def package(self, name: str) -> dict[str, Any]:
        """One package's values as a nested dict (``source`` and ``knobs`` as sub-dicts)."""
        if name not in self.package_names():
            raise KeyError(name)
        return self.packages[name].as_dict()

    def with_torch(self, version: str, *, index: str, cuda: str, source: str) -> ResolvedRecipe:
        """This recipe for another torch (`source`: where that torch comes from, e.g. a stack
        lock): each package's entry for it (`Recipe.packages_for`) with the host's package
        overrides applied, and its problems, as resolution gives them. A RecipeError when
        that torch cannot take the recipe's toolkit."""
        problem = _torch_problem(cuda, index, [str(self.cuda.version)])
        if problem:
            raise RecipeError(
                f"torch.cuda = {cuda!r} (from {source}): {problem} (torch.index from {source})"
            )
        torch = TorchValues(version=version, index=index, cuda=cuda)
        kept = {k: v for k, v in self.sources.items() if not k.startswith(_PACKAGES)}
        kept.update({f"torch.{k}": source for k in ("version", "index", "cuda")})
        per_torch = packages_for_torch(self.recipe, torch, self.arch, kept, self.overrides)
        return replace(
            self,
            typed=replace(self.typed, torch=torch, packages=per_torch.values),
            sources={**kept, **per_torch.sources},
            problems=per_torch.problems,
            notes=list(self.notes),
            specs=per_torch.specs,
        )


# --------------------------------------------------------------------------- per torch

_PACKAGES = "packages."


@dataclass(frozen=True)
class PackagesForTorch:
    """What of a resolved recipe follows from its torch: the entry of each package, its
    typed values after the host's overrides, their sources (``packages.<name>.*`` keys) and
    the packages' problems."""

    specs: tuple[PackageSpec, ...]
    values: Mapping[str, PackageValues]
    sources: Mapping[str, str]
    problems: dict[str, list[str]]


def packages_for_torch(
    recipe: Recipe,
    torch: TorchValues,
    arch: tuple[str, ...],
    sources: Mapping[str, str],
    overrides: PackageOverrides,
) -> PackagesForTorch:
    """Each package of `recipe` for `torch`: its entry (`Recipe.packages_for`), its values with
    `overrides` applied, and why it cannot be built (`sources` names where the torch and the
    arch came from). A RecipeError naming the key for a source missing what its kind needs or a
    patch file that does not exist."""
    specs = tuple(recipe.packages_for(torch.version))
    values: dict[str, PackageValues] = {}
    out_sources: dict[str, str] = {}
    problems: dict[str, list[str]] = {}
    for spec in specs:
        pkg, where = _package_values(recipe, spec, overrides.get(spec.name) or {})
        _check_package(recipe, pkg, where)
        values[spec.name] = pkg
        out_sources.update(where)
        found = _package_problems(pkg, torch, arch, {**sources, **where})
        if found:
            problems[spec.name] = found
    return PackagesForTorch(specs, MappingProxyType(values), out_sources, problems)


def _package_values(
    recipe: Recipe, spec: PackageSpec, overrides: Mapping[str, tuple[Any, str]]
) -> tuple[PackageValues, dict[str, str]]:
    """`spec` as typed values with `overrides` applied, and where each value came from."""
    index = next(i for i, p in enumerate(recipe.packages) if p is spec)
    # Not in the recipe file: its stack's lock chose the shared entry (`spec.derived`).
    origin = spec.derived or f"{recipe.source} (packages[{index}])"
    source = {k: str(v) for k, v in spec.source.items()}
    knobs: dict[str, KnobValue] = dict(spec.knobs)
    version, patches = spec.version, list(spec.patches)
    torch = spec_text(spec.torch) if spec.torch is not None else ""
    needs_cuda_torch = spec.needs_cuda_torch
    dependencies: list[Any] = [dict(d) for d in spec.dependencies]
    keys = ["version", *(f"source.{k}" for k in source), "patches"]
    keys += [f"knobs.{k}" for k in knobs] + ["torch", "needs_cuda_torch", "dependencies"]
    where = {f"packages.{spec.name}.{k}": origin for k in keys}
    for rest, (value, set_in) in overrides.items():
        head, _, key = rest.partition(".")
        if head == "source":
            source[key] = str(value)
        elif head == "knobs":
            knobs[key] = value
        elif head == "version":
            version = str(value)
        elif head == "patches":
            patches = list(value)
        elif head == "torch":
            torch = str(value)
        elif head == "needs_cuda_torch":
            needs_cuda_torch = bool(value)
        elif head == "dependencies":
            dependencies = list(value)
        where[f"packages.{spec.name}.{rest}"] = set_in
    ref_set = overrides.get("source.ref")
    if ref_set is not None and "source.note" not in overrides and "note" in source:
        # The note says what the entry's own commit is; another commit is not that tree.
        del source["note"]
        where.pop(f"packages.{spec.name}.source.note", None)
    required, optional = SOURCE_KINDS[source["kind"]]
    for k in _SOURCE_KEYS - required - optional - {"kind"}:
        source.pop(k, None)  # left over from the recipe's other kind
        where.pop(f"packages.{spec.name}.source.{k}", None)
    pkg = PackageValues(
        name=spec.name,
        version=version,
        source=MappingProxyType(source),
        patches=tuple(patches),
        knobs=MappingProxyType(knobs),
        torch=torch,
        needs_cuda_torch=needs_cuda_torch,
        dependencies=tuple(frozen(d) for d in dependencies),
        # The one lookup of the package's identity: everything after reads pkg.descriptor.
        descriptor=registry.descriptor(spec.name),
    )
    return pkg, where


def _check_package(recipe: Recipe, pkg: PackageValues, sources: Mapping[str, str]) -> None:
    base = f"packages.{pkg.name}."

    def fail(key: str, value: object, problem: str) -> None:
        raise RecipeError(f"{key} = {value!r} (from {sources.get(key, '?')}): {problem}")

    kind = pkg.source["kind"]
    for k in SOURCE_KINDS[kind][0]:
        if k not in pkg.source:
            fail(base + "source.kind", kind, f"a {kind} source needs source.{k}")
    for p in pkg.patches:
        if not (recipe.patches_dir / p).is_file():
            missing = recipe.patches_dir / p
            fail(base + "patches", list(pkg.patches), f"patch file {missing} does not exist")


def _package_problems(
    pkg: PackageValues, torch: TorchValues, arch: tuple[str, ...], sources: Mapping[str, str]
) -> list[str]:
    """Why `pkg` cannot be built with `torch` for `arch` (empty: it can)."""
    base = f"packages.{pkg.name}."
    problems: list[str] = []
    if pkg.torch and not SpecifierSet(pkg.torch).contains(torch.version, prereleases=True):
        problems.append(
            f"torch {torch.version} ({sources['torch.version']}) is outside its torch '{pkg.torch}'"
        )
    if pkg.needs_cuda_torch and torch.is_cpu:
        problems.append("a CPU torch cannot build CUDAExtension code (CUDA_HOME is None)")
    if pkg.source["kind"] == "git" and not pkg.source.get("ref"):
        # The one line says what to pass: a version string can name several commits of a
        # repository, so no commit is guessed for it.
        problems.append(
            f"source.ref is not pinned: which commit of {pkg.source.get('url')} to build "
            f"is not known; pass it as the inventory var recipe.{base}source.ref (host or group)"
        )
    return problems + _arch_knob_problems(pkg, arch, sources, pkg.descriptor)


def _arch_knob_problems(
    pkg: PackageValues, arch: tuple[str, ...], sources: Mapping[str, str], desc: PackageDescriptor
) -> list[str]:
    """A package whose build silently drops arch values it does not know (its descriptor's
    `arch_value_problem`): refuse before any build, naming the value and where it came from."""
    if desc.arch_value_problem is None or desc.arch_value is None:
        return []
    key = f"packages.{pkg.name}.knobs.{desc.arch_knob}"
    if desc.arch_knob in pkg.knobs:
        value, where = str(pkg.knobs[desc.arch_knob]), sources.get(key, "?")
        if desc.arch_knob not in where:
            where = f"{key} in {where}"
    else:
        try:
            value = desc.arch_value(knobs.parse_arch_list(list(arch)))
        except RecipeError as exc:
            return [str(exc)]
        where = f"derived from arch {list(arch)} ({sources.get('arch', '?')})"
    problem = desc.arch_value_problem(pkg.version, value)
    return [f"{problem} ({where})"] if problem else []
