"""`invoke lock.draft --constraint SPEC` and the lock directory's constraints.txt
(sm120kit/stack/constraints.py): one strict parser, kept beside the locks and recorded in
each, so a re-draft with no flag resolves from the same inputs.

Real parts: tiny real wheels on a real loopback PEP 503 index (tests/support/tiny_index.py),
the pinned uv resolving, `invoke` run as a user runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sm120kit.errors import RecipeError
from sm120kit.stack.constraints import (
    FILE_NAME,
    merged,
    parse_constraint,
    read_beside,
    write_beside,
)
from sm120kit.stack.lock import load_lock
from tests.support.tiny_index import make_wheel, serve

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("cuda-python>=13", "cuda-python>=13"),
        ("CUDA_Python >= 13, <14", "cuda-python<14,>=13"),
        ("torch==2.14.0", "torch==2.14.0"),
        ('lib<2; python_version >= "3.12"', 'lib<2; python_version >= "3.12"'),
    ],
)
def test_a_constraint_is_normalised(text: str, want: str) -> None:
    assert parse_constraint(text) == want


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("cuda-python>>13", "not a requirement"),
        ("cuda-python", "names no version range"),
        ("", "not a requirement"),
        (None, "not a requirement"),
        ("lib[extra]>=1", "has no extras"),
        ("lib @ https://example.invalid/lib-1.0-py3-none-any.whl", "not a URL"),
    ],
)
def test_a_bad_constraint_is_one_line_naming_the_flag(text: Any, said: str) -> None:
    with pytest.raises(RecipeError) as err:
        parse_constraint(text, "--constraint")
    msg = str(err.value)
    assert msg.startswith("--constraint ") and said in msg and "\n" not in msg


def test_the_file_beside_the_lock(tmp_path: Path) -> None:
    assert read_beside(tmp_path) == () and write_beside(tmp_path, ()) == "none"
    assert write_beside(tmp_path, ("cuda-python>=13",)) == "new"
    assert write_beside(tmp_path, ("cuda-python>=13",)) == "unchanged"
    assert read_beside(tmp_path) == ("cuda-python>=13",)
    (tmp_path / FILE_NAME).write_text("# kept\nlib<2  # why\n\nlib>>2\n")
    with pytest.raises(RecipeError, match=rf"^{tmp_path / FILE_NAME}:4: 'lib>>2': not a req"):
        read_beside(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [FILE_NAME]  # no temporary left


def test_a_flag_replaces_the_files_line_for_its_distribution() -> None:
    kept = ("cuda-python>=13", "lib<2")
    assert merged(kept, []) == kept
    assert merged(kept, ["lib<3", "zed>1"]) == ("cuda-python>=13", "lib<3", "zed>1")


def _invoke(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})


def test_a_redraft_keeps_the_constraint(tmp_path: Path) -> None:
    """``--constraint 'lib<2'`` locks lib 1.0 (2.0 is newer), writes constraints.txt and the
    lock's ``constraints``; drafting again with no flag changes nothing; a bad flag is one
    line, exit 1, the files as they were."""
    files = tmp_path / "index"
    make_wheel(files, "app", "1.0", requires=("lib",))
    make_wheel(files, "lib", "1.0")
    make_wheel(files, "lib", "2.0")
    recipes = tmp_path / "tree" / "recipes"
    recipes.mkdir(parents=True)
    env = {
        "SM120KIT_RELEASE_CACHE": str(tmp_path / "cache"),
        "INVOKE_SM120KIT_RECIPES_DIR": str(recipes),
    }
    folder = tmp_path / "tree" / "locks" / "app-1.0"
    with serve(files) as url:
        base = ["lock.draft", "--top", "app==1.0", "--index", url, "--lock-python", "3.11"]
        proc = _invoke([*base, "--constraint", "lib<2", "--json"], env)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["constraints"] == {"file": "new", "given": ["lib<2"]}
        lock = load_lock(folder / "pylock.cp311-manylinux_2_34_x86_64.toml")
        assert lock.entry("lib").version == "1.0"  # type: ignore[union-attr]
        assert lock.constraints == ("lib<2",) and "-c constraints.txt" in lock.resolver
        assert read_beside(folder) == ("lib<2",)
        again = json.loads(_invoke([*base, "--json"], env).stdout)
        assert [d["changes"]["file"] for d in again["locks"]] == ["unchanged"]
        assert again["constraints"] == {"file": "unchanged", "given": ["lib<2"]}
        before = {p.name: p.read_bytes() for p in folder.iterdir()}
        bad = _invoke([*base, "--constraint", "lib>>2"], env)
    assert bad.returncode == 1
    assert bad.stderr.strip().startswith("error: --constraint 'lib>>2': not a requirement")
    assert len(bad.stderr.strip().splitlines()) == 1
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
