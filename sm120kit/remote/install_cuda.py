"""Install (or verify) a CUDA toolkit on the host by running a list of steps the controller chose.

Runs on the host with any Python >= 3.8 and the standard library only. Arguments (argv[1],
JSON)::

    {"steps": [{"op": ..., ...}, ...],   # run in order; the controller renders the same list
     "cleanup": [path, ...],             # removed when a step fails or the script is stopped
     "measure": path | null}             # report this directory's size at the end

Steps run through the hosts' one step interpreter (`sm120kit.remote.lib.steps`, which names
the core ops), plus ``verify`` (nvcc, release, nvcc_version, compile, output: ``nvcc
--version`` must say that release [and exact version], then the compile argv must produce
``output``).

The controller installs into a temporary directory next to the final prefix and renames it
only after `verify` passed, so an interrupted run never leaves a toolkit that looks complete.
SIGTERM/SIGHUP/SIGINT clean up like a failure; after SIGKILL the next run's ``clean`` step
removes the leftovers. Prints one JSON document:
``{"ok", "error", "done": steps completed, "nvcc": {"release", "version"}, "size_bytes",
"seconds", "log_tail"}``.
"""

import json
import os
import re
import sys

from sm120kit.remote.lib.files import remove, size_of
from sm120kit.remote.lib.proc import StepFailed, run, tail_of
from sm120kit.remote.lib.steps import apply


def nvcc_version(nvcc):
    code, out, _ = run([nvcc, "--version"], timeout=120)
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
    code, out, _ = run(step["compile"], timeout=600)
    if code != 0 or not os.path.isfile(step["output"]) or os.path.getsize(step["output"]) == 0:
        raise StepFailed(
            "nvcc could not compile a trivial kernel (exit %d): %s" % (code, tail_of(out, 1)),
            tail_of(out),
        )
    return {"release": release, "version": version}


def _verify(step, result):
    result["nvcc"] = verify(step)


def main():
    args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    result = apply(args, {"verify": _verify}, {"nvcc": None})
    if result["ok"] and args.get("measure") and os.path.isdir(args["measure"]):
        result["size_bytes"] = size_of(args["measure"])
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
