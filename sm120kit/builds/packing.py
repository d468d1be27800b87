"""A deterministic tar of a local source tree, named by the tree hash the host checks.

Used for ``path`` sources (ops/build_source.py) and for the controller's source store (builds/sources.py),
so both produce the same bytes for the same tree.
"""

from __future__ import annotations

import os
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..remote.lib import sourcetree as fs

#: Top-level directories of a local tree that are build outputs, not sources.
_TOP_SKIP = frozenset({"build", "dist"})
_ANY_SKIP = frozenset({"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache"})


def pack_tree(
    root: Path, out_dir: Path, stem: str, *, skip_outputs: bool = True
) -> tuple[Path, str]:
    """A deterministic tar of a local source tree and fetch_source's tree hash of its content.

    Build outputs (top-level build/ and dist/, ``*.egg-info``, ``__pycache__``, VCS dirs)
    stay out (with `skip_outputs` False only VCS dirs and caches: a dependency's own
    top-level ``build/`` is source). The hash is computed on the tar unpacked the way the host unpacks it, so the
    host's check (``tree_sha256``) and the cache key agree by construction.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{stem}.tar.part"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in _tree_files(root, skip_outputs):
            rel = path.relative_to(root).as_posix()
            info = tar.gettarinfo(str(path), arcname=rel)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if info.isfile():
                info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)
            elif info.issym():
                info.mode = 0o777
                tar.addfile(info)
    with tempfile.TemporaryDirectory(dir=out_dir) as unpacked:
        fs.unpack(str(tmp), unpacked)
        digest = fs.tree_hash(unpacked)
    final = out_dir / f"{stem}-{digest[:12]}.tar"
    os.replace(tmp, final)
    return final, digest


def _tree_files(root: Path, skip_outputs: bool = True) -> Iterator[Path]:
    """Files and symlinks of a source tree, sorted, without build outputs."""
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        keep = sorted(
            d
            for d in dirnames
            if d not in _ANY_SKIP
            and not (skip_outputs and d.endswith(".egg-info"))
            and not (skip_outputs and here == root and d in _TOP_SKIP)
        )
        # os.walk does not descend into linked dirs: they travel as links.
        dirnames[:] = [d for d in keep if not (here / d).is_symlink()]
        links = [d for d in keep if (here / d).is_symlink()]
        for name in sorted(filenames + links):
            if name == fs.MARKER or name.endswith(".pyc"):
                continue
            yield here / name
