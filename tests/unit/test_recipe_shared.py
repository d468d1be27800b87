"""Recipes share package pins and serving stacks (recipes/shared/): every shipped recipe
resolves exactly as it did when each recipe carried its own copies.

tests/data/recipe_resolution.json was written from the recipes before they shared anything
(`tests/support/recipe_snapshot.py`): the loaded package entries, ``[stack]`` and locks of
each recipe, and the provenance rows `plan` prints for one driver per toolkit choice (no host:
the driver and arch are host vars, as on a box without a GPU).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from sm120kit.cli.lock import _shared_stack, _stack_torch_index
from sm120kit.recipes.select import load_recipes
from sm120kit.stack.draft import stack_table
from tests.support.recipe_snapshot import REPO, snapshot

DATA = Path(__file__).parent.parent / "data" / "recipe_resolution.json"


@pytest.fixture(scope="module")
def now() -> dict[str, Any]:
    return snapshot()


@pytest.fixture(scope="module")
def before() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))
    return data


def test_every_recipe_loads_as_before(now: dict[str, Any], before: dict[str, Any]) -> None:
    assert sorted(now["recipes"]) == sorted(before["recipes"])
    for name, loaded in before["recipes"].items():
        for part, value in loaded.items():
            assert now["recipes"][name][part] == value, f"{name} {part}"


def test_every_driver_resolves_as_before(now: dict[str, Any], before: dict[str, Any]) -> None:
    assert sorted(now["resolved"]) == sorted(before["resolved"])
    for driver, want in before["resolved"].items():
        assert now["resolved"][driver] == want, driver


def test_one_line_of_the_shared_stacks_moves_every_recipe_using_it(tmp_path: Path) -> None:
    """The cu13 line serves r580, r590 and r595: an edit of that line alone reaches all three
    (r570/r575 use cu12, and r575 keeps its own reason over the shared one)."""
    folder = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", folder)
    stacks = folder / "shared" / "stacks.toml"
    text = stacks.read_text(encoding="utf-8")
    old = 'reason = "sglang 0.5.23 (October 2026)'
    assert text.count(old) == 1
    stacks.write_text(text.replace(old, 'reason = "moved'), encoding="utf-8")
    recipes = load_recipes(folder, patches_dir=REPO / "patches")
    reasons = {n: r.stack.reason.split(":")[0] for n, r in recipes.items() if r.stack}
    assert {n for n, why in reasons.items() if why.startswith("moved")} == {"r580", "r590", "r595"}
    assert "R575" in recipes["r575"].stack.reason and "R570" in recipes["r570"].stack.reason  # type: ignore[union-attr]


def test_lock_draft_prints_the_shared_stack_line() -> None:
    """For a recipe on a shared stack, lock.draft's table to paste is that stack's line."""
    recipes = load_recipes(REPO / "recipes")
    assert {n: _shared_stack(r) for n, r in recipes.items()} == {
        "r570": "cu12",
        "r575": "cu12",
        "r580": "cu13",
        "r590": "cu13",
        "r595": "cu13",
    }
    lock = recipes["r580"].lock
    assert lock is not None
    line = stack_table(lock, "locks/sglang-0.5.23/pylock.cp311.toml", "why", "cu13")
    assert line.splitlines()[-1] == (
        'cu13 = { top = "sglang==0.5.23", locks = "locks/sglang-0.5.23", reason = "why" }'
    )
    assert stack_table(lock, "locks/x/pylock.cp311.toml", "why").startswith("[stack]\n")
    # The line carries the lock's torch, which r580/r590/r595 (no [torch]) take.
    line = stack_table(lock, "locks/sglang-0.5.23/pylock.cp311.toml", "why", "cu13", "pypi")
    assert line.splitlines()[-1] == (
        'cu13 = { top = "sglang==0.5.23", locks = "locks/sglang-0.5.23", torch = { version = '
        '"2.14.1", index = "pypi", cuda = "13.0" }, reason = "why" }'
    )
    assert _stack_torch_index(recipes["r570"]) == "https://download.pytorch.org/whl/cu128"


def test_a_recipe_without_torch_takes_its_stacks_and_its_own_wins(tmp_path: Path) -> None:
    """No [torch]: the shared stack's torch, and `plan` names stacks.toml as its source; a
    recipe's own [torch] (here r580's, PyTorch's cu130 index) wins and is named instead."""
    recipes = load_recipes(REPO / "recipes")
    for name, line in {"r570": "cu12", "r580": "cu13"}.items():
        r = recipes[name]
        assert "torch" not in r.raw and r.lock is not None
        assert (r.torch.version, r.torch.cuda) == (r.lock.torch, r.lock.torch_cuda)
        assert r.torch_from == f"recipes/shared/stacks.toml (stack {line})"
    folder = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", folder)
    path = folder / "r580.toml"
    own = '[torch]\nversion = "2.14.1"\nindex = "https://download.pytorch.org/whl/cu130"\n'
    path.write_text(
        path.read_text().replace("[stack]\n", own + 'cuda = "13.0"\n\n[stack]\n', 1),
        encoding="utf-8",
    )
    r = load_recipes(folder, patches_dir=REPO / "patches")["r580"]
    assert r.torch.index == "https://download.pytorch.org/whl/cu130" and r.torch_from == ""
