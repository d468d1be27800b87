"""The one step interpreter on the host: run the controller's steps in order, or clean up.

A step is a JSON object ``{"op": ..., ...}``; the controller computes the list
(`sm120kit.steps`), shows it rendered in check mode, and sends the very same list here. Core
ops: ``clean`` (globs: remove leftovers of an interrupted run), ``mkdir`` (path), ``download``
(url, dest, sha256: "" = not verified), ``run`` (argv, cwd, timeout), ``link`` (target, path:
a symlink), ``write`` (path, text, if_missing: atomically), ``copy`` (src, dest: ``cp -a`` into
a fresh dest, its parent created), ``rename`` (src, dest: replaces dest), ``remove`` (path).
A script adds its own ops (nvcc's ``verify``, torch's ``select``, the patcher's ``patch``).

On a failed step, or SIGTERM/SIGHUP/SIGINT, the ``cleanup`` paths are removed; after SIGKILL
the next run's first steps remove the leftovers. `apply` returns ``{"ok", "error", "done":
steps completed, "seconds", "log_tail"}`` plus what the ops recorded.
"""

import glob
import os
import signal
import time

from sm120kit.remote.lib.download import DownloadFailed
from sm120kit.remote.lib.download import download as fetch_url
from sm120kit.remote.lib.files import remove, write_atomic
from sm120kit.remote.lib.proc import StepFailed, run, tail_of


class Interrupted(BaseException):
    """A signal asked the script to stop."""


def _on_signal(signum, frame):
    raise Interrupted("interrupted by signal %d" % signum)


def trap_signals():
    """SIGTERM, SIGHUP and SIGINT raise Interrupted, so cleanup runs as after a failure."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _on_signal)


def download(url, dest, sha256):
    """Fetch `url` to `dest`, checking `sha256` when given; the hex digest it had."""
    try:
        return fetch_url(url, dest, sha256)
    except DownloadFailed as exc:
        raise StepFailed(str(exc)) from None


def run_checked(argv, cwd=None, timeout=None):
    """Run `argv`; StepFailed with its last output line when it exits non-zero."""
    code, out, _ = run(argv, cwd=cwd, timeout=timeout)
    if code != 0:
        name = " ".join(os.path.basename(a) for a in argv[:5])
        raise StepFailed("%s failed (exit %d): %s" % (name, code, tail_of(out, 1)), tail_of(out))
    return out


def _clean(step, result):
    removed = []
    for pattern in step["globs"]:
        for path in sorted(glob.glob(pattern)):
            remove(path)
            removed.append(path)
    result["removed"] = removed


def _mkdir(step, result):
    if not os.path.isdir(step["path"]):
        os.makedirs(step["path"])


def _download(step, result):
    result["sha256"] = download(step["url"], step["dest"], step.get("sha256") or "")


def _run(step, result):
    run_checked(step["argv"], cwd=step.get("cwd"), timeout=step.get("timeout"))


def _link(step, result):
    if os.path.lexists(step["path"]):
        os.unlink(step["path"])
    os.symlink(step["target"], step["path"])


def _write(step, result):
    if step.get("if_missing") and os.path.exists(step["path"]):
        return
    write_atomic(step["path"], step["text"])


def _copy(step, result):
    remove(step["dest"])
    parent = os.path.dirname(step["dest"])
    if parent and not os.path.isdir(parent):
        os.makedirs(parent)
    run_checked(["cp", "-a", step["src"], step["dest"]])


def _rename(step, result):
    if os.path.lexists(step["dest"]):
        remove(step["dest"])
    os.rename(step["src"], step["dest"])


def _remove(step, result):
    remove(step["path"])


CORE_OPS = {
    "clean": _clean,
    "mkdir": _mkdir,
    "download": _download,
    "run": _run,
    "link": _link,
    "write": _write,
    "copy": _copy,
    "rename": _rename,
    "remove": _remove,
}


def apply(args, ops=None, result=None):
    """Run ``args["steps"]`` with the core ops and `ops`; remove ``args["cleanup"]`` on failure."""
    handlers = dict(CORE_OPS)
    handlers.update(ops or {})
    trap_signals()
    start = time.time()
    result = dict(result or {})
    result.update(ok=False, error=None, done=0)
    try:
        for step in args.get("steps", []):
            handler = handlers.get(step.get("op"))
            if handler is None:
                raise StepFailed("unknown step op %r" % step.get("op"))
            handler(step, result)
            result["done"] += 1
        result["ok"] = True
    except StepFailed as exc:
        result["error"] = str(exc)
        result["log_tail"] = exc.tail
    except Interrupted as exc:
        result["error"] = str(exc)
    except OSError as exc:
        result["error"] = "%s: %s" % (type(exc).__name__, exc)
    finally:
        if not result["ok"]:
            for path in args.get("cleanup", []):
                remove(path)
    result["seconds"] = round(time.time() - start, 3)
    return result
