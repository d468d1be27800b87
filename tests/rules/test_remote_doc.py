"""docs/remote.md against the code: its library table names every module of
sm120kit/remote/lib/ and its script table every script of sm120kit/remote/, and names
nothing that does not exist (the way tests/rules/test_architecture_doc.py checks the map)."""

from __future__ import annotations

import re

from tests.conftest import REPO

DOC = REPO / "docs" / "remote.md"
REMOTE = REPO / "sm120kit" / "remote"


def first_column(header: str) -> set[str]:
    """The backticked names in the first column of the table whose header row is `header`."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = lines.index(header)
    names: set[str] = set()
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        names.update(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return names


def test_library_table_is_the_library() -> None:
    code = {p.stem for p in (REMOTE / "lib").glob("*.py") if p.stem != "__init__"}
    listed = first_column("| module | what |")
    assert not code - listed, f"docs/remote.md does not list host-library modules {code - listed}"
    assert not listed - code, f"docs/remote.md lists modules that do not exist {listed - code}"


def test_script_table_is_the_scripts() -> None:
    code = {f"remote/{p.name}" for p in REMOTE.glob("*.py") if p.stem != "__init__"}
    listed = first_column("| script | what |")
    assert not code - listed, f"docs/remote.md does not list host scripts {code - listed}"
    assert not listed - code, f"docs/remote.md lists scripts that do not exist {listed - code}"
