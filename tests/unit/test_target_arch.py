"""One rule for a host's target arch (sm120kit/recipes/target_arch.py): ``--arch``, host var
``target_arch``, the GPU, a forced recipe's first arch; and the stack verification, `smoke`
and `preflight` all take it from there.

Pure: facts are dicts as ``facts.gather`` returns them (the GPU is one such dict, nothing is
run), recipes are the repo's files, hosts are `Host` values. No SSH, no host.
"""

from __future__ import annotations

from typing import Any

import pytest

from sm120kit.errors import RecipeError, Sm120Error
from sm120kit.inventory.host import Host
from sm120kit.plays.preflight import preflight_arch
from sm120kit.plays.smoke import choose_arch
from sm120kit.recipes.select import Recipe, load_recipes, resolve_for_host
from sm120kit.recipes.target_arch import choose_target_arch
from sm120kit.stack.choice import target_of
from sm120kit.state import ProvisionState

VAR_FILE = "inventory/host_vars/gpu1.yaml"
R580 = ("r580", "recipes/r580.toml", ["12.0"])


def facts_with(*caps: str | None, driver: str | None = "580.95.05") -> dict[str, Any]:
    gpus = [{"index": i, "name": f"GPU {i}", "compute_cap": c} for i, c in enumerate(caps)]
    return {"gpu": {"present": bool(gpus), "driver_version": driver, "gpus": gpus}}


def host_with(target_arch: str | None) -> Host:
    if target_arch is None:
        return Host("gpu1")
    return Host("gpu1", vars={"target_arch": target_arch}, var_sources={"target_arch": VAR_FILE})


# (case, flag, host var target_arch, GPU capabilities, served arch lists, recipe,
#  expected capability, expected kind, expected source)
TABLE: list[
    tuple[
        str,
        str | None,
        str | None,
        tuple[str | None, ...],
        list[list[str]],
        Any,
        str | None,
        str,
        str,
    ]
] = [  # fmt: skip
    ("flag beats all", "sm_120a", "12.1", ("9.0",), [], R580, "12.0", "flag", "--arch flag"),
    ("flag alone", "12.0", None, (), [], None, "12.0", "flag", "--arch flag"),
    (
        "host var beats a disagreeing GPU",
        None,
        "12.1",
        ("12.0",),
        [["12.0"]],
        R580,
        "12.1",
        "host var",
        f"{VAR_FILE} (target_arch)",
    ),
    (
        "host var on a GPU-less box",
        None,
        "12.0",
        (),
        [],
        None,
        "12.0",
        "host var",
        f"{VAR_FILE} (target_arch)",
    ),
    (
        "host var beside a GPU too old to say",
        None,
        "12.1",
        (None,),
        [],
        None,
        "12.1",
        "host var",
        f"{VAR_FILE} (target_arch)",
    ),
    (
        "GPU when nobody says",
        None,
        None,
        ("12.0",),
        [["12.0"]],
        R580,
        "12.0",
        "gpu",
        "facts (nvidia-smi compute_cap)",
    ),
    (
        "mixed GPUs: the first a recipe serves",
        None,
        None,
        ("8.9", "12.0"),
        [["12.0"]],
        None,
        "12.0",
        "gpu",
        "facts (nvidia-smi compute_cap)",
    ),
    (
        "mixed GPUs, nothing served: the first",
        None,
        None,
        ("8.9", "12.0"),
        [],
        None,
        "8.9",
        "gpu",
        "facts (nvidia-smi compute_cap)",
    ),
    (
        "empty host var and flag count as unset",
        "",
        "",
        ("12.0",),
        [],
        None,
        "12.0",
        "gpu",
        "facts (nvidia-smi compute_cap)",
    ),
    (
        "recipe last",
        None,
        None,
        (),
        [],
        ("r580", "recipes/r580.toml", ["12.0+PTX"]),
        "12.0",
        "recipe",
        "recipes/r580.toml (arch)",
    ),
    ("nothing", None, None, (), [], None, None, "none", ""),
]


@pytest.mark.parametrize(
    ("flag", "var", "caps", "served", "recipe", "cc", "kind", "source"),
    [t[1:] for t in TABLE],
    ids=[t[0] for t in TABLE],
)
def test_one_rule(
    flag: str | None,
    var: str | None,
    caps: tuple[str | None, ...],
    served: list[list[str]],
    recipe: Any,
    cc: str | None,
    kind: str,
    source: str,
) -> None:
    host = host_with(var)
    if var == "":
        host = Host("gpu1", vars={"target_arch": ""})
    chosen = choose_target_arch(host, facts_with(*caps), flag=flag, served=served, recipe=recipe)
    assert (chosen.cc, chosen.kind, chosen.source) == (cc, kind, source)
    # smoke and preflight without a recipe (--python) apply the same rule (served only
    # breaks a tie between GPUs, recipe only when nothing else says).
    if not served and recipe is None:
        for via in (
            choose_arch(host, facts_with(*caps), flag, None),
            preflight_arch(host, facts_with(*caps), flag, None),
        ):
            assert (via.cc, via.kind) == (cc, kind)


def test_labels_smoke_and_preflight_report() -> None:
    labels = {
        choose_target_arch(host_with(None), facts_with(), flag="12.0").label,
        choose_target_arch(host_with("12.0"), facts_with()).label,
        choose_target_arch(host_with(None), facts_with("12.0")).label,
        choose_target_arch(host_with(None), facts_with(), recipe=R580).label,
    }
    assert labels == {"--arch", "host var target_arch", "GPU (facts)", "recipe r580 arch"}


def test_bad_values_name_their_source() -> None:
    with pytest.raises(RecipeError, match=rf"^{VAR_FILE} \(target_arch\): not a compute"):
        choose_target_arch(host_with("twelve"), facts_with("12.0"))
    with pytest.raises(RecipeError, match=r"^--arch 'x': not a compute"):
        choose_target_arch(host_with(None), facts_with(), flag="x")
    with pytest.raises(Sm120Error, match=r"--arch 'x'"):
        choose_arch(host_with(None), facts_with(), "x", None)


@pytest.fixture(scope="module")
def recipes() -> dict[str, Recipe]:
    return load_recipes()


@pytest.mark.parametrize(
    ("var", "gpu", "flag", "cc", "source"),
    [
        # The bug this rule ended: a GPU host (12.1, as a GB10) that sets target_arch 12.0
        # had its stack verified for 12.0 but was smoked and preflighted for 12.1.
        ("12.0", "12.1", None, "12.0", f"{VAR_FILE} (target_arch)"),
        (None, "12.0", None, "12.0", "facts (nvidia-smi compute_cap)"),
        ("12.0", "12.1", "12.0", "12.0", "--arch flag"),
    ],
)
def test_stack_smoke_and_preflight_agree(
    recipes: dict[str, Recipe],
    var: str | None,
    gpu: str,
    flag: str | None,
    cc: str,
    source: str,
) -> None:
    host, facts = host_with(var), facts_with(gpu)
    resolved = resolve_for_host(recipes, host, facts, arch=flag)
    state = ProvisionState(host, facts, resolved)
    stack_arch = target_of(resolved)[1]
    smoke_arch = choose_arch(host, facts, flag, resolved)
    preflight = preflight_arch(host, facts, flag, state)
    preflight_python = preflight_arch(host, facts, flag, None)  # --python: no recipe
    assert {stack_arch, smoke_arch.cc, preflight.cc, preflight_python.cc} == {cc}
    assert resolved.target.arch.source == source
    # plan's provenance table names why.
    rows = {key: (value, where) for key, value, where in resolved.rows()}
    assert rows["target.arch"] == (cc, source)
    if gpu != cc:
        assert any(f"pass --arch {gpu} to judge this GPU" in n for n in resolved.notes)


def test_forced_recipe_without_arch_takes_the_recipe_s(recipes: dict[str, Recipe]) -> None:
    host, facts = host_with(None), facts_with(driver=None)
    resolved = resolve_for_host(recipes, host, facts, forced="r580")
    assert (resolved.target.arch.cc, resolved.target.arch.kind) == ("12.0", "recipe")
    assert choose_arch(host, facts, None, resolved).label == "recipe r580 arch"
