"""Step ``patch:<pkg>``: the recipe's patches, applied to a copy of the pristine source.

The patches for this version are classified against a copy of the source
(``build/<pkg>/tree``) and applied there; a marker records which source and patch set the
copy holds, so a rerun re-checks (every patch "already applied") and a changed source or patch
set gets a fresh copy. A patch that does not apply stops the build with the rejected hunk;
neither tree changes.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from typing import Any

from ..builds.patching import (
    Patch,
    check_and_apply,
    for_package,
    patch_step,
    run_patch_steps,
)
from ..builds.source_store import Source
from ..cache.key import patch_digests
from ..runner.host_context import HostContext
from ..state import ProvisionState
from ..steps import Step
from ..steps import commands as render_commands

#: Marker the patch step leaves in the patched copy: which source and patches it holds.
PATCHED_MARKER = ".sm120kit-patched.json"


@dataclass
class Patched:
    """The tree a build starts from, and what each patch was found to be."""

    tree: str
    patches: list[dict[str, str]] = field(default_factory=list)


def package_patches(state: ProvisionState, name: str) -> tuple[list[Patch], list[str]]:
    """The recipe's patches that apply to this version and the recipe's torch, and a note per
    skipped one."""
    pkg = state.resolved.packages[name]
    chosen, skipped = for_package(
        state.resolved.recipe.patches_dir, pkg.patches, pkg.version, state.resolved.torch.version
    )
    return chosen, [f"{p.name} skipped: {why}" for p, why in skipped]


def patch_key(patches: list[Patch]) -> tuple[tuple[str, str], ...]:
    """(file name, sha256 of the file) per patch, in application order."""
    return patch_digests([p.path for p in patches])


def ensure_patched(ctx: HostContext, state: ProvisionState, name: str, source: Source) -> Patched:
    """Step ``patch:<pkg>``: a patched copy of the pristine source (or the source itself)."""
    chosen, skipped = package_patches(state, name)
    if not chosen:
        if skipped:
            with ctx.step(f"patch:{name}") as step:
                step.message = "; ".join(skipped)
        return Patched(source.path)
    digests = patch_key(chosen)
    tree = posixpath.join(state.paths.build(name), "tree")
    want = {"source": source.digest, "patches": [list(d) for d in digests]}
    names = ", ".join(p.name for p in chosen)
    with ctx.step(f"patch:{name}") as step:
        marker = ctx.read_json(posixpath.join(tree, PATCHED_MARKER)) if source.present else None
        if marker == want:
            # The patched copy exists: classify there first, act only where a patch is new.
            report = check_and_apply(ctx, tree, chosen, apply=False, python=ctx.host.python)
            states = _states(report.states, digests)
            fresh = [s["name"] for s in states if s["state"] != "already applied"]
            if not fresh:
                step.message = f"already applied: {names}"
                return Patched(tree, states)
            steps = patch_steps(source.path, tree, chosen, want, in_place=True)
            what = f"apply {', '.join(fresh)} in {tree}"
            if ctx.may_act(step, what, render_commands(steps)):
                step.commands = render_commands(steps)
                report = run_patch_steps(ctx, steps, [], python=ctx.host.python)
                states = _states(report.states, digests)
            return Patched(tree, states)
        steps = patch_steps(source.path, tree, chosen, want, in_place=False)
        commands = render_commands(steps)
        if not ctx.may_act(step, f"apply {names} to a copy of {source.path}", commands):
            states = [{"name": n, "sha256": d, "state": "unknown"} for n, d in digests]
            if source.present:  # classify now, so a plan already shows a patch that fails
                report = check_and_apply(
                    ctx, source.path, chosen, apply=False, python=ctx.host.python
                )
                states = _states(report.states, digests)
            return Patched(tree, states)
        step.commands = commands
        report = run_patch_steps(ctx, steps, [tree + ".new"], python=ctx.host.python)
        states = _states(report.states, digests)
        step.message = "; ".join(f"{s['name']}: {s['state']}" for s in states)
        return Patched(tree, states)


def patch_steps(
    source: str, tree: str, patches: list[Patch], want: dict[str, Any], *, in_place: bool
) -> list[Step]:
    """The patch operation as a pure function: the steps that make `tree` the patched `source`.

    In place (the tree's marker already says `want`), only the new patches go in. Otherwise a
    copy of the pristine source is patched beside the tree, its marker (`want`: the source's
    digest and the patches') written, and only then renamed over the tree, so an interrupted
    run never leaves a tree that looks patched.
    """
    if in_place:
        return [patch_step(tree, patches)]
    new = tree + ".new"
    return [
        Step("copy", src=source, dest=new),
        patch_step(new, patches),
        Step("write", path=posixpath.join(new, PATCHED_MARKER), text=json.dumps(want) + "\n"),
        Step("rename", src=new, dest=tree),
    ]


def _states(
    entries: list[dict[str, Any]], digests: tuple[tuple[str, str], ...]
) -> list[dict[str, str]]:
    sha = dict(digests)
    return [
        {"name": str(e["name"]), "sha256": sha.get(str(e["name"]), ""), "state": str(e["state"])}
        for e in entries
    ]


__all__ = [
    "PATCHED_MARKER",
    "Patched",
    "ensure_patched",
    "package_patches",
    "patch_key",
    "patch_steps",
]
