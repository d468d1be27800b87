"""Build one wheel on a host (stdlib only; runs remotely, reads JSON argv[1], prints JSON).

Arguments::

    {"src": dir, "python": env python, "env": {...}, "pip_args": [...], "out_dir": dir,
     "log": path, "front_end": "pip" | "uv", "progress": path or null, "timeout": seconds}

Runs ``python -m pip wheel --no-build-isolation --no-deps -v -w TMP src`` (or ``uv build
--wheel --no-build-isolation``) with stdout and stderr going line by line to the log file.
The wheel is written into a temporary directory beside `out_dir` and moved in only when the
build succeeded, so an interrupted build never leaves a wheel behind.

With `progress` set, the script keeps a small JSON file there up to date
(``{"done": n, "total": N or null, "units": compile commands seen, "line": last progress
line}``) that the controller can poll while the build runs.

The failure classifier (`classify`) lives here because this file must stand alone on the host;
the controller imports it from here (``sm120kit.knobs.classify_build_failure``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque

# -- failure classification ---------------------------------------------------------------

#: Settings that bound a build's memory, in the order advice should name them.
PARALLEL_KNOBS = (
    "MAX_JOBS",
    "NVCC_THREADS",
    "SGL_KERNEL_COMPILE_THREADS",
    "CMAKE_BUILD_PARALLEL_LEVEL",
)

# (kind, compiled pattern). Order matters: the environmental causes come first because a
# missing toolkit or a version clash explains every later error in the log.
FAILURE_PATTERNS = [
    (
        "cuda_home_missing",
        re.compile(
            r"CUDA_HOME environment variable is not set"
            r"|nvcc: (?:command )?not found"
            r"|No such file or directory: '[^']*/bin/nvcc'"
            r"|Failed to find nvcc"
            r"|No CMAKE_CUDA_COMPILER could be found"
            r"|Could NOT find CUDAToolkit"
        ),
    ),
    (
        "torch_cuda_mismatch",
        re.compile(
            r"The detected CUDA version \([^)]*\) mismatches the version that was used to "
            r"compile\s+PyTorch"
        ),
    ),
    (
        "nvcc_too_old_for_arch",
        re.compile(
            r"Unsupported gpu architecture '(?:compute|sm)_1[2-9]\d[af]?'"
            r"|Value '(?:sm|compute)_1[2-9]\d[af]?' is not defined for option 'gpu-name'"
        ),
    ),
    (
        "oom",
        re.compile(
            r"Killed signal terminated program"
            r"|died due to signal 9"
            r"|^\s*Killed\s*$"
            r"|fatal error: Killed"
            r"|virtual memory exhausted"
            r"|std::bad_alloc",
            re.MULTILINE,
        ),
    ),
    (
        "cxx_std",
        re.compile(
            r"namespace \"std\" has no member \"strong_ordering\""
            r"|'strong_ordering' in namespace 'std' does not name a type"
            r"|requires (?:at least )?C\+\+20"
            r"|#error C\+\+20 or later compatible compiler is required"
        ),
    ),
]


def _knob_values(env):
    """The parallelism settings present in `env`, rendered 'NAME=value'."""
    found = []
    for name in PARALLEL_KNOBS:
        if env and name in env:
            found.append(f"{name}={env[name]}")
    return found


def _advice(kind, env, evidence):
    if kind == "oom":
        now = _knob_values(env)
        named = ", ".join(now) if now else "MAX_JOBS / NVCC_THREADS / SGL_KERNEL_COMPILE_THREADS"
        return (
            f"the build was killed by the OOM killer ({evidence}): each nvcc thread needs about 3-5 GB; "
            f"lower {named} (inventory var or --set) and rebuild"
        )
    if kind == "nvcc_too_old_for_arch":
        return (
            f"nvcc does not know this GPU architecture ({evidence}): sm_120 needs CUDA toolkit >= 12.8 "
            "(sm_120f >= 12.9); point CUDA_HOME at a newer toolkit"
        )
    if kind == "cuda_home_missing":
        return (
            f"no usable CUDA toolkit for the build ({evidence}): set CUDA_HOME to a toolkit with nvcc; "
            "with a CPU-only torch, cpp_extension ignores CUDA_HOME, so install a CUDA (cu128+) "
            "torch in the build env"
        )
    if kind == "cxx_std":
        return (
            f"the package compiles with -std=c++17 but the torch headers need C++20 ({evidence}): pin a "
            "torch whose headers accept C++17 for this version, or patch the -std flag"
        )
    if kind == "torch_cuda_mismatch":
        return (
            f"nvcc's major CUDA version differs from the one torch was built with ({evidence}): use a "
            "toolkit of torch's CUDA major, or a torch from the matching index"
        )
    return "the build failed; see the log for the first error"


def classify(log_text, exit_code=None, env=None):
    """Classify a failed build from its log: returns (kind, advice).

    kind is one of oom, nvcc_too_old_for_arch, cuda_home_missing, cxx_std,
    torch_cuda_mismatch, other. `env` (the build's knob env) lets the OOM advice name the
    current values of the settings to lower. Exit status 137 / -9 (SIGKILL) counts as OOM
    when nothing more specific is in the log.
    """
    kind, evidence = classify_evidence(log_text, exit_code)
    return kind, _advice(kind, env, evidence)


def classify_evidence(log_text, exit_code=None):
    """(kind, the log line or exit status that decided it)."""
    for kind, pattern in FAILURE_PATTERNS:
        match = pattern.search(log_text)
        if match:
            start = log_text.rfind("\n", 0, match.start()) + 1
            end = log_text.find("\n", match.end())
            line = log_text[start : end if end != -1 else len(log_text)].strip()
            return kind, line[:200]
    if exit_code in (137, -9):
        return "oom", f"exit status {exit_code} (SIGKILL)"
    return "other", f"exit status {exit_code}"


# -- progress -----------------------------------------------------------------------------

_NINJA = re.compile(r"^\s*\[(\d+)/(\d+)\]")
# A compile unit started without ninja: nvcc, or a C/C++ compiler invoked with -c.
_UNIT = re.compile(
    r"(?:^|[\s/])(?:nvcc|c\+\+|g\+\+|gcc|cc|clang\+\+|x86_64-linux-gnu-g(?:cc|\+\+))\s.*\s-c\s"
)


class Progress:
    """Tracks ninja `[n/N]` lines and compile commands; writes them to a JSON file."""

    def __init__(self, path):
        self.path = path
        self.done = 0
        self.total = None
        self.units = 0
        self.line = ""
        self._last_write = 0.0

    def feed(self, line):
        match = _NINJA.match(line)
        changed = False
        if match:
            self.done, self.total = int(match.group(1)), int(match.group(2))
            self.line = line.strip()[:200]
            changed = True
        elif _UNIT.search(line):
            self.units += 1
            self.line = line.strip()[:200]
            changed = True
        if changed:
            self.write(force=False)

    def write(self, force=True, finished=False):
        if not self.path:
            return
        now = time.time()
        # Throttled: a ninja build prints thousands of lines; the poller reads every second.
        if not force and now - self._last_write < 0.5:
            return
        self._last_write = now
        doc = {
            "done": self.done,
            "total": self.total,
            "units": self.units,
            "line": self.line,
            "finished": finished,
            "updated": now,
        }
        _write_json_atomic(self.path, doc)


def _write_json_atomic(path, doc):
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".progress-")
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh)
    os.replace(tmp, path)


# -- the build ----------------------------------------------------------------------------


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def build_command(args, tmp_out):
    """The build front end's command line."""
    python = args["python"]
    pip_args = list(args.get("pip_args") or [])
    front_end = args.get("front_end") or "pip"
    if front_end == "uv":
        uv = args.get("uv") or "uv"
        return (
            [
                uv,
                "build",
                "--wheel",
                "--no-build-isolation",
                "--python",
                python,
                "--out-dir",
                tmp_out,
            ]
            + pip_args
            + [args["src"]]
        )
    if front_end != "pip":
        raise ValueError(f"front_end must be 'pip' or 'uv', not {front_end!r}")
    # -v: without it pip swallows the backend's output, and the log (and the OOM
    # diagnosis) would hold nothing of the compiler's.
    return (
        [python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-v", "-w", tmp_out]
        + pip_args
        + [args["src"]]
    )


def build_env(args):
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (args.get("env") or {}).items()})
    # Tools installed into the managed env (ninja, cmake) must win over the system's.
    bindir = os.path.dirname(args["python"])
    if bindir:
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_build(args):
    src = os.path.abspath(os.path.expanduser(args["src"]))
    out_dir = os.path.abspath(os.path.expanduser(args["out_dir"]))
    log_path = os.path.abspath(os.path.expanduser(args["log"]))
    progress = Progress(os.path.expanduser(args["progress"]) if args.get("progress") else None)
    args = dict(args, src=src)
    for directory in (out_dir, os.path.dirname(log_path)):
        if not os.path.isdir(directory):
            os.makedirs(directory)
    _remove_stale_tmp(out_dir)
    tmp_out = tempfile.mkdtemp(dir=out_dir, prefix=".tmp-build-")
    tail = deque(maxlen=40)
    start = time.time()
    env = build_env(args)
    command = build_command(args, tmp_out)
    exit_code = None
    try:
        with open(log_path, "w", buffering=1, encoding="utf-8", errors="replace") as log:
            log.write("# sm120kit build: {}\n".format(" ".join(command)))
            for name in sorted(args.get("env") or {}):
                log.write("# env {}={}\n".format(name, args["env"][name]))
            proc = subprocess.Popen(
                command,
                cwd=src,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            _forward_termination(proc)
            deadline = start + float(args["timeout"]) if args.get("timeout") else None
            assert proc.stdout is not None
            for raw in iter(proc.stdout.readline, b""):
                line = raw.decode("utf-8", "replace")
                log.write(line)
                tail.append(line.rstrip("\n"))
                progress.feed(line)
                if deadline and time.time() > deadline:
                    _kill_group(proc)
                    log.write("# sm120kit: build timed out after {}s\n".format(args["timeout"]))
                    break
            exit_code = proc.wait()
            log.write(f"# sm120kit: exit status {exit_code}\n")
        seconds = round(time.time() - start, 3)
        wheels = sorted(f for f in os.listdir(tmp_out) if f.endswith(".whl"))
        result = {
            "ok": False,
            "wheel": None,
            "sha256": None,
            "seconds": seconds,
            "log": log_path,
            "exit_code": exit_code,
            "command": command,
            "failure": None,
            "log_tail": list(tail),
        }
        if exit_code == 0 and len(wheels) == 1:
            final = os.path.join(out_dir, wheels[0])
            digest = sha256_file(os.path.join(tmp_out, wheels[0]))
            os.replace(os.path.join(tmp_out, wheels[0]), final)
            result.update(ok=True, wheel=final, sha256=digest)
        else:
            with open(log_path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            if exit_code == 0:
                kind, advice = "other", f"the build exited 0 but produced {len(wheels)} wheels"
            else:
                kind, advice = classify(text, exit_code, args.get("env") or {})
            result["failure"] = {"kind": kind, "advice": advice}
        progress.write(force=True, finished=True)
        return result
    finally:
        shutil.rmtree(tmp_out, ignore_errors=True)


def _remove_stale_tmp(out_dir):
    # Left by a build that was SIGKILLed (no finally ran); never a wheel the caller knows of.
    for name in os.listdir(out_dir):
        if name.startswith(".tmp-build-"):
            shutil.rmtree(os.path.join(out_dir, name), ignore_errors=True)


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


def _forward_termination(proc):
    # The build runs in its own session so that killing it reaches ninja and every nvcc; a
    # SIGTERM/SIGHUP to this script (the controller gave up) must take the whole tree along.
    def handler(signum, frame):
        _kill_group(proc)
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        try:
            signal.signal(sig, handler)
        except (ValueError, OSError):
            pass


def main(argv):
    args = json.loads(argv[1]) if len(argv) > 1 else {}
    try:
        result = run_build(args)
    except (KeyError, ValueError, OSError) as exc:
        result = {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}",
            "wheel": None,
            "failure": None,
        }
    sys.stdout.write(json.dumps(result) + "\n")
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
