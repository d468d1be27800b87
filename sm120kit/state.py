"""What provisioning learns about a host as it goes: facts, recipe, toolkit, env, wheels.

Data flows one way: inventory -> facts -> recipe (ProvisionState.resolved) -> plan/ops fill
`toolkit`, `env` and `packages` -> results. Every operation takes (ctx, state) and ensures its
prerequisites through the same state, so `build` alone and `provision` share one path.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

from .errors import RecipeError
from .host_facts import HostFacts
from .inventory.host import Host
from .paths import HostPaths
from .recipes.files import stack_package_hint
from .recipes.select import ResolvedRecipe
from .runner.run_flags import RunFlags
from .stack.lock import Lock


@dataclass
class Toolkit:
    """A CUDA toolkit usable as CUDA_HOME on the host."""

    version: str  # toolkit release, e.g. "13.0.2" (nvcc's version when the release is unknown)
    release: str  # major.minor, e.g. "13.0"
    nvcc_version: str | None  # e.g. "13.0.88"
    cuda_home: str
    nvcc: str
    source: str  # system | work_root | CUDA_HOME | PATH | planned (check mode: not there yet)
    method: str = ""  # a planned toolkit's install method (runfile | pip | apt)

    def to_dict(self) -> dict[str, Any]:
        """The toolkit as the run's JSON shows it; `method` only where a plan set it (an
        installed toolkit's record stays as it was)."""
        out = asdict(self)
        if not self.method:
            del out["method"]
        return out


@dataclass
class PyEnv:
    """The recipe's managed Python environment on the host."""

    path: str
    python: str
    python_version: str
    python_abi: str  # e.g. cp311
    platform: str  # e.g. linux_x86_64
    torch_version: str
    torch_cuda: str | None  # None for a CPU build
    cxx11_abi: bool
    torch_arch_list: list[str] = field(default_factory=list)
    # What ensure_env would build (check mode), not what is there: torch's version string is
    # known only once it is installed (its local label, `2.13.0+cpu`, comes from the index).
    planned: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PythonChoice:
    """The host's Python X.Y for this run: found (`path`), to install (`install`), or
    refused (`refusal`, one line)."""

    version: str | None
    path: str | None
    why: str
    install: list[str] = field(default_factory=list)  # commands, sudo included
    query: list[str] = field(default_factory=list)  # archive lookups still to run (apt/dnf)
    refusal: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "path": self.path,
            "why": self.why,
            "install": list(self.install),
            "refusal": self.refusal,
        }


class PackageRecord(TypedDict, total=False):
    """One package's part of the host's result (``packages.<name>`` of the run's JSON): each
    key appears when the run gets to it (a package smoke judged but no build made holds only
    ``smoke``)."""

    version: str
    wheel_from: str | None  # "build" | "cache:<store>" | None (not obtained)
    source_digest: str
    dependencies: list[list[str]]  # [dir, "tree:<hex>"] per fetched dependency
    patches: list[dict[str, str]]
    env: dict[str, str]
    pip_args: list[str]
    key: str
    reinstall_reason: str
    wheel: str | None
    sha256: str | None
    log: str | None
    seconds: float
    installed: str  # "already" | "now"
    compile_cache: dict[str, object]
    oom_retries: list[str]
    smoke: dict[str, object]


@dataclass
class ProvisionState:
    """Per-host provisioning state shared by the operations of one run."""

    host: Host
    facts: HostFacts
    resolved: ResolvedRecipe
    toolkit: Toolkit | None = None
    env: PyEnv | None = None
    packages: dict[str, PackageRecord] = field(default_factory=dict)
    flags: RunFlags = field(default_factory=RunFlags)
    #: ``--package``: the packages this run builds (None: the host's, `host_packages`).
    wanted: list[str] | None = None
    #: The serving stack's own builds this run (lock entries marked build, ``stack.build``):
    #: their toolkit library needs count like the named packages'.
    stack_builds: list[str] = field(default_factory=list)
    #: The ``python`` step's choice (`sm120kit/ops/python.py`) and the stack's lock of that
    #: Python (None: no stack or not chosen yet).
    python: PythonChoice | None = None
    stack_lock: Lock | None = None

    def host_packages(self) -> list[str]:
        """The recipe packages this host builds: host var ``provision_packages`` (default
        none: a host's provision is its recipe's serving stack, sm120kit/stack/choice.py)."""
        return list(self.host.vars.get("provision_packages") or [])

    def run_packages(self) -> list[str]:
        """The packages this run builds: ``--package``, else `host_packages`. A name the
        recipe lacks is a RecipeError naming the host and the recipe."""
        known = self.resolved.package_names()
        wanted = list(self.wanted) if self.wanted is not None else self.host_packages()
        unknown = [p for p in wanted if p not in known]
        if unknown:
            raise RecipeError(
                f"{self.host.name}: package {', '.join(unknown)} is not in recipe "
                f"{self.resolved.recipe.name} ({self.resolved.recipe.source}); it has: "
                f"{', '.join(known)}"
                + "".join(stack_package_hint(self.resolved.recipe, n) for n in unknown)
            )
        return wanted

    @property
    def paths(self) -> HostPaths:
        return HostPaths(self.facts.work_root)

    @property
    def arch_list(self) -> list[str]:
        return list(self.resolved.arch)

    @property
    def cross_build(self) -> bool:
        """No GPU on the host: building for a target given by flags or host vars."""
        return not self.facts.gpu.present
