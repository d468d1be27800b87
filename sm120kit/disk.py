"""Name a full disk under work_root as such, whatever step ran out of it.

A step that runs out of space fails with its tool's own words (`ensurepip ... returned non-zero
exit status 1`, a tar or pip error) that say nothing about space. When a host fails, the
runner asks the host how much is free under its work_root (`df`, one command) and, when the
error says "No space left on device" or the disk is nearly full, puts that first: the path and
the free bytes.
"""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING

from .runner.connection import uncancelled, uncounted

if TYPE_CHECKING:
    from .runner.host_context import HostContext

#: Below this many free bytes under work_root a failed step is put down to the disk (a venv
#: with pip alone needs about 20 MB, a CUDA toolkit gigabytes).
LOW_SPACE_BYTES = 64 * 1024 * 1024

_NO_SPACE = re.compile(
    r"No space left on device|Errno 28\b|ENOSPC|Disk quota exceeded|EDQUOT|not enough disk",
    re.IGNORECASE,
)


def probe_command(work_root: str) -> str:
    """Shell: the nearest existing directory at or above work_root, then its `df -Pk` line."""
    if work_root == "~" or work_root.startswith("~/"):
        start = '"$HOME"' + (shlex.quote(work_root[1:]) if len(work_root) > 1 else "")
    else:
        start = shlex.quote(work_root)
    return (
        f'd={start}; while [ ! -e "$d" ] && [ "$d" != / ]; do d=$(dirname "$d"); done; '
        'printf \'%s\\n\' "$d"; df -Pk "$d" | tail -n 1'
    )


def free_under(ctx: HostContext) -> tuple[str, int] | None:
    """(directory, free bytes) for the host's work_root, or None when it cannot be told."""
    try:
        with uncancelled(), uncounted():
            res = ctx.run(probe_command(ctx.host.work_root), check=False, timeout=30)
    except Exception:  # noqa: BLE001 - a note on a failure must never fail itself
        return None
    lines = res.stdout.strip().splitlines()
    if res.exit_code != 0 or len(lines) < 2:
        return None
    fields = lines[-1].split()
    try:
        return lines[0], int(fields[3]) * 1024
    except (IndexError, ValueError):
        return None


def out_of_space_note(ctx: HostContext, error: str) -> str:
    """The words to put before a failed host's error when its disk is full, else ""."""
    if "not enough disk" in error:
        return ""  # the space check before the step already said it, with both figures
    found = free_under(ctx)
    if found is None:
        return ""
    path, free = found
    said = bool(_NO_SPACE.search(error))
    if not said and free >= LOW_SPACE_BYTES:
        return ""
    what = "out of disk space" if said or free < 1024 * 1024 else "nearly out of disk space"
    return (
        f"{what} under {path} (work_root {ctx.host.work_root}): {free} bytes "
        f"({free / 1048576:.1f} MiB) free; free some space or set host var work_root to a "
        "larger disk. The step failed with: "
    )


__all__ = ["LOW_SPACE_BYTES", "free_under", "out_of_space_note", "probe_command"]
