"""A running build's (or stack install's) progress on the live display: its progress file, polled from a helper
thread (a poll never fails the build, and is not written to the host log)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..errors import Interrupted
from ..output.progress import NullProgress, PlainProgress, Progress
from .host_context import HostContext

#: Seconds between two reads of the remote progress file on a live display.
PROGRESS_POLL_SECONDS = 2.0


def poll_interval(progress: Progress) -> float | None:
    """How often a host's progress file is worth reading for `progress`: every
    `PROGRESS_POLL_SECONDS` on a live table; a third of the heartbeat in plain output, which
    prints an update at most once a heartbeat (a poll every 2 s there cost a command on the
    host and ~10 ms of the controller's CPU per host each, for lines never printed); never
    when nothing is shown."""
    if isinstance(progress, NullProgress):
        return None
    if isinstance(progress, PlainProgress):
        return max(PROGRESS_POLL_SECONDS, progress.heartbeat / 3)
    return PROGRESS_POLL_SECONDS


def _progress_detail(text: str, seconds: float, extra: str = "") -> str:
    """The live row of a running step from its progress file: the stack install's phase with
    the controller's transfer first (`extra`: files, bytes, rate, ETA, so no count hides
    behind another), then the host's counts; a build's units; else the time."""
    try:
        doc = json.loads(text) if text.strip() else {}
    except ValueError:
        doc = {}
    if doc.get("phase"):  # the stack step's install (install_lock): phase, files, bytes
        total = doc.get("total", 0)
        if "installed" in doc:  # a new env filled as the files arrive (install_lock stage)
            parts = [
                f"{doc.get('checked', 0)}/{total} checked",
                f"{doc['installed']} installed",
                f"{doc.get('compiled', 0):,}/{doc.get('modules', 0):,} modules compiled",
            ]
        else:
            parts = [f"{doc.get('done', 0)}/{total} files"]
        if doc.get("bytes"):
            parts.append(f"{doc['bytes'] / 1e9:.2f} GB downloaded by the host")
        host = ", ".join(parts)
        if extra:
            return f"{doc['phase']} {extra}; host: {host}; {seconds:.0f}s"
        return f"{doc['phase']} {host}; {seconds:.0f}s"
    if doc.get("total"):
        return f"[{doc.get('done', 0)}/{doc['total']}] {seconds:.0f}s"
    if doc.get("units"):
        return f"{doc['units']} units {seconds:.0f}s"
    return f"{extra}; {seconds:.0f}s" if extra else f"{seconds:.0f}s"


@contextmanager
def poll_progress(
    ctx: HostContext, step: str, path: str, extra: Callable[[], str] | None = None
) -> Iterator[None]:
    """While the block runs, show the remote build's progress file on the live display (with
    `extra`'s words beside it: what the controller does meanwhile)."""
    interval = poll_interval(ctx.runner.progress)
    if interval is None:
        yield
        return
    stop = threading.Event()
    start = time.monotonic()

    def poll() -> None:
        while not stop.wait(interval):
            try:
                text = ctx.read_text(path, timeout=30, quiet=True)
            except (Exception, Interrupted):
                # A poll never fails the build (the build's own result decides), and a
                # cancelled run is reported by the main thread, not by a traceback here.
                return
            ctx.runner.progress.step(
                ctx.host.name,
                step,
                _progress_detail(text, time.monotonic() - start, extra() if extra else ""),
            )

    thread = threading.Thread(target=poll, name=f"progress-{ctx.host.name}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=35)


__all__ = ["PROGRESS_POLL_SECONDS", "poll_interval", "poll_progress"]
