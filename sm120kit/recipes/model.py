"""A recipe as data: the typed records `recipes/select.py` loads, selects and resolves."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .. import drivers as drv
from .. import engines
from ..errors import RecipeError
from ..stack.lock import Lock, StackSpec
from .checks import _arch_admitted, _display, _torch_admits, normalize_arch
from .resolved import CudaValues, PackageValues, Resolved, StackValues, Target, TorchValues

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


@dataclass
class ResolvedRecipe:
    """A selected recipe with inventory overrides applied.

    `view` is the typed, frozen result every operation reads (`Resolved`: ``resolved.torch``,
    ``resolved.cuda``, ``resolved.target``, ``resolved.stack``, ``resolved.packages`` are its
    fields, read through here). `values` keeps the same values under the flat dotted keys the
    override scheme names (``"cuda.version"``, ``"packages.mypkg.knobs.MAX_JOBS"``), for the
    recipe-resolution modules and plan's provenance table only (`rows`); `sources` maps those
    keys to where each came from (``"recipes/r580.toml"``,
    ``"inventory/host_vars/gpu1.yaml (recipe.torch.index)"``, ``"--driver flag"``, ...).
    `problems` lists, per package, why it cannot be built with these values (the build layer
    refuses those packages); `notes` are warnings for `plan`.
    """

    recipe: Recipe
    selection: Selection
    values: dict[str, Any]
    sources: dict[str, str]
    problems: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: The recipe's package entries for the resolved torch (Recipe.packages_for); the recipe's
    #: whole list when empty.
    specs: list[PackageSpec] = field(default_factory=list)
    #: The typed values (set by `sm120kit.recipes.select.resolve_for_host` once they are checked).
    view: Resolved | None = None

    @property
    def typed(self) -> Resolved:
        """`view`, which resolution always sets (a RecipeError before it is means no host)."""
        if self.view is None:
            raise RecipeError(f"recipe {self.recipe.name}: not resolved for a host yet")
        return self.view

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

    def rows(self) -> list[tuple[str, Any, str]]:
        """(key, value, source) for every value, sorted by key: what `plan` prints, derived
        from the typed values."""
        flat = self.typed.flat()
        return [(k, flat[k], self.sources.get(k, "")) for k in sorted(flat)]

    def package_names(self) -> list[str]:
        return [p.name for p in self.package_specs()]

    def package_specs(self) -> list[PackageSpec]:
        """The package entries these values came from, one per name."""
        if self.specs:
            return self.specs
        return self.recipe.packages_for(self.torch.version if self.view else "")

    def package(self, name: str) -> dict[str, Any]:
        """One package's values as a nested dict (``source`` and ``knobs`` as sub-dicts)."""
        if name not in self.package_names():
            raise KeyError(name)
        return self.packages[name].as_dict()
