"""Install (or verify) a CUDA toolkit on the host by running a list of steps the controller chose.

Runs on the host with any Python >= 3.8 and the standard library only. Arguments (argv[1],
JSON)::

    {"steps": [{"op": ..., ...}, ...],   # run in order; the controller renders the same list
     "cleanup": [path, ...],             # removed when a step fails or the script is stopped
     "measure": path | null}             # report this directory's size at the end

Step ops: ``clean`` (globs: remove leftovers of an interrupted run), ``mkdir`` (path),
``download`` (url, dest, sha256: "" = not verified), ``run`` (argv, cwd), ``link`` (target,
path: a symlink), ``write`` (path, text, if_missing), ``verify`` (nvcc, release, nvcc_version,
compile, output: ``nvcc --version`` must say that release [and exact version], then the compile
argv must produce ``output``), ``rename`` (src, dest: replaces dest), ``remove`` (path).

The controller installs into a temporary directory next to the final prefix and renames it
only after `verify` passed, so an interrupted run never leaves a toolkit that looks complete.
SIGTERM/SIGHUP/SIGINT clean up like a failure; after SIGKILL the next run's ``clean`` step
removes the leftovers. Prints one JSON document:
``{"ok", "error", "done": steps completed, "nvcc": {"release", "version"}, "size_bytes",
"seconds", "log_tail"}``.
"""

import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

CHUNK = 1 << 20


class StepFailed(Exception):
    """A step failed; the message is one line for the user."""

    def __init__(self, message, tail=""):
        Exception.__init__(self, message)
        self.tail = tail


class Interrupted(BaseException):
    pass


def _on_signal(signum, frame):
    raise Interrupted("interrupted by signal %d" % signum)


def remove(path):
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)


def tail_of(text, lines=15):
    return "\n".join(text.strip().splitlines()[-lines:])


def run(argv, cwd=None, timeout=None):
    try:
        p = subprocess.run(
            argv,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            universal_newlines=True,
            timeout=timeout,
        )
    except FileNotFoundError:
        raise StepFailed("%s: not found" % argv[0]) from None
    except subprocess.TimeoutExpired:
        raise StepFailed("%s timed out after %ss" % (" ".join(argv[:4]), timeout)) from None
    return p.returncode, p.stdout


def download(url, dest, sha256):
    parent = os.path.dirname(dest)
    if parent and not os.path.isdir(parent):
        os.makedirs(parent)
    digest = hashlib.sha256()
    try:
        # The .part file exists before the request goes out, so a run killed at any point of
        # the download leaves a dot-named file the next run cleans up.
        with open(dest, "wb") as out, urllib.request.urlopen(url, timeout=60) as resp:
            expected = resp.headers.get("Content-Length")
            total = 0
            while True:
                block = resp.read(CHUNK)
                if not block:
                    break
                total += len(block)
                digest.update(block)
                out.write(block)
        # http.client's read(n) returns b"" when the server hangs up early instead of raising:
        # a dropped connection must not pass for a short file.
        if expected is not None and total != int(expected):
            raise OSError("connection closed after %d of %s bytes" % (total, expected))
    except Exception as exc:  # urllib raises many types; all mean "no file"
        remove(dest)
        raise StepFailed("download of %s failed: %s: %s" % (url, type(exc).__name__, exc)) from None
    got = digest.hexdigest()
    if sha256 and got.lower() != sha256.lower():
        remove(dest)
        raise StepFailed("sha256 mismatch for %s: got %s, expected %s" % (url, got, sha256))
    return got


def nvcc_version(nvcc):
    code, out = run([nvcc, "--version"], timeout=120)
    if code != 0:
        raise StepFailed("%s --version failed (exit %d): %s" % (nvcc, code, tail_of(out, 1)))
    m = re.search(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)", out)
    if not m:
        raise StepFailed("%s --version printed no 'release X.Y, VX.Y.Z' line" % nvcc)
    return m.group(1), m.group(2)


def verify(step):
    release, version = nvcc_version(step["nvcc"])
    if release != step["release"]:
        raise StepFailed(
            "%s is CUDA %s (V%s), expected CUDA %s"
            % (step["nvcc"], release, version, step["release"])
        )
    want = step.get("nvcc_version")
    if want and version != want:
        raise StepFailed(
            "%s is V%s, but CUDA %s ships nvcc V%s"
            % (step["nvcc"], version, step.get("toolkit") or release, want)
        )
    remove(step["output"])
    code, out = run(step["compile"], timeout=600)
    if code != 0 or not os.path.isfile(step["output"]) or os.path.getsize(step["output"]) == 0:
        raise StepFailed(
            "nvcc could not compile a trivial kernel (exit %d): %s" % (code, tail_of(out, 1)),
            tail_of(out),
        )
    return {"release": release, "version": version}


def do_step(step, result):
    op = step["op"]
    if op == "clean":
        removed = []
        for pattern in step["globs"]:
            for path in sorted(glob.glob(pattern)):
                remove(path)
                removed.append(path)
        result["removed"] = removed
    elif op == "mkdir":
        if not os.path.isdir(step["path"]):
            os.makedirs(step["path"])
    elif op == "download":
        result["sha256"] = download(step["url"], step["dest"], step.get("sha256") or "")
    elif op == "run":
        code, out = run(step["argv"], cwd=step.get("cwd"), timeout=step.get("timeout"))
        if code != 0:
            name = " ".join(os.path.basename(a) for a in step["argv"][:4])
            raise StepFailed(
                "%s failed (exit %d): %s" % (name, code, tail_of(out, 1)), tail_of(out)
            )
    elif op == "link":
        if os.path.lexists(step["path"]):
            os.unlink(step["path"])
        os.symlink(step["target"], step["path"])
    elif op == "write":
        if step.get("if_missing") and os.path.exists(step["path"]):
            return
        tmp = step["path"] + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(step["text"])
        os.rename(tmp, step["path"])
    elif op == "verify":
        result["nvcc"] = verify(step)
    elif op == "rename":
        if os.path.lexists(step["dest"]):
            remove(step["dest"])
        os.rename(step["src"], step["dest"])
    elif op == "remove":
        remove(step["path"])
    else:
        raise StepFailed("unknown step op %r" % op)


def size_of(root):
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                total += os.path.getsize(path)
    return total


def main():
    args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _on_signal)
    start = time.time()
    result = {"ok": False, "error": None, "done": 0, "nvcc": None, "seconds": 0.0}
    try:
        for step in args.get("steps", []):
            do_step(step, result)
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
    if result["ok"] and args.get("measure") and os.path.isdir(args["measure"]):
        result["size_bytes"] = size_of(args["measure"])
    result["seconds"] = round(time.time() - start, 3)
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
