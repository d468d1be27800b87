"""SIGINT/SIGTERM/SIGHUP at any moment of a task: exit 3, one line, no traceback from any thread.

`install` runs first thing when tasks.py is loaded (this module imports only the standard
library, so the window before it is as short as it can be). Until a task body runs, a signal
ends the process at once: nothing has been started on any host, so there is nothing to clean
up, and invoke itself would turn a Ctrl-C there into a silent exit 1. While a body runs
(`body_running`), the signal is raised as `Interrupted` for the task layer (`cli.guarded`) and
the runner to end the run in order. Helper threads (a build's progress poll, lock refreshes)
that see `Interrupted` from a cancelled command end quietly instead of printing a traceback.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import Interrupted

EXIT_INTERRUPTED = 3
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_state = {"bodies": 0, "installed": False, "done": False}


def _before_body(signum: int, frame: Any) -> None:
    name = signal.Signals(signum).name
    if _state["bodies"]:
        raise Interrupted(name)
    if _state["done"]:
        os._exit(EXIT_INTERRUPTED)  # the task already printed its result: add nothing
    message = f"interrupted ({name})"
    try:
        if "--json" in sys.argv[1:]:
            doc = {"error": message, "hosts": {}, "interrupted": name}
            sys.stdout.write(json.dumps(doc) + "\n")
            sys.stdout.flush()
        sys.stderr.write(f"error: {message}\n")
        sys.stderr.flush()
    finally:
        # Before any task body: no host was touched, no lock taken; leave now, whatever the
        # interpreter was doing (importing, parsing flags).
        os._exit(EXIT_INTERRUPTED)


def _thread_hook(args: Any) -> None:
    if args.exc_type is not None and issubclass(args.exc_type, (Interrupted, KeyboardInterrupt)):
        return  # the run is being cancelled; the main thread reports it
    _previous_hook(args)


_previous_hook = threading.excepthook


def under_invoke_cli() -> bool:
    """Whether this process is the `invoke` command (not, e.g., pytest loading tasks.py)."""
    argv0 = sys.argv[0] if sys.argv else ""
    return os.path.basename(argv0) in ("invoke", "inv") or argv0.endswith(
        os.path.join("invoke", "__main__.py")
    )


def install(force: bool = False) -> None:
    """Signal handlers for the time before a task body, and a thread hook that keeps a
    cancelled helper thread silent. Only in the `invoke` command (unless `force`), main
    thread only; idempotent."""
    if _state["installed"] or threading.current_thread() is not threading.main_thread():
        return
    if not (force or under_invoke_cli()):
        return
    for sig in SIGNALS:
        signal.signal(sig, _before_body)
    threading.excepthook = _thread_hook
    _state["installed"] = True


@contextmanager
def body_running() -> Iterator[None]:
    """While a task body runs, signals are raised as `Interrupted` (not an immediate exit)."""
    _state["bodies"] += 1
    try:
        yield
    finally:
        _state["bodies"] -= 1
        _state["done"] = True


__all__ = ["EXIT_INTERRUPTED", "SIGNALS", "body_running", "install"]
