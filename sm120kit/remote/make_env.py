"""Probe or build the managed Python environment (a venv with torch and build tools) on the host.

Runs on the host with any Python >= 3.8 and the standard library only. Arguments (argv[1],
JSON), one of::

    {"action": "probe", "env": path, "marker": name}
    {"action": "apply", "env": path, "marker": name, "steps": [...], "cleanup": [path, ...]}

``probe`` changes nothing: it reports whether the env exists, its marker file (JSON, written
last by ``apply``: an env without one is incomplete and never used), and whether its python
runs. ``apply`` runs the controller's steps in order: ``remove`` (path), ``run`` (argv),
``inspect`` (argv printing one JSON document: interpreter and torch facts), ``marker`` (path,
spec, tools: writes {"spec", "tools", "info"} atomically). A venv cannot be moved (its scripts
carry absolute paths), so it is built in place and the marker is the completeness signal; on a
failure or SIGTERM/SIGHUP/SIGINT the ``cleanup`` paths are removed, and after SIGKILL the next
run finds no marker and rebuilds. Prints one JSON document: ``{"ok", "error", "done", "info",
"seconds", "log_tail"}`` (apply) or ``{"exists", "marker", "python_ok"}`` (probe).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time


class StepFailed(Exception):
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


def run(argv, merge=True, timeout=None):
    try:
        p = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge else subprocess.PIPE,
            universal_newlines=True,
            timeout=timeout,
        )
    except FileNotFoundError:
        raise StepFailed("%s: not found" % argv[0]) from None
    except subprocess.TimeoutExpired:
        raise StepFailed("%s timed out after %ss" % (" ".join(argv[:4]), timeout)) from None
    return p.returncode, p.stdout, p.stderr or ""


def read_marker(path):
    try:
        with open(path) as fh:
            doc = json.load(fh)
        return doc if isinstance(doc, dict) else None
    except (OSError, ValueError):
        return None


def probe(args):
    env = args["env"]
    marker = read_marker(os.path.join(env, args["marker"]))
    python = os.path.join(env, "bin", "python")
    python_ok = False
    if marker is not None and os.access(python, os.X_OK):
        code, _out, _err = run([python, "-c", "pass"], timeout=60)
        python_ok = code == 0
    return {"exists": os.path.isdir(env), "marker": marker, "python_ok": python_ok}


def do_step(step, result):
    op = step["op"]
    if op == "remove":
        remove(step["path"])
    elif op == "run":
        code, out, _ = run(step["argv"], timeout=step.get("timeout"))
        if code != 0:
            name = " ".join(os.path.basename(a) for a in step["argv"][:5])
            raise StepFailed(
                "%s failed (exit %d): %s" % (name, code, tail_of(out, 1)), tail_of(out)
            )
    elif op == "inspect":
        code, out, err = run(step["argv"], merge=False, timeout=600)
        lines = [line for line in out.strip().splitlines() if line.startswith("{")]
        if code != 0 or not lines:
            raise StepFailed(
                "inspecting the env failed (exit %d): %s" % (code, tail_of(err or out, 1)),
                tail_of(err or out),
            )
        result["info"] = json.loads(lines[-1])
    elif op == "marker":
        doc = {"spec": step["spec"], "tools": step["tools"], "info": result.get("info")}
        tmp = step["path"] + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(doc, fh, sort_keys=True, indent=1)
        os.rename(tmp, step["path"])
    else:
        raise StepFailed("unknown step op %r" % op)


def apply(args):
    start = time.time()
    result = {"ok": False, "error": None, "done": 0, "info": None}
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
    result["seconds"] = round(time.time() - start, 3)
    return result


def main():
    args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _on_signal)
    if args.get("action") == "probe":
        doc = probe(args)
    elif args.get("action") == "apply":
        doc = apply(args)
    else:
        doc = {"ok": False, "error": "unknown action %r" % args.get("action")}
    print(json.dumps(doc, sort_keys=True))


if __name__ == "__main__":
    main()
