"""Inputs that once raised tracebacks (issue #45 LOW): an `-i` path with a part too long for the
filesystem (ENAMETOOLONG) and an `--index` urllib cannot parse (`http://[::1`). Each is one
error line naming the flag or file, exit 1. Real files and the real `invoke` CLI.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.errors import InventoryError, RecipeError
from sm120kit.inventory.load import load_inventory
from sm120kit.stack.resolve import parse_index
from tests.conftest import invoke_env, run_invoke


@pytest.mark.parametrize(
    "text", ["http://[::1", "https://[fe80::1/simple", "http://h:99999/simple"]
)
def test_an_unparseable_index_is_one_line(text: str) -> None:
    with pytest.raises(RecipeError, match=r"^--index ") as info:
        parse_index(text)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("part", ["x" * 256, "x" * 300, "y" * 1000])
def test_an_inventory_path_part_too_long_is_one_line(tmp_path: Path, part: str) -> None:
    with pytest.raises(InventoryError, match="cannot read the inventory file"):
        load_inventory(tmp_path / part / "hosts.yaml")


@pytest.mark.parametrize(
    "args",
    [
        ["facts", "-i", "/tmp/" + "x" * 300 + "/hosts.yaml", "-H", "local"],
        ["lock.draft", "--top", "demo==1.0", "--index", "http://[::1", "--lock-python", "3.11"],
    ],
    ids=["long-inventory-part", "bad-index"],
)
def test_the_cli_says_one_line(tmp_path: Path, args: list[str]) -> None:
    proc = run_invoke(args, invoke_env(None, tmp_path))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert ("--index" if "lock.draft" in args else "cannot read the inventory file") in proc.stderr
