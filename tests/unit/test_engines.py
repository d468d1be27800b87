"""The serving engine as data (sm120kit/engines.py): a stack line offers engines, a
host or group picks one with the inventory var ``stack``, the smoke probe checks the engine
its env holds. Table tests from the shipped recipes, locks and the vLLM catalogue (read from
the released wheels by lock.draft). The triton rule on the machine's real nvcc and the tests
in the real vLLM env are tests/real/test_engines_real.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sm120kit import engines
from sm120kit.errors import RecipeError
from sm120kit.inventory.host import Host
from sm120kit.packages import stack as serving
from sm120kit.recipes.select import load_recipes, resolve_for_host
from sm120kit.remote.lib.jit_toolchain import RULES
from sm120kit.stack.catalogue import load_beside

REPO = Path(__file__).resolve().parents[2]


def _facts(driver: str, cap: str) -> dict[str, Any]:
    return {"gpu": {"driver_version": driver, "gpus": [{"compute_cap": cap}]}}


@pytest.fixture(scope="module")
def recipes() -> dict[str, Any]:
    return load_recipes()


@pytest.mark.parametrize(
    ("top", "engine"),
    [("sglang==0.5.23", "sglang"), ("vllm==0.33.0", "vllm"), ("SGLang==0.5.9", "sglang"),
     ("vllm[audio]==0.33.0", "vllm"), ("torch==2.14.0", None)],
)  # fmt: skip
def test_a_stack_top_names_its_engine(top: str, engine: str | None) -> None:
    found = engines.for_top(top)
    assert (found.name if found else None) == engine


def test_every_engine_is_a_descriptor_whose_compiled_modules_smoke_checks() -> None:
    """Each engine's top-level distribution is a serving descriptor or pure Python, and each
    of its own JIT rules is one the hosts' library has."""
    for e in engines.ENGINES.values():
        assert e.modules and e.module and e.source
        for rule, source in e.jit.values():
            assert rule in RULES and source
    assert "vllm" in serving.discover_names()
    args = serving.probe_knowledge(())
    assert [e["top"] for e in args["engines"]] == [e.distribution for e in engines.ENGINES.values()]
    assert args["top"] == engines.DEFAULT == "sglang"


@pytest.mark.parametrize("name", ["r580", "r590", "r595"])
def test_a_cu13_recipe_offers_vllm_with_its_locks_torch(recipes: dict[str, Any], name: str) -> None:
    recipe = recipes[name]
    if recipe.stack is None or recipe.stack.top != "sglang==0.5.23":
        pytest.skip(f"{name} does not use the cu13 line")
    assert recipe.for_engine(None) is recipe and recipe.for_engine("sglang") is recipe
    vllm = recipe.for_engine("vllm")
    assert vllm.stack.top == "vllm==0.33.0"
    assert vllm.lock is not None and (vllm.torch.version, vllm.lock.torch) == ("2.14.0", "2.14.0")
    assert vllm.torch_from == "recipes/shared/stacks.toml (stack cu13-vllm)"
    # sgl-kernel is derived from sglang's lock only.
    assert "sgl-kernel" in {p.name for p in recipe.packages}
    assert "sgl-kernel" not in {p.name for p in vllm.packages}


@pytest.mark.parametrize(
    ("value", "picked"), [("vllm", "vllm==0.33.0"), ("sglang", "sglang==0.5.23"), ("", "sglang==0.5.23")]
)  # fmt: skip
def test_host_var_stack_picks_the_engine(recipes: dict[str, Any], value: str, picked: str) -> None:
    host = Host(
        "gpu1", vars={"stack": value}, var_sources={"stack": "inventory/hosts.yaml: group gpus"}
    )
    res = resolve_for_host(recipes, host, _facts("580.95.05", "12.0"))
    assert res.recipe.name == "r580" and res.recipe.stack.top == picked


@pytest.mark.parametrize(
    ("value", "said"), [("tgi", "known engines: sglang, vllm"), ("vllm", "offers sglang")]
)
def test_an_engine_not_offered_is_one_line_naming_the_var(
    recipes: dict[str, Any], value: str, said: str
) -> None:
    host = Host(
        "gpu1", vars={"stack": value}, var_sources={"stack": "inventory/hosts.yaml: host gpu1"}
    )
    facts = _facts("580.95.05", "12.0") if value != "vllm" else _facts("575.57.08", "12.0")
    with pytest.raises(RecipeError) as err:
        resolve_for_host(recipes, host, facts)
    text = str(err.value)
    assert "\n" not in text and text.startswith(
        "host gpu1: inventory/hosts.yaml: host gpu1 (stack)"
    )
    assert said in text


def test_the_fa2_module_holds_only_compute_80_ptx_for_12_0() -> None:
    """vllm 0.33.0's FlashAttention-2 module, as lock.draft read it from the wheel: SASS
    sm_80 and PTX compute_80 only, so a 12.0 GPU runs it through the driver's JIT; FA3 and
    FlashMLA hold no code for 12.0 at all (catalogue facts, smoke's module_archs)."""
    cat = load_beside(REPO / "locks" / "vllm-0.33.0", "locks/vllm-0.33.0/catalogue.toml")
    assert cat is not None
    (rel,) = [r for r in cat.releases if r.distribution == "vllm"]
    mods = {m.path: m for w in rel.wheels for m in w.modules}
    fa2 = mods["vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"]
    assert (list(fa2.sass), list(fa2.ptx)) == (["sm_80"], ["compute_80"])
    none = {f["module"] for f in serving.smoke_facts("vllm")["module_archs"]}
    assert {"vllm.vllm_flash_attn._vllm_fa3_C", "vllm._flashmla_C"} <= none
    assert "vllm.vllm_flash_attn._vllm_fa2_C" not in none
