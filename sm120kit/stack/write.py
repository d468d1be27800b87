"""Writing a drafted lock without ever losing a reviewed one (`invoke lock.draft`).

A lock is written only when it is complete: the text is read back by the same strict
parser that `plan` uses (a non-empty closure whose top is in it) before anything on disk
changes. A new file is created; an existing one is replaced in one step (a temporary file
beside it, then ``os.replace``), so a reader sees the old lock or the new one, never a part,
and no temporary file is left on any error. The difference from the file replaced
(distributions added, removed, changed) is returned for the report; a draft equal to the file
but for its date leaves the file as it is.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from ..errors import RecipeError
from .convert import parse_old_lock
from .lock import Lock, LockEntry, LockFileError, parse_lock


def check_writable(path: Path, flag: str) -> None:
    """RecipeError (one line naming `flag` and the path) unless a lock can be written at
    `path`: not a directory, not a read-only file, under a directory that exists or can be
    made and is writable. Checked before the draft runs, so nothing is spent on a draft that
    cannot be written."""
    if path.is_dir():
        raise RecipeError(f"{flag} {path}: is a directory; give the lock file's path")
    if path.exists():
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            raise RecipeError(f"{flag} {path}: not a regular file")
        if not mode & 0o222 or not os.access(path, os.W_OK):
            raise RecipeError(f"{flag} {path}: the file is read-only; nothing written")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise RecipeError(f"{flag} {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise RecipeError(f"{flag} {path}: cannot write in {parent}")


def _by_key(entries: tuple[LockEntry, ...]) -> dict[str, LockEntry]:
    return {e.key: e for e in entries}


def differences(old: Lock | None, new: Lock) -> dict[str, Any]:
    """What `new` changes against `old`: distributions added, removed and changed (version,
    file or sha256), each ``name version`` or ``name old -> new``."""
    if old is None:
        return {
            "file": "new",
            "added": [f"{e.name} {e.version}" for e in new.packages],
            "removed": [],
            "changed": [],
        }
    was, now = _by_key(old.packages), _by_key(new.packages)
    changed = []
    for key in sorted(set(was) & set(now)):
        a, b = was[key], now[key]
        if (a.version, a.sha256) != (b.version, b.sha256):
            what = (
                f"{b.name} {a.version} -> {b.version}"
                if a.version != b.version
                else (f"{b.name} {b.version}: another file ({a.filename} -> {b.filename})")
            )
            changed.append(what)
    return {
        "file": "replaced",
        "added": [f"{now[k].name} {now[k].version}" for k in sorted(set(now) - set(was))],
        "removed": [f"{was[k].name} {was[k].version}" for k in sorted(set(was) - set(now))],
        "changed": changed,
    }


def change_line(changes: dict[str, Any]) -> str:
    """One line for a person: new file, unchanged, or the counts and names of a replacement."""
    if changes.get("file") == "new":
        return f"new file, {len(changes['added'])} distributions"
    if changes.get("file") == "unchanged":
        return "unchanged (the file already holds this lock)"
    parts = []
    for kind in ("added", "removed", "changed"):
        items = changes.get(kind) or []
        if items:
            parts.append(f"{kind} {len(items)}: {', '.join(items)}")
    return "; ".join(parts) or "the same distributions (header fields only)"


def _same(old: Lock, new: Lock) -> bool:
    """Equal but for the date drafted and the resolver line."""
    return (
        old.packages,
        old.top,
        old.python,
        old.platform,
        old.torch,
        old.torch_cuda,
        old.target,
        old.indexes,
        old.constraints,
    ) == (
        new.packages,
        new.top,
        new.python,
        new.platform,
        new.torch,
        new.torch_cuda,
        new.target,
        new.indexes,
        new.constraints,
    )


def write_lock(path: Path, text: str, lock: Lock) -> dict[str, Any]:
    """Write `text` (the lock `lock`, dumped) at `path` when it is complete, and return the
    differences from the file it replaces (`differences`); RecipeError (one line) on any
    problem, with `path` as it was and no temporary file left."""
    try:
        check = parse_lock(path, text, str(path))
    except LockFileError as exc:
        raise RecipeError(f"the draft for {path} is incomplete, nothing written: {exc}") from None
    if not check.packages:
        raise RecipeError(f"the draft for {path} is empty, nothing written")
    old = None
    if path.exists():
        try:
            old = parse_lock(path, path.read_text(encoding="utf-8"), str(path))
        except (LockFileError, OSError, UnicodeDecodeError):
            old = _old_format(path)
    if old is not None and _same(old, check):
        return {"file": "unchanged", "added": [], "removed": [], "changed": []}
    changes = differences(old, check)
    if path.exists() and old is None:
        changes["file"] = "replaced (the old file could not be read, so no difference is shown)"
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise RecipeError(f"{path}: cannot write the lock: {exc.strerror or exc}") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return changes


def _old_format(path: Path) -> Lock | None:
    """An existing lock in the earlier format, read for the difference only."""

    try:
        return parse_old_lock(path, path.read_text(encoding="utf-8"))[0]
    except (LockFileError, OSError, UnicodeDecodeError, KeyError, TypeError):
        return None
