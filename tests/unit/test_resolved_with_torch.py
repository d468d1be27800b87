"""`ResolvedRecipe.with_torch`: a host's resolved recipe for another torch (a stack build's lock
torch, sm120kit/plays/stack.py build_state) from the typed values, without resolving again.

Its oracle is resolution itself: the recipe resolved for the host with ``recipe.torch.*`` set to
that torch (what build_state did before, with made-up host vars, and what an operator gets by
writing those vars). The two agree on every typed value, package entry, package problem and
source, across the shipped recipes, torches that flip a package's entry (flash-attn 2.8.3 below
torch 2.14, 2.8.3.post2 from it), the host's own package overrides (knobs, versions, a source
of another kind) and an engine variant. Real parts: the shipped recipes, locks and patches;
pure (nothing runs on a host).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sm120kit.errors import RecipeError
from sm120kit.host_facts import HostFacts
from sm120kit.inventory.host import Host
from sm120kit.plays.stack import build_state
from sm120kit.recipes.model import ResolvedRecipe
from sm120kit.recipes.select import load_recipes, resolve_for_host
from sm120kit.state import ProvisionState

REPO = Path(__file__).resolve().parents[2]
RECIPES = load_recipes(REPO / "recipes")
WHERE = "demo.lock.toml (lock torch)"

#: The host's own vars besides its target arch: none, package overrides, an engine.
HOSTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "package overrides": {
        "recipe.packages.flash-attn.knobs.MAX_JOBS": 2,
        "recipe.packages.flash-attn.knobs.NEW_KNOB": "x",
        "recipe.packages.flash-attn.version": "2.8.2",
        "recipe.packages.minikernel.needs_cuda_torch": False,
        "recipe.packages.sgl-kernel.source.kind": "path",
        "recipe.packages.sgl-kernel.source.path": "examples/minikernel",
    },
    "own torch": {"recipe.torch.index": "https://download.pytorch.org/whl/cpu"},
    "vllm engine": {"stack": "vllm"},
}
#: (torch version, its CUDA): the locks' torches, one below flash-attn's 2.14 split, a CPU one.
TORCHES = [("2.14.1", "13.0"), ("2.14.0", "13.0"), ("2.13.0", "cpu"), ("2.9.1", "12.8")]


def _host(vars_: dict[str, Any]) -> Host:
    return Host(
        "box",
        vars={"target_arch": "12.0", **vars_},
        var_sources={k: "inventory/host_vars/box.yaml" for k in vars_},
    )


def _again(resolved: ResolvedRecipe, host: Host, version: str, cuda: str) -> ResolvedRecipe:
    """The oracle: the host's recipe resolved once more with its torch set by host vars."""
    extra = {
        "recipe.torch.version": version,
        "recipe.torch.index": "pypi",
        "recipe.torch.cuda": cuda,
    }
    faked = replace(
        host,
        vars={**host.vars, **extra},
        var_sources={**host.var_sources, **{k: WHERE for k in extra}},
    )
    return resolve_for_host(
        {resolved.recipe.name: resolved.recipe},
        faked,
        None,
        driver=resolved.target.driver,
        arch=resolved.target.arch.cc,
        forced=resolved.recipe.name,
    )


CASES = [
    (recipe, host, torch)
    for recipe in sorted(RECIPES)
    for host in HOSTS
    if not (host == "vllm engine" and not RECIPES[recipe].variants)
    for torch in TORCHES
]


@pytest.mark.parametrize(("recipe", "host", "torch"), CASES)
def test_with_torch_is_the_recipe_resolved_for_that_torch(
    recipe: str, host: str, torch: tuple[str, str]
) -> None:
    box = _host(HOSTS[host])
    resolved = resolve_for_host(RECIPES, box, None, forced=recipe)
    version, cuda = torch
    try:
        oracle = _again(resolved, box, version, cuda)
    except RecipeError as e:  # a torch of another CUDA major than the toolkit: both refuse
        with pytest.raises(RecipeError) as got:
            resolved.with_torch(version, index="pypi", cuda=cuda, source=WHERE)
        assert "cpp_extension refuses a different CUDA major" in str(e)
        assert "cpp_extension refuses a different CUDA major" in str(got.value)
        return
    typed = resolved.with_torch(version, index="pypi", cuda=cuda, source=WHERE)
    # The oracle took the target as flags (its arch "from --arch"); with_torch keeps the host's.
    assert typed.target == resolved.target
    assert replace(typed.typed, target=oracle.target) == oracle.typed
    assert typed.specs == oracle.specs and all(
        a is b for a, b in zip(typed.specs, oracle.specs, strict=True)
    )
    # The oracle names the made-up var after the lock ("... (recipe.torch.version)").
    said = f"{WHERE} (recipe.torch.version)"
    assert typed.problems == {
        name: [p.replace(said, WHERE) for p in found] for name, found in oracle.problems.items()
    }
    torch_keys = {"torch.version", "torch.index", "torch.cuda"}
    assert {k: typed.sources[k] for k in torch_keys} == dict.fromkeys(torch_keys, WHERE)
    own = torch_keys | {"recipe", "target.arch", "target.driver"}
    assert {k: typed.sources.get(k) for k in own - torch_keys} == {
        k: resolved.sources.get(k) for k in own - torch_keys
    }
    mine = {k: v for k, v in typed.sources.items() if k not in own}
    theirs = {k: v for k, v in oracle.sources.items() if k not in own}
    assert mine == theirs
    assert typed.notes == oracle.notes
    # The host's own resolution is untouched, and its selection (not a forced one) is kept.
    assert (
        resolved.torch.version == resolve_for_host(RECIPES, box, None, forced=recipe).torch.version
    )
    assert typed.selection is resolved.selection


def test_an_entry_per_torch_follows_the_torch() -> None:
    """flash-attn's entry flips with the torch, and the host's override applies to the new one."""
    box = _host(HOSTS["package overrides"])
    resolved = resolve_for_host(RECIPES, box, None, forced="r580")
    assert resolved.packages["flash-attn"].torch == ">=2.14"
    older = resolved.with_torch("2.13.0", index="pypi", cuda="13.0", source=WHERE)
    assert older.packages["flash-attn"].torch == ">=2.7,<2.14"
    assert older.packages["flash-attn"].version == "2.8.2"  # the host's override, again
    assert older.packages["flash-attn"].knobs["MAX_JOBS"] == 2
    assert older.sources["packages.flash-attn.version"] == (
        "inventory/host_vars/box.yaml (recipe.packages.flash-attn.version)"
    )
    assert "url" not in older.packages["sgl-kernel"].source  # left over from the git kind
    assert "packages.sgl-kernel.source.url" not in older.sources


def test_build_state_takes_the_locks_torch_without_host_vars() -> None:
    """A stack build's state: the lock's torch (r580's lock: 2.14.1) on a host whose own torch
    differs; the host and its vars are the host's own, nothing made up."""
    box = _host({"recipe.torch.version": "2.13.0", "recipe.torch.index": "pypi"})
    resolved = resolve_for_host(RECIPES, box, None, forced="r580")
    lock = RECIPES["r580"].lock
    assert lock is not None and resolved.torch.version == "2.13.0"
    state = ProvisionState(box, HostFacts.from_json({"work_root": "/w"}), resolved)
    sub = build_state(state, lock, "sgl-kernel")
    assert sub.host is box and sub.wanted == ["sgl-kernel"]
    assert (sub.resolved.torch.version, sub.resolved.torch.cuda) == (lock.torch, lock.torch_cuda)
    assert sub.resolved.sources["torch.version"] == f"{lock.path.name} (lock torch)"
    assert "outside its torch" not in " ".join(sub.resolved.problems.get("sgl-kernel", []))
    same = build_state(ProvisionState(box, state.facts, sub.resolved), lock, "x")
    assert same.resolved is sub.resolved  # the lock's torch already: nothing to change
