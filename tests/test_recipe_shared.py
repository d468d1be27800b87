"""Recipes share package pins and serving stacks (recipes/shared/): every shipped recipe
resolves exactly as it did when each recipe carried its own copies.

tests/data/recipe_resolution.json was written from the recipes before they shared anything
(`tests/support/recipe_snapshot.py`): the loaded package entries, ``[stack]`` and locks of
each recipe, and the provenance rows `plan` prints for one driver per toolkit choice (no host:
the driver and arch are host vars, as on a box without a GPU).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.recipe_snapshot import snapshot

DATA = Path(__file__).parent / "data" / "recipe_resolution.json"


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
