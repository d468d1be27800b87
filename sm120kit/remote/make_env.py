"""Probe or build the managed Python environment (a venv with torch and build tools) on the host.

Runs on the host with any Python >= 3.8 and the standard library only. Arguments (argv[1],
JSON), one of::

    {"action": "probe", "env": path, "marker": name}
    {"action": "apply", "env": path, "marker": name, "steps": [...], "cleanup": [path, ...]}

``probe`` changes nothing: it reports whether the env exists, its marker file (JSON, written
last by ``apply``: an env without one is incomplete and never used), and whether its python
runs. ``apply`` runs the controller's steps in order through the hosts' step interpreter
(`sm120kit.remote.lib.steps`: ``remove``, ``run``, ...), with the env's own ops:
``select`` (attempts: pip dry runs, tried in order, each printing pip's installation report;
want: the torch build asked for; the first source that offers torch wins, and a build other
than the one wanted is refused, naming the file, before anything is installed),
``install_torch`` (argv, requirement: installs from the source ``select`` chose),
``inspect`` (python: runs ``lib/in_target/env_facts.py`` in it, one JSON document of
interpreter and torch facts), ``marker`` (path, spec, tools: writes {"spec", "tools", "info"}
atomically). A venv cannot be moved (its scripts
carry absolute paths), so it is built in place and the marker is the completeness signal; on a
failure or SIGTERM/SIGHUP/SIGINT the ``cleanup`` paths are removed, and after SIGKILL the next
run finds no marker and rebuilds. Prints one JSON document: ``{"ok", "error", "done", "info",
"seconds", "log_tail"}`` (apply) or ``{"exists", "marker", "python_ok"}`` (probe).
"""

import json
import os
import posixpath
import re
import sys
from urllib.parse import unquote, urlparse

from sm120kit.remote.lib.files import module_text, write_atomic
from sm120kit.remote.lib.proc import StepFailed, run, tail_of
from sm120kit.remote.lib.steps import apply as apply_steps
from sm120kit.remote.lib.steps import trap_signals

#: The program the ``inspect`` step runs in the env (listed so the hosts' bundle carries it).
__bundle__ = ("sm120kit.remote.lib.in_target.env_facts",)


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


# What a torch wheel's requirements say about its CUDA build. PyPI's torch up to 2.10 requires
# e.g. "nvidia-cuda-runtime-cu12==12.8.90", from 2.11 "cuda-toolkit[cublas,cudart,...]==13.0.3"
# (the .metadata files of PyPI's torch 2.10.0 / 2.13.0 cp311 manylinux_2_28_x86_64 wheels).
CUDA_REQUIREMENT = re.compile(
    r"^\s*(?:nvidia-cuda-runtime(?:-cu\d+)?|cuda-toolkit)\s*(?:\[[^\]]*\])?\s*==\s*(\d+)\.(\d+)",
    re.IGNORECASE,
)


def build_of(version, requires_dist):
    """``cpu``/``cuXY`` from a local label, else the CUDA X.Y its requirements pin (``cuXY``),
    else None (a wheel without label or CUDA runtime requirement: a CPU build, or unknown)."""
    if "+" in version:
        return version.split("+", 1)[1]
    for req in requires_dist or []:
        m = CUDA_REQUIREMENT.match(req)
        if m:
            return "cu%s%s" % (m.group(1), m.group(2))
    return None


def judge_torch(version, requires_dist, want):
    """Why pip's choice is not the wanted build (None when it is)."""
    build = build_of(version, requires_dist)
    if build == want["flavour"]:
        return None
    if build is None:
        return "it names no CUDA build (no local label, no CUDA runtime requirement)"
    if build == "cpu" or build.startswith("cu") and build[2:].isdigit():
        what = (
            "a CPU build" if build == "cpu" else "built for CUDA %s.%s" % (build[2:-1], build[-1])
        )
    else:
        what = "build %s" % build
    return "it is %s" % what


def report_item(out):
    """The torch entry of pip's installation report (JSON on stdout)."""
    # pip's own log lines come first; the report is pretty-printed, starting at a lone "{".
    match = re.search(r"^\{$", out, re.MULTILINE)
    try:
        doc = json.JSONDecoder().raw_decode(out[match.start() :])[0] if match else {}
    except ValueError as exc:
        raise StepFailed("pip's dry-run report is not JSON: %s" % exc) from None
    for item in doc.get("install") or []:
        if (item.get("metadata") or {}).get("name", "").lower() == "torch":
            return item
    raise StepFailed("pip's dry run chose no torch")


def pip_error(text):
    """pip's reason in one line: what the sources offer ("from versions: ..."), else the
    first error with the conflict's causes (a pip config constraint shows up there)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    for line in lines:
        if "from versions" in line:
            return line.replace("ERROR: ", "")
    errors = [line.replace("ERROR: ", "") for line in lines if line.startswith("ERROR")]
    causes = [line for line in lines if line.startswith("The user requested")]
    first = (errors or lines or ["no output"])[0]
    return first + (": " + "; ".join(causes) if causes else "")


def select_torch(step, result):
    """Run the dry runs in order; the first source offering the requirement decides."""
    want, seen = step["want"], []
    for attempt in step["attempts"]:
        code, out, err = run(attempt["argv"], merge=False, timeout=step.get("timeout", 1800))
        if code != 0 and "no such option" in err:
            # pip < 22.2 has no --dry-run/--report: the exact pin alone must do.
            result["torch_index_args"] = attempt["index"]
            result["torch_file"] = None
            return
        if code != 0:
            seen.append(pip_error(err + "\n" + out))
            continue
        item = report_item(out)
        url = (item.get("download_info") or {}).get("url") or ""
        name = unquote(posixpath.basename(urlparse(url).path)) or url
        meta = item.get("metadata") or {}
        version = meta.get("version", "?")
        problem = judge_torch(version, meta.get("requires_dist"), want)
        if problem:
            raise StepFailed(
                "refused %s (torch %s from %s): %s, but the recipe wants %s; nothing was "
                "installed" % (name, version, url, problem, want["flavour"])
            )
        result["torch_file"] = name
        result["torch_url"] = url
        result["torch_index_args"] = attempt["index"]
        return
    raise StepFailed(
        "no source offers %s (%s); nothing was installed"
        % (want["requirement"], "; ".join(seen) or "no source tried")
    )


def _select(step, result):
    select_torch(step, result)


def _install_torch(step, result):
    argv = step["argv"] + result.get("torch_index_args", []) + [step["requirement"]]
    code, out, _ = run(argv, timeout=step.get("timeout"))
    if code != 0:
        raise StepFailed(
            "installing %s failed (exit %d): %s" % (step["requirement"], code, tail_of(out, 1)),
            tail_of(out),
        )


def _inspect(step, result):
    # The program is the hosts' library's (lib/in_target/env_facts.py), not the step's.
    program = module_text(__bundle__[0])
    code, out, err = run([step["python"], "-c", program], merge=False, timeout=600)
    lines = [line for line in out.strip().splitlines() if line.startswith("{")]
    if code != 0 or not lines:
        raise StepFailed(
            "inspecting the env failed (exit %d): %s" % (code, tail_of(err or out, 1)),
            tail_of(err or out),
        )
    result["info"] = json.loads(lines[-1])


def _marker(step, result):
    doc = {"spec": step["spec"], "tools": step["tools"], "info": result.get("info")}
    write_atomic(step["path"], json.dumps(doc, sort_keys=True, indent=1))


ENV_OPS = {
    "select": _select,
    "install_torch": _install_torch,
    "inspect": _inspect,
    "marker": _marker,
}


def apply(args):
    """Run the controller's steps with the env's own ops (see the module docstring)."""
    return apply_steps(args, ENV_OPS, {"info": None})


def main():
    args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    trap_signals()
    if args.get("action") == "probe":
        doc = probe(args)
    elif args.get("action") == "apply":
        doc = apply(args)
    else:
        doc = {"ok": False, "error": "unknown action %r" % args.get("action")}
    print(json.dumps(doc, sort_keys=True))


if __name__ == "__main__":
    main()
