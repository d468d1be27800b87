"""Configure a CMake project and report what each target compiles (stdlib only; runs on hosts
and on the controller; JSON in argv[1], JSON out).

Operations (``"op"``):

- ``prereqs``: ``{"cuda_home", "cuda_driver"}`` -> where the libnuma headers and library are
  (mscclpp calls ``find_package(NUMA REQUIRED)``) and a library for ``CUDA::cuda_driver``
  (`cuda_driver` when it exists, else the toolkit's ``lib64/stubs/libcuda.so``, else the
  driver's ``libcuda.so`` / ``libcuda.so.1``), each null when missing; for the library found,
  ``cuda_driver_lacks``: the driver API entry points it does not define (a stub that defines
  too few links without error, and ``--as-needed`` then drops ``libcuda.so.1`` from the module).
- ``configure``: ``{"src", "build_dir"?, "torch_of"?, "cmake", "generator", "defines": {...},
  "env": {...}, "timeout"}`` -> runs ``cmake -S src -B build_dir -G Ninja -DX=Y ...`` (the
  build dir is emptied first; without one, a scratch directory under $TMPDIR is made and
  removed after, so a plan leaves nothing behind) and reads ``compile_commands.json``: per
  target (from each output path ``CMakeFiles/<target>.dir/...``) the number of units and the
  SASS (``sm_*``) and PTX (``compute_*``) targets its commands carry. ``torch_of``: a Python
  whose torch's CMake files give ``Torch_DIR`` when the defines lack it.
- ``compile``: ``{"build_dir", "target", "source", "output", "timeout"}`` -> runs the compile
  command of the unit of `target` whose file ends with `source`, writing the object to
  `output`; reports the wall time and the peak RSS of the children.

Prints ``{"ok": bool, ...}``; a failure carries ``"error"`` and the log's last lines.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import shutil
import sys
import tempfile
import time

from sm120kit.remote.lib.elf import open_elf
from sm120kit.remote.lib.proc import StepFailed, run

_TARGET = re.compile(r"CMakeFiles/([^/]+)\.dir/")
_GENCODE = re.compile(
    r"(?:-gencode[= ]|--generate-code[= ])arch=compute_(\w+),code=(\[[^\]]*\]|\w+)"
)
_ARCH = re.compile(r"(?:^|\s)-arch[= ](sm_\w+)")


def _codes(command):
    """(sass, ptx) of one compile command, in order of appearance."""
    sass, ptx = [], []
    for _arch, code in _GENCODE.findall(command):
        for item in code.strip("[]").split(","):
            item = item.strip()
            bucket = sass if item.startswith("sm_") else ptx
            if item and item not in bucket:
                bucket.append(item)
    for code in _ARCH.findall(command):
        if code not in sass:
            sass.append(code)
    return sass, ptx


def read_compile_commands(build_dir):
    """{target: {"units": n, "sass": [...], "ptx": [...], "files": [...]}}."""
    with open(os.path.join(build_dir, "compile_commands.json")) as fh:
        entries = json.load(fh)
    targets = {}
    for entry in entries:
        command = entry.get("command") or " ".join(entry.get("arguments") or [])
        where = entry.get("output") or command
        match = _TARGET.search(where)
        name = match.group(1) if match else "?"
        info = targets.setdefault(name, {"units": 0, "sass": [], "ptx": [], "files": []})
        info["units"] += 1
        info["files"].append(entry.get("file", ""))
        sass, ptx = _codes(command)
        for code in sass:
            if code not in info["sass"]:
                info["sass"].append(code)
        for code in ptx:
            if code not in info["ptx"]:
                info["ptx"].append(code)
    return targets


def _find(names, dirs):
    for directory in dirs:
        for name in names:
            path = os.path.join(directory, name)
            if os.path.exists(path):
                return path
    return None


# Driver API entry points any libcuda (the toolkit's stub, a driver's libcuda.so.1) defines,
# and that CMake-built extensions call (mscclpp's cuMemCreate, cuLaunchKernel, ...).
DRIVER_API = ("cuInit", "cuDriverGetVersion", "cuMemCreate", "cuModuleLoadData", "cuLaunchKernel")


def driver_api_lacks(path):
    """The DRIVER_API names that the shared library at `path` does not define."""
    elf = open_elf(path)
    if elf is None:
        return ["(not a readable ELF shared library)"]
    defined = elf.symbols()[1]
    return [name for name in DRIVER_API if name not in defined]


def prereqs(args):
    cuda_home = args.get("cuda_home") or ""
    inc = ["/usr/include", "/usr/local/include"]
    libs = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu"]
    stubs = [os.path.join(cuda_home, d, "stubs") for d in ("lib64", "lib")] if cuda_home else []
    given = args.get("cuda_driver") or ""
    driver = given if given and os.path.exists(given) else None
    # The toolkit's stub, else the driver's library (a GPU host has libcuda.so.1).
    driver = driver or _find(["libcuda.so"], stubs + libs) or _find(["libcuda.so.1"], libs)
    return {
        "ok": True,
        "numa_header": _find(["numa.h"], inc),
        "numa_library": _find(["libnuma.so"], libs),
        "cuda_driver": driver,
        "cuda_driver_lacks": driver_api_lacks(driver) if driver else [],
    }


def _run(argv, env, timeout, cwd=None):
    """(exit code, merged output, seconds) of `argv`."""
    start = time.time()
    code, text, _ = run(argv, cwd=cwd, timeout=timeout, env=env)
    return code, text, round(time.time() - start, 3)


#: Printed by the env's python: where its torch keeps TorchConfig.cmake.
_TORCH_DIR = (
    "import os, torch; "
    'print(os.path.join(os.path.dirname(torch.__file__), "share", "cmake", "Torch"))'
)


def configure(args):
    if args.get("build_dir"):
        return _configure(args, os.path.abspath(os.path.expanduser(args["build_dir"])))
    scratch = tempfile.mkdtemp(prefix="sm120kit-configure-")
    try:
        return _configure(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def torch_cmake_dir(python):
    """Torch_DIR of `python`'s torch, or None when it cannot tell."""
    code, out, _err = run([python, "-c", _TORCH_DIR], merge=False, timeout=300)
    lines = out.strip().splitlines()
    return lines[-1] if code == 0 and lines else None


def _configure(args, build):
    src = os.path.abspath(os.path.expanduser(args["src"]))
    defines = dict(args.get("defines") or {})
    if args.get("torch_of") and "Torch_DIR" not in defines:
        found = torch_cmake_dir(args["torch_of"])
        if not found:
            return {
                "ok": False,
                "error": "cannot locate torch's CMake files in %s" % args["torch_of"],
            }
        defines["Torch_DIR"] = found
    shutil.rmtree(build, ignore_errors=True)
    os.makedirs(build)
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (args.get("env") or {}).items()})
    cmake = args.get("cmake") or "cmake"
    if not os.path.exists(cmake):
        # The managed env has its own CMake; an env without one falls back to PATH's.
        cmake = shutil.which("cmake", path=env.get("PATH")) or cmake
    argv = [
        cmake,
        "-S",
        src,
        "-B",
        build,
        "-G",
        args.get("generator") or "Ninja",
    ]
    for name, value in sorted(defines.items()):
        argv.append(f"-D{name}={value}")
    code, text, seconds = _run(argv, env, float(args.get("timeout") or 600))
    with open(os.path.join(build, "configure.log"), "w") as fh:
        fh.write("# " + shlex.join(argv) + "\n" + text)
    result = {"ok": code == 0, "seconds": seconds, "command": argv, "exit_code": code}
    if code != 0:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        errors = [ln for ln in lines if "Error" in ln or "error" in ln]
        result["error"] = (errors[:1] or lines[-1:] or ["cmake failed"])[0].strip()
        result["log_tail"] = lines[-30:]
        return result
    targets = read_compile_commands(build)
    for info in targets.values():
        info.pop("files", None)
    result["targets"] = targets
    return result


def compile_unit(args):
    build = os.path.abspath(os.path.expanduser(args["build_dir"]))
    with open(os.path.join(build, "compile_commands.json")) as fh:
        entries = json.load(fh)
    marker = f"CMakeFiles/{args['target']}.dir/"
    for entry in entries:
        if marker in (entry.get("output") or entry.get("command", "")) and entry["file"].endswith(
            args["source"]
        ):
            break
    else:
        return {"ok": False, "error": f"no unit {args['source']} in target {args['target']}"}
    argv = entry.get("arguments") or shlex.split(entry["command"])
    out = os.path.abspath(args["output"])
    argv = list(argv)
    argv[argv.index("-o") + 1] = out
    os.makedirs(os.path.dirname(out), exist_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    code, text, seconds = _run(
        argv,
        dict(os.environ),
        float(args.get("timeout") or 1800),
        cwd=entry.get("directory") or build,
    )
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result = {
        "ok": code == 0 and os.path.isfile(out),
        "seconds": seconds,
        "max_rss_kb": max(peak, before),
        "object": out,
        "command": argv,
        "sass": _codes(" ".join(argv))[0],
    }
    if not result["ok"]:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        result["error"] = (lines[-1:] or [f"exit {code}"])[0]
        result["log_tail"] = lines[-30:]
    return result


OPS = {"prereqs": prereqs, "configure": configure, "compile": compile_unit}


def main(argv):
    args = json.loads(argv[1]) if len(argv) > 1 else {}
    try:
        result = OPS[args.get("op", "configure")](args)
    except KeyError as exc:
        result = {"ok": False, "error": f"unknown op or missing argument: {exc}"}
    except (OSError, ValueError, StepFailed) as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
