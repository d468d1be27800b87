"""The tables recipes share instead of copying (``recipes/shared/``): package pins and serving
stacks.

- ``shared/packages.toml`` holds ``[[packages]]`` entries of the recipe schema; a recipe's
  entry ``use = "mypkg==1.0"`` is the shared entry of that name and version, whole.
- ``shared/stacks.toml`` holds ``[stacks]``, one serving stack per line (an inline table of
  ``[stack]`` keys, ``cu13 = { top = "sglang==0.5.23", locks = "...", reason = "..." }``);
  a recipe's ``[stack]`` with ``use = "cu13"`` is that stack, and any other key the recipe's
  ``[stack]`` sets replaces the shared one. A line's ``torch`` (``{ version, index, cuda }``)
  is the ``[torch]`` of a recipe using it that has none of its own (files.py `_stack_torch`).

So adding a release to the recipes that share a stack is ``invoke lock.draft`` plus one line
here. The tables are read from the recipes directory's ``shared/``; a directory without one
(recipes copied elsewhere) uses this checkout's, as a stack's locks do (`sm120kit.stack.lock`).
Reading only: the recipe loader (`sm120kit.recipes.files`) validates the entries with the
recipe schema and names the shared file and line of a bad one.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import RecipeError
from .checks import _display

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

#: The folder of shared tables inside a recipes directory.
SHARED_DIR = "shared"
PACKAGES_FILE = "packages.toml"
STACKS_FILE = "stacks.toml"
#: This checkout's recipes directory, whose shared tables serve a directory without its own.
SHIPPED = Path(__file__).resolve().parents[2] / "recipes"


@dataclass
class SharedFile:
    """One shared table file as read: its path, text (for line numbers) and TOML document
    (empty when the file does not exist: every `use` of it is then refused by name)."""

    path: Path
    text: str = ""
    doc: dict[str, Any] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return _display(self.path)


def _read(folder: Path, name: str) -> SharedFile:
    path = folder / SHARED_DIR / name
    if not (folder / SHARED_DIR).is_dir() and (SHIPPED / SHARED_DIR / name).is_file():
        path = SHIPPED / SHARED_DIR / name
    if not path.is_file():
        return SharedFile(path)
    text = path.read_text(encoding="utf-8")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"{_display(path)}: invalid TOML: {exc}") from None
    return SharedFile(path, text, doc)


@dataclass
class SharedTables:
    """The shared tables of one recipes directory, read once per load."""

    packages: SharedFile
    stacks: SharedFile

    @classmethod
    def read(cls, folder: Path) -> SharedTables:
        """The tables of recipes directory `folder` (RecipeError naming a file that is not
        TOML or not of the shape said above)."""
        tables = cls(_read(folder, PACKAGES_FILE), _read(folder, STACKS_FILE))
        for f, key in ((tables.packages, "packages"), (tables.stacks, "stacks")):
            unknown = sorted(set(f.doc) - {key})
            if unknown:
                raise RecipeError(f"{f.where}: {unknown[0]}: unknown key; allowed: {key}")
        if not isinstance(tables.packages.doc.get("packages", []), list):
            raise RecipeError(f"{tables.packages.where}: packages: expected [[packages]] tables")
        if not isinstance(tables.stacks.doc.get("stacks", {}), dict):
            raise RecipeError(f"{tables.stacks.where}: stacks: expected a table of stacks")
        return tables

    def package_tables(self) -> list[Any]:
        """The raw ``[[packages]]`` entries, in file order."""
        return list(self.packages.doc.get("packages", []))

    def stack_names(self) -> list[str]:
        return list(self.stacks.doc.get("stacks", {}))

    def stack_table(self, name: str) -> Any:
        """The raw stack called `name`, or None."""
        return self.stacks.doc.get("stacks", {}).get(name)


def package_key(name: str, version: str) -> str:
    """How a recipe names a shared entry: ``mypkg==1.0``."""
    return f"{name}=={version}"
