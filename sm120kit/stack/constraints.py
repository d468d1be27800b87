"""Constraints of a lock draft: version ranges the resolver must keep to, beyond what the
closure's own metadata asks (``cuda-python>=13`` for vllm 0.33.0: docs/vllm.md).

They come from ``invoke lock.draft --constraint SPEC`` (repeatable) and from the file
``constraints.txt`` kept beside the lock in its directory (pip's constraints format, one
requirement a line, ``#`` comments). A draft resolves with the file's constraints plus the
flags' (a flag for a distribution replaces the file's line for it), passes them to uv as
``-c``, records them in each lock's ``[tool.sm120kit] constraints`` and writes the file
back, so drafting the directory again, with no flag, resolves from the same inputs. To drop
one, edit the file (it is reviewed like the locks).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ..errors import RecipeError

FILE_NAME = "constraints.txt"
_HEADER = (
    "# Constraints of the locks in this directory: `invoke lock.draft` resolves with them\n"
    "# (uv -c) and records them in each lock. One requirement a line; edit to drop one.\n"
)


def parse_constraint(text: object, where: str = "--constraint") -> str:
    """One constraint, normalised (canonical name, specifiers, marker); RecipeError naming
    `where` (the flag, or ``file:line``) unless it is a name with a version range."""
    value = text.strip() if isinstance(text, str) else ""
    try:
        req = Requirement(value)
    except InvalidRequirement as exc:
        said = " ".join(str(exc).split())  # packaging's message marks the column on 3 lines
        raise RecipeError(
            f"{where} {text!r}: not a requirement ({said}); expected NAME and a version range "
            "like cuda-python>=13"
        ) from None
    if req.url:
        raise RecipeError(f"{where} {text!r}: a constraint is a version range, not a URL")
    if req.extras:
        raise RecipeError(f"{where} {text!r}: a constraint has no extras (drop [...])")
    if not req.specifier:
        raise RecipeError(
            f"{where} {text!r}: names no version range; expected e.g. cuda-python>=13"
        )
    out = f"{canonicalize_name(req.name)}{req.specifier}"
    return f"{out}; {req.marker}" if req.marker else out


def _key(constraint: str) -> str:
    return str(canonicalize_name(Requirement(constraint).name))


def read_beside(lock_dir: Path) -> tuple[str, ...]:
    """The constraints kept in `lock_dir`'s ``constraints.txt`` (none: no file)."""
    path = lock_dir / FILE_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ()
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"{path}: cannot read the constraints: {exc}") from None
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(parse_constraint(line, f"{path}:{number}:"))
    return tuple(out)


def merged(kept: tuple[str, ...], given: list[str]) -> tuple[str, ...]:
    """The constraints a draft resolves with: `kept` (the file's), each replaced by a flag
    for the same distribution, plus the other flags; in name order, each line once."""
    by_name: dict[str, list[str]] = {}
    for item in kept:
        by_name.setdefault(_key(item), []).append(item)
    flagged: dict[str, list[str]] = {}
    for item in given:
        flagged.setdefault(_key(item), []).append(item)
    by_name.update(flagged)
    return tuple(dict.fromkeys(c for name in sorted(by_name) for c in by_name[name]))


def write_beside(lock_dir: Path, constraints: tuple[str, ...]) -> str:
    """Write `constraints` as `lock_dir`'s ``constraints.txt`` (in one step): ``new``,
    ``replaced`` or ``unchanged``; none and no file: ``none``."""
    path = lock_dir / FILE_NAME
    if not constraints and not path.exists():
        return "none"
    text = _HEADER + "".join(f"{c}\n" for c in constraints)
    if path.exists():
        if path.read_text(encoding="utf-8") == text:
            return "unchanged"
        state = "replaced"
    else:
        state = "new"
    lock_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{FILE_NAME}.", suffix=".part", dir=lock_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        raise RecipeError(f"{path}: cannot write the constraints: {exc.strerror or exc}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return state


def uv_file(constraints: tuple[str, ...], directory: str) -> str:
    """A temporary constraints file for uv's ``-c`` in `directory` (the caller removes it)."""
    fd, path = tempfile.mkstemp(prefix="constraints-", suffix=".txt", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write("".join(f"{c}\n" for c in constraints))
    return path
