"""Steps the controller runs itself, one by one over the host's connection.

Most operations send their Steps to a host script that interprets them (`remote/lib/steps.py`).
The source and dependency operations move files of the controller's onto the host, so their
Steps run from here: ``upload`` through the connection's file copy, ``script`` as that remote
script with its arguments (and its ``path`` in front of the host's PATH), and every other op as the very shell line `plan` shows for it
(`sm120kit.steps.render`; shell lines in a row go as one command, joined by ``&&``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..errors import HostFailed
from ..steps import Step, render
from .host_context import HostContext


def run_steps(
    ctx: HostContext,
    steps: Iterable[Step],
    *,
    failed: Callable[[Step, dict[str, Any]], str],
    timeout: float = 3600,
) -> dict[str, Any]:
    """Run `steps` in order; a script step whose answer is not ``ok`` stops them with the line
    `failed(step, answer)`. Returns the last script's answer."""
    last: dict[str, Any] = {}
    shell: list[str] = []  # shell lines run as one command: one round trip, not one each

    def flush() -> None:
        if shell:
            ctx.run(" && ".join(shell), timeout=timeout)
            shell.clear()

    for step in steps:
        if step.op == "upload":
            flush()
            ctx.put(str(step["src"]), str(step["dest"]))
        elif step.op == "script":
            flush()
            args = dict(step["args"])
            path = [str(p) for p in step.get("path") or []] or None
            last = ctx.script(
                str(step["name"]), args, python=str(step["python"]), timeout=timeout, path=path
            )
            if not last.get("ok"):
                raise HostFailed(failed(step, last))
        else:
            shell += render(step)
    flush()
    return last


__all__ = ["run_steps"]
