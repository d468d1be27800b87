"""The target arch of a host: one rule, for every purpose.

Which GPU a host's kernels are for decides the recipe (`sm120kit.recipes.select.select_recipe`), what
the serving stack is verified for (sm120kit/stack/choice.py, sm120kit/plays/stack.py), what `smoke`
judges extension modules against, and what `preflight` judges a launch's backends against.
`choose_target_arch` decides it for all of them, first found wins:

1. ``--arch`` (this run's explicit statement);
2. the host var ``target_arch`` (the inventory's explicit statement: this host's builds are
   for that arch, on a box without a GPU or one whose GPU is not the target);
3. the GPU in the facts (``nvidia-smi``'s ``compute_cap``; on a box mixing GPUs the first one
   a recipe serves, else the first);
4. the recipe's first ``arch`` (only when a recipe was forced with ``--recipe`` and nothing
   above says: no recipe can be chosen by arch before the arch is known).

Why statements before the GPU: a ``target_arch`` exists only to say something the GPU does not;
reading the GPU first would make the var dead on every host that has one, and the stack built
for the var would then be smoked and preflighted for another arch (the bug this rule ended).
To judge a host's own GPU where ``target_arch`` says otherwise, pass ``--arch``. `plan` names
the source in its ``target.arch`` row (`TargetArch.source`).

Pure: facts and inventory vars in, a `TargetArch` out; nothing here touches a host.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import RecipeError
from ..inventory.host import Host
from ..remote.lib.arch import Arch

#: The host var that states a host's target arch (and `TARGET_DRIVER_VAR` its driver).
TARGET_ARCH_VAR = "target_arch"

Kind = Literal["flag", "host var", "gpu", "recipe", "none"]

#: `smoke`'s and `preflight`'s JSON ``arch_source`` per kind (docs/reference.md).
_LABELS: Mapping[str, str] = {
    "flag": "--arch",
    "host var": "host var target_arch",
    "gpu": "GPU (facts)",
}
FACTS_ARCH = "facts (nvidia-smi compute_cap)"


@dataclass(frozen=True)
class TargetArch:
    """A host's target compute capability (no ``a``/``f`` suffix, no PTX) and where it came
    from: `source` as plan's provenance table names it (``--arch flag``,
    ``inventory/host_vars/gpu1.yaml (target_arch)``, ``facts (nvidia-smi compute_cap)``,
    ``recipes/r580.toml (arch)``), `kind` the rule that decided it."""

    arch: Arch | None
    source: str
    kind: Kind
    recipe: str | None = None

    @property
    def cc(self) -> str | None:
        """``12.0``, or None when nothing named a target."""
        return self.arch.cc_text if self.arch is not None else None

    @property
    def label(self) -> str:
        """The short source `smoke` and `preflight` report as ``arch_source``."""
        if self.kind == "recipe":
            return f"recipe {self.recipe} arch" if self.recipe else "recipe arch"
        if self.kind == "none":
            return "none (no --arch, target_arch, GPU or recipe)"
        return _LABELS[self.kind]


def _capability(value: Any) -> Arch:
    arch = Arch.parse(value)
    return Arch(arch.major, arch.minor)


def gpu_capabilities(facts: Mapping[str, Any] | None) -> list[Arch]:
    """The distinct compute capabilities of the host's GPUs, in GPU order (none without a GPU
    or with a driver too old to report them)."""
    gpu = (facts or {}).get("gpu")
    if not isinstance(gpu, Mapping) or not gpu.get("present", True):
        return []
    caps: list[Arch] = []
    for g in gpu.get("gpus") or []:
        cap = g.get("compute_cap") if isinstance(g, Mapping) else None
        if cap in (None, ""):
            continue
        try:
            arch = _capability(cap)
        except ValueError:
            continue
        if arch not in caps:
            caps.append(arch)
    return caps


def _admits(arch: Arch, entries: Iterable[str]) -> bool:
    for entry in entries:
        try:
            if _capability(entry) == arch:
                return True
        except ValueError:
            continue
    return False


def choose_target_arch(
    host: Host,
    facts: Mapping[str, Any] | None,
    *,
    flag: str | None = None,
    served: Iterable[Sequence[str]] = (),
    recipe: tuple[str, str, Sequence[str]] | None = None,
) -> TargetArch:
    """The target arch of `host` by the module's rule: ``--arch`` (`flag`), host var
    ``target_arch``, the GPU in `facts`, the `recipe`'s first arch.

    `served`: the arch lists of the recipes that could serve the host (a box mixing GPUs
    targets the first GPU one of them admits); `recipe`: (name, file, arch list) of the
    host's recipe once one is chosen. A flag or host var that is not a compute capability is a
    RecipeError naming it.
    """
    if flag not in (None, ""):
        try:
            return TargetArch(_capability(str(flag).strip()), "--arch flag", "flag")
        except ValueError as e:
            raise RecipeError(f"--arch {flag!r}: {e}") from None
    value = host.vars.get(TARGET_ARCH_VAR)
    if value not in (None, ""):
        source = f"{host.var_sources.get(TARGET_ARCH_VAR, 'inventory')} ({TARGET_ARCH_VAR})"
        try:
            return TargetArch(_capability(str(value).strip()), source, "host var")
        except ValueError as e:
            raise RecipeError(f"{source}: {e}") from None
    caps = gpu_capabilities(facts)
    if caps:
        lists = [list(s) for s in served]
        for cap in caps:
            if any(_admits(cap, entries) for entries in lists):
                return TargetArch(cap, FACTS_ARCH, "gpu")
        return TargetArch(caps[0], FACTS_ARCH, "gpu")
    if recipe is not None:
        name, file, entries = recipe
        for entry in entries:
            try:
                return TargetArch(_capability(entry), f"{file} (arch)", "recipe", name)
            except ValueError:
                continue
    return TargetArch(None, "", "none")
