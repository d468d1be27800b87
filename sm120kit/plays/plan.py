"""From facts to a per-host plan: the state every operation starts from.

`prepare` turns a host's facts and the recipes into a ProvisionState (which recipe, which
toolkit, which values from where). The operations (sm120kit/ops/*) then each ensure one
thing; in check mode they only probe and record "would change" with the exact commands.
`provision` (sm120kit/plays/provision.py) runs toolkit -> env -> builds (through the wheel cache)
-> smoke, as one run; smoke reuses a remembered verdict when nothing it depends on changed
(sm120kit/plays/smoke_memo.py). This module imports no operation, so each of them can import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..facts import gather
from ..host_facts import HostFacts
from ..recipes.select import Recipe, load_recipes, resolve_for_host, select_recipe
from ..runner.pool import HostContext, HostOp
from ..runner.run_flags import RunFlags
from ..state import ProvisionState


@dataclass
class PlanOptions:
    """Flags shared by recipe-driven tasks."""

    driver: str | None = None
    arch: str | None = None
    recipe: str | None = None
    #: ``--engine``: the serving engine, over the hosts' ``stack`` var (sm120kit/engines.py)
    engine: str | None = None
    recipes_dir: str | None = None
    packages: list[str] | None = None  # None: the host's provision_packages, else the recipe's
    flags: RunFlags = field(default_factory=RunFlags)
    #: The same flags by name (``{"max_jobs": 3}``), for callers that have them so; they
    #: replace `flags`, checked (an unknown name is a TypeError).
    extra: dict[str, Any] = field(default_factory=dict)

    _recipes: dict[str, Recipe] | None = None

    def __post_init__(self) -> None:
        if self.extra:
            self.flags = RunFlags.from_mapping(self.extra)

    @property
    def package(self) -> str:
        """The one package of a single-package task (``build``, ``cache.key``: its
        ``--package``), carried only here so that the task names it once."""
        if not self.packages or len(self.packages) != 1:
            raise ValueError(f"one package is needed here, not {self.packages!r}")
        return self.packages[0]

    def recipes(self) -> dict[str, Recipe]:
        """Recipes are loaded (and validated) once per run, before any host is touched."""
        if self._recipes is None:
            directory = Path(self.recipes_dir) if self.recipes_dir else None
            self._recipes = load_recipes(directory)
        return self._recipes


def prepare(ctx: HostContext, opts: PlanOptions) -> ProvisionState:
    """Facts (one command), then the recipe for this host with overrides and their sources."""
    if ctx.state is not None:
        return ctx.state
    facts = gather(ctx)
    with ctx.step("recipe") as step:
        resolved = resolve_for_host(
            opts.recipes(),
            ctx.host,
            facts,
            driver=opts.driver,
            arch=opts.arch,
            forced=opts.recipe,
            engine=opts.engine,
        )
        step.message = f"{resolved.recipe.name}: {resolved.selection.reason}"
    state = ProvisionState(
        ctx.host, HostFacts.from_json(facts), resolved, flags=opts.flags, wanted=opts.packages
    )
    ctx.state = state
    ctx.set(
        recipe=resolved.recipe.name,
        cuda=str(resolved.cuda.version),
        reason=resolved.selection.reason,
    )
    return state


def package_names(state: ProvisionState, opts: PlanOptions) -> list[str]:
    """Which recipe packages this run builds: --package, else host var provision_packages
    (`ProvisionState.run_packages`; `prepare` put ``opts.packages`` into the state)."""
    return state.run_packages()


def recipes_op(opts: PlanOptions) -> HostOp:
    """`invoke recipes --host H`: which recipe each host gets, and why."""

    def run(ctx: HostContext) -> None:
        state = prepare(ctx, opts)
        ctx.set(
            arch=list(state.resolved.arch),
            torch=state.resolved.torch.version,
            problems=state.resolved.problems,
            notes=state.resolved.notes,
        )

    return run


def recipes_catalog(opts: PlanOptions, driver: str | None, arch: str | None) -> dict[str, Any]:
    """`invoke recipes` without --host: every recipe, or the one a --driver selects."""
    recipes = opts.recipes()
    doc: dict[str, Any] = {
        "recipes": {
            name: {
                "file": r.source,
                "drivers": str(r.drivers),
                "arch": r.arch,
                "cuda": r.cuda.version,
                "cuda_method": r.cuda.method,
                "cuda_choices": [
                    {
                        "drivers": str(c.drivers) if c.drivers else "",
                        "version": c.version,
                        "method": c.method,
                    }
                    for c in r.cuda.choices
                ],
                "torch": r.torch.version,
                "torch_index": r.torch.index,
                "python": list(r.pythons or (r.python,)),
                "packages": [f"{p.name}=={p.version}" for p in r.packages],
                "description": r.description,
            }
            for name, r in sorted(recipes.items())
        }
    }
    if driver:
        # Without --arch the catalog answers for SM120 (compute capability 12.0), the target
        # every recipe serves.
        sel = select_recipe(recipes, driver=driver, arch=arch or "12.0", forced=opts.recipe)
        doc["selected"] = {
            "recipe": sel.recipe.name,
            "cuda": sel.cuda_version,
            "driver": sel.driver,
            "arch": sel.arch,
            "reason": sel.reason,
        }
    return doc
