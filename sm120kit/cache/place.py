"""The on-host part of the wheel cache: copy, check and rename a wheel in one command
(`remote/place_wheel.py`).

A wheel reaches its final name on the host only after its sha256 was checked there, so a
killed copy or a changed file never looks like a wheel.
"""

from __future__ import annotations

import shlex
from typing import Any

from ..errors import HostFailed
from .context import CacheHost


def place(ctx: CacheHost, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run `remote/place_wheel.py` on the host (one command) and return one result per op:
    each wheel is copied to a hidden temp name, checked and only then renamed into place."""
    doc = ctx.script("place_wheel", {"ops": ops})
    results = doc.get("results")
    if not isinstance(results, list) or len(results) != len(ops):
        raise HostFailed(f"{ctx.host.name}: placing a wheel printed no result: {str(doc)[-200:]}")
    return results


def shell_path(path: str) -> str:
    """Quote a host path for the shell, keeping a leading ~/ expandable."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def host_dir(ctx: CacheHost, dest_dir: str) -> str:
    """Create dest_dir on the host and return it as an absolute path (for SFTP puts)."""
    quoted = shell_path(dest_dir)
    res = ctx.run(f"mkdir -p -- {quoted} && cd -- {quoted} && pwd", what="mkdir")
    lines = res.stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("/"):
        raise HostFailed(
            f"{ctx.host.name}: creating {dest_dir} printed no directory: {res.stdout!r:.200}"
        )
    return lines[-1]
