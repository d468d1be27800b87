"""A host's resolved recipe as typed values: what every operation reads.

`sm120kit.recipes.select.resolve_for_host` selects a recipe, applies the host's ``recipe.*``
overrides, derives what follows and checks the result, parsing flat dotted keys (the
override scheme's names: ``recipe.torch.version`` overrides ``torch.version``); each package's
values follow from the torch (`sm120kit.recipes.model.packages_for_torch`, again for another
torch in `ResolvedRecipe.with_torch`). It builds one frozen `Resolved` per host: ``resolved.torch.version``,
``resolved.cuda.version`` (a `CudaVersion`), ``resolved.target.arch`` (an `Arch`, with its
source), ``resolved.stack``, ``resolved.packages[name]``. The flat ``[key, value, source]``
rows plan prints are derived back from it (`Resolved.flat`), so what plan shows is what the
operations read. Operations never read a dotted key (tests/rules/test_no_dotted_reads.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..drivers import CudaVersion
from ..packages.base import PackageDescriptor
from ..remote.lib.arch import Arch
from .target_arch import TargetArch

#: A knob's value: the recipe schema admits strings, numbers and booleans (recipe_checks._knob).
KnobValue = str | int | float | bool


@dataclass(frozen=True)
class CudaValues:
    """The toolkit this host gets (``cuda.*``)."""

    version: CudaVersion
    method: str  # runfile | pip | apt
    gcc_max: int
    mirror: str
    runfile: str
    sha256: str  # "" when unknown
    url: str
    pip_packages: tuple[str, ...]
    apt_packages: tuple[str, ...]


@dataclass(frozen=True)
class TorchValues:
    """The torch the build env gets (``torch.*``)."""

    version: str
    index: str
    cuda: str  # the torch build's CUDA "X.Y", or "cpu"

    @property
    def is_cpu(self) -> bool:
        return self.cuda == "cpu"


@dataclass(frozen=True)
class PackageValues:
    """One recipe package after overrides (``packages.<name>.*``), with the descriptor that
    builds it (`sm120kit.packages.registry.descriptor`, looked up once at resolution: every
    operation reads ``pkg.descriptor``, none asks the registry again)."""

    name: str
    version: str
    source: Mapping[str, str]
    patches: tuple[str, ...]
    knobs: Mapping[str, KnobValue]
    torch: str  # the package's torch specifier, "" for any
    needs_cuda_torch: bool
    dependencies: tuple[Mapping[str, object], ...]
    # Not a value of the recipe: left out of equality and of the repr.
    descriptor: PackageDescriptor = field(compare=False, repr=False, kw_only=True)

    def as_dict(self) -> dict[str, Any]:
        """The nested dict `sm120kit.builds.sources` and the build layer's records take."""
        return {
            "name": self.name,
            "version": self.version,
            "source": dict(self.source),
            "patches": list(self.patches),
            "knobs": dict(self.knobs),
            "torch": self.torch,
            "needs_cuda_torch": self.needs_cuda_torch,
            "dependencies": [_plain(d) for d in self.dependencies],
        }


@dataclass(frozen=True)
class StackValues:
    """The recipe's serving stack (``stack.*``; the ``[stack]`` table, sm120kit/stack/lock.py)."""

    top: str
    lock: str
    reason: str
    build: tuple[str, ...]


@dataclass(frozen=True)
class Target:
    """What the host's builds are for: the driver and the arch, each with where it came from
    (`sm120kit.recipes.target_arch` decides the arch for every purpose)."""

    driver: str | None
    driver_source: str
    arch: TargetArch


@dataclass(frozen=True)
class Resolved:
    """One host's recipe, resolved: typed, frozen, built once (`from_flat`)."""

    recipe: str
    description: str
    drivers: str
    arch: tuple[str, ...]  # the recipe's target archs (TORCH_CUDA_ARCH_LIST entries)
    python: tuple[str, ...]  # X.Y in order of preference
    cuda: CudaValues
    torch: TorchValues
    packages: Mapping[str, PackageValues]
    stack: StackValues | None
    target: Target

    @property
    def target_arch(self) -> Arch | None:
        return self.target.arch.arch

    @classmethod
    def from_flat(
        cls, values: Mapping[str, Any], packages: Mapping[str, PackageValues], target: Target
    ) -> Resolved:
        """The typed values of the flat ones `recipes/select.py` parsed, with the `packages`
        resolved for its torch (`sm120kit.recipes.model.packages_for_torch`)."""
        v = values
        stack = None
        if "stack.top" in v:
            stack = StackValues(
                top=str(v["stack.top"]),
                lock=str(v["stack.lock"]),
                reason=str(v["stack.reason"]),
                build=tuple(str(b) for b in v.get("stack.build") or ()),
            )
        return cls(
            recipe=str(v["recipe"]),
            description=str(v["description"]),
            drivers=str(v["drivers"]),
            arch=tuple(str(a) for a in v["arch"]),
            python=tuple(str(p) for p in v["python"]),
            cuda=CudaValues(
                version=CudaVersion.parse(v["cuda.version"]),
                method=str(v["cuda.method"]),
                gcc_max=int(v["cuda.gcc_max"]),
                mirror=str(v["cuda.mirror"]),
                runfile=str(v["cuda.runfile"]),
                sha256=str(v["cuda.sha256"]),
                url=str(v["cuda.url"]),
                pip_packages=tuple(str(p) for p in v["cuda.pip_packages"]),
                apt_packages=tuple(str(p) for p in v["cuda.apt_packages"]),
            ),
            torch=TorchValues(
                version=str(v["torch.version"]),
                index=str(v["torch.index"]),
                cuda=str(v["torch.cuda"]),
            ),
            packages=packages,
            stack=stack,
            target=target,
        )

    def flat(self) -> dict[str, Any]:
        """The dotted keys plan's provenance table shows (the override scheme's names), each
        from the typed value; lists stay lists, as the JSON of plan has them."""
        out: dict[str, Any] = {
            "recipe": self.recipe,
            "description": self.description,
            "drivers": self.drivers,
            "arch": list(self.arch),
            "python": list(self.python),
        }
        c = self.cuda
        out.update(
            {
                "cuda.version": str(c.version),
                "cuda.method": c.method,
                "cuda.gcc_max": c.gcc_max,
                "cuda.mirror": c.mirror,
                "cuda.runfile": c.runfile,
                "cuda.sha256": c.sha256,
                "cuda.url": c.url,
                "cuda.pip_packages": list(c.pip_packages),
                "cuda.apt_packages": list(c.apt_packages),
                "torch.version": self.torch.version,
                "torch.index": self.torch.index,
                "torch.cuda": self.torch.cuda,
            }
        )
        for name, pkg in self.packages.items():
            base = f"packages.{name}."
            out[base + "version"] = pkg.version
            for k, text in pkg.source.items():
                out[f"{base}source.{k}"] = text
            out[base + "patches"] = list(pkg.patches)
            for k, x in pkg.knobs.items():
                out[f"{base}knobs.{k}"] = x
            out[base + "torch"] = pkg.torch
            out[base + "needs_cuda_torch"] = pkg.needs_cuda_torch
            out[base + "dependencies"] = [_plain(d) for d in pkg.dependencies]
        if self.stack is not None:
            s = self.stack
            out.update(
                {
                    "stack.top": s.top,
                    "stack.lock": s.lock,
                    "stack.reason": s.reason,
                    "stack.build": list(s.build),
                }
            )
        if self.target.driver is not None:
            out["target.driver"] = self.target.driver
        if self.target.arch.cc is not None:
            out["target.arch"] = self.target.arch.cc
        return out


def frozen(value: Any) -> Any:
    """A dependency table as read-only mappings and tuples (the typed view is frozen)."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: frozen(x) for k, x in value.items()})
    if isinstance(value, list | tuple):
        return tuple(frozen(x) for x in value)
    return value


def _plain(value: Any) -> Any:
    """A frozen dependency table as the dicts and lists the recipe file wrote."""
    if isinstance(value, Mapping):
        return {k: _plain(x) for k, x in value.items()}
    if isinstance(value, tuple):
        return [_plain(x) for x in value]
    return value
