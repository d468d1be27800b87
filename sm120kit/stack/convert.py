"""Convert a lock in sm120kit's earlier format (``[lock]`` and ``[[package]]``, one file
``locks/<top>-<version>-cp<XY>-<platform>.toml``) into the PEP 751 layout `sm120kit.stack.lock`
reads: ``locks/<top>-<version>/pylock.cp<XY>-<platform>.toml``. Every field is carried over:
the standard ones to PEP 751's keys, ours to ``[tool.sm120kit]`` (``invoke lock.convert``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from .lock import (
    FROM,
    Lock,
    LockEntry,
    LockFileError,
    _requirement,
    _Where,
    dump_lock,
    is_old_format,
    load_lock,
    lock_dir_name,
    lock_file_name,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

_OLD_HEAD = {"top", "python", "platform", "resolver", "drafted"}
_OLD_PKG = {"name", "version", "filename", "url", "sha256", "from", "compiled"}


def parse_old_lock(path: Path, text: str) -> tuple[Lock, list[str]]:
    """An earlier-format lock as a `Lock` and its leading comment lines; LockFileError naming
    the file and key when it is not one."""
    w = _Where(str(path), text, marker="[[package]]")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LockFileError(f"{path}: invalid TOML: {exc}") from None
    if not is_old_format(data):
        raise LockFileError(f"{path}: not a lock in the earlier format ([lock], [[package]])")
    head: dict[str, Any] = data["lock"]
    for key in sorted(_OLD_HEAD):
        if not isinstance(head.get(key), str):
            raise w.error(f"lock.{key}", "missing or not a string")
    _requirement(w, head["top"], "lock.top")
    entries = []
    for i, item in enumerate(data["package"]):
        if not isinstance(item, dict) or any(k not in item for k in _OLD_PKG):
            raise w.error(f"package[{i}]", f"expected the keys {', '.join(sorted(_OLD_PKG))}", i)
        if item["from"] not in FROM:
            raise w.error(
                f"package[{i}].from", f"{item['from']!r} is not one of {', '.join(FROM)}", i
            )
        entries.append(
            LockEntry(
                name=item["name"],
                version=item["version"],
                filename=item["filename"],
                url=item["url"],
                sha256=item["sha256"],
                source=item["from"],
                compiled=bool(item["compiled"]),
                size=item.get("size"),
                verdict=item.get("verdict", ""),
                notes=tuple(item.get("notes", [])),
            )
        )
    lock = Lock(
        path=path,
        top=head["top"],
        python=head["python"],
        platform=head["platform"],
        torch=head.get("torch", ""),
        torch_cuda=head.get("torch_cuda", "cpu"),
        resolver=head["resolver"],
        drafted=head["drafted"],
        packages=tuple(entries),
        target=dict(head.get("target", {})),
        indexes=tuple(head.get("indexes", [])),
    )
    comments = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        comments.append(line[1:].strip())
    return lock, comments


def converted_path(lock: Lock, root: Path) -> Path:
    """Where the PEP 751 form of `lock` goes under `root` (the directory holding ``locks/``)."""
    return root / "locks" / lock_dir_name(lock.top) / lock_file_name(lock.python, lock.platform)


def convert_lock(path: Path, out: Path | None = None, root: Path | None = None) -> Path:
    """Write the PEP 751 form of the earlier-format lock at `path` to `out` (default: the
    layout's place under `root`, or beside ``locks/``), check it loads back equal, and return
    it. The old file is left for the caller to remove (git rm)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LockFileError(f"{path}: cannot read the lock: {exc.strerror}") from None
    lock, comments = parse_old_lock(path, text)
    if out is None:
        out = converted_path(lock, root if root is not None else path.resolve().parent.parent)
    header = [*comments, f"Converted to PEP 751 by `invoke lock.convert --path {path.name}`."]
    body = dump_lock(lock, header)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.part")
    try:
        tmp.write_text(body, encoding="utf-8")
        again = load_lock(tmp, str(out))
        if again.packages != lock.packages:
            raise LockFileError(f"{out}: the converted lock does not read back equal")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
