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

The failure classifier (`sm120kit.remote.lib.buildlog`) and the front end's command line
(`sm120kit.remote.lib.frontend`) are library modules bundled with this script; the controller
imports them from there too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import deque

from sm120kit.remote.lib.buildlog import classify
from sm120kit.remote.lib.elf import Elf, ElfError
from sm120kit.remote.lib.fatbin import elf_targets
from sm120kit.remote.lib.files import sha256_file
from sm120kit.remote.lib.frontend import build_command
from sm120kit.remote.lib.names import PROVENANCE_FILE

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


# -- build provenance ---------------------------------------------------------------------

#: The schema of the build record (`names.PROVENANCE_FILE`) written into the dist-info of every
#: wheel this script builds.
PROVENANCE_SCHEMA = 1

_TORCH_INFO = (
    "import json, sys, torch\n"
    "abi = getattr(torch._C, '_GLIBCXX_USE_CXX11_ABI', None)\n"
    "print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda,"
    " 'cxx11_abi': None if abi is None else bool(abi),"
    " 'python': '%d.%d.%d' % sys.version_info[:3]}))\n"
)


def _torch_info(python, env):
    """The build env's torch as it imports there (the record says what was, not what was asked)."""
    try:
        proc = subprocess.run(
            [python, "-c", _TORCH_INFO], capture_output=True, text=True, env=env, timeout=600
        )
        lines = proc.stdout.strip().splitlines()
        if proc.returncode == 0 and lines:
            return json.loads(lines[-1])
        err = (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1]
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        err = str(exc)
    return {"version": None, "cuda": None, "cxx11_abi": None, "error": err[:300]}


def _nvcc_version(env):
    """'13.0.88' from the nvcc the build used (CUDA_HOME's, else PATH's), or None."""
    home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    nvcc = os.path.join(home, "bin", "nvcc") if home else shutil.which("nvcc", path=env.get("PATH"))
    if not nvcc or not os.path.exists(nvcc):
        return None, None
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None, nvcc
    m = re.search(r"release [\d.]+, V([\d.]+)", out)
    return (m.group(1) if m else None), nvcc


def device_code(data, name="<wheel member>"):
    """(SASS targets, PTX targets) in one ELF file's .nv_fatbin sections (headers only), read
    the way the extension probe reads them (`sm120kit.remote.lib.fatbin`)."""
    try:
        elf = Elf(name, data)
    except (ElfError, struct.error, ValueError):
        return [], []
    sass, ptx, _found = elf_targets(elf)
    return sass, ptx


def _record_hash(data):
    import base64

    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "sha256=" + digest


def write_provenance(wheel, record):
    """Add ``<dist-info>/sm120kit-build.json`` (and its RECORD line) to a built wheel.

    The wheel is rewritten beside itself and moved into place, so a failure leaves the
    original. Fills in what the wheel itself shows: name, version and the device code of
    every shared object in it. Returns the record written.
    """
    import zipfile

    with zipfile.ZipFile(wheel) as zin:
        infos = zin.infolist()
        dist_info = next(
            (i.filename.split("/")[0] for i in infos if i.filename.endswith(".dist-info/RECORD")),
            None,
        )
        if dist_info is None:
            raise ValueError("%s has no .dist-info/RECORD" % os.path.basename(wheel))
        name, _, version = dist_info[: -len(".dist-info")].partition("-")
        code = {}
        for info in infos:
            if re.search(r"\.so(\.\d+)*$", info.filename):
                sass, ptx = device_code(zin.read(info), info.filename)
                if sass or ptx:
                    code[info.filename] = {"sass": sass, "ptx": ptx}
        record = dict(record)
        record.setdefault("package", name)
        record["wheel_version"] = version
        record["device_code"] = code
        record["gencodes"] = sorted(
            {t for c in code.values() for t in c["sass"] + c["ptx"]},
            key=lambda t: (int(re.sub(r"\D", "", t) or 0), t),
        )
        body = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode()
        target = dist_info + "/" + PROVENANCE_FILE
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(wheel), prefix=".provenance-")
        os.close(fd)
        try:
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
                for info in infos:
                    if info.filename == target:
                        continue
                    data = zin.read(info)
                    if info.filename == dist_info + "/RECORD":
                        lines = [
                            ln
                            for ln in data.decode().splitlines()
                            if ln and not ln.startswith(target + ",")
                        ]
                        own = [
                            i for i, ln in enumerate(lines) if ln.startswith(info.filename + ",")
                        ]
                        line = "%s,%s,%d" % (target, _record_hash(body), len(body))
                        lines.insert(own[0] if own else len(lines), line)
                        zout.writestr(_entry(target, info), body)
                        data = ("\n".join(lines) + "\n").encode()
                    zout.writestr(info, data, compress_type=info.compress_type)
            os.replace(tmp, wheel)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return record


def _entry(name, like):
    import zipfile

    info = zipfile.ZipInfo(name, date_time=like.date_time)
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def build_provenance(args, env):
    """What the build record says beyond what the wheel shows: the torch and nvcc measured in
    the build env, the arch list and knob env, and the controller's fields (recipe, cache key,
    source, patches) from ``args["provenance"]``."""
    given = dict(args.get("provenance") or {})
    knob_env = dict(args.get("env") or {})
    nvcc, nvcc_path = _nvcc_version(env)
    arch = given.pop("arch_list", None)
    if arch is None:
        raw = knob_env.get("TORCH_CUDA_ARCH_LIST") or ""
        arch = [a for a in re.split(r"[;,\s]+", raw) if a]
    record = {
        "schema": PROVENANCE_SCHEMA,
        "tool": "sm120kit",
        "torch": _torch_info(args["python"], env),
        "toolkit": {"nvcc": nvcc, "nvcc_path": nvcc_path, "cuda_home": knob_env.get("CUDA_HOME")},
        "arch_list": list(arch),
        "env": knob_env,
        "pip_args": list(args.get("pip_args") or []),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    record.update(given)
    return record


# -- the build ----------------------------------------------------------------------------


# Search paths the build's env puts first; the host's own value, if any, still follows.
_PREPENDED = ("LIBRARY_PATH",)


def build_env(args):
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (args.get("env") or {}).items()})
    for name in _PREPENDED:
        if name in (args.get("env") or {}) and os.environ.get(name):
            env[name] = env[name] + os.pathsep + os.environ[name]
    # Tools installed into the managed env (ninja, cmake) must win over the system's.
    bindir = os.path.dirname(args["python"])
    if bindir:
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


# -- compile cache (sccache) ---------------------------------------------------------------

#: Seconds without a compile after which the build's sccache server stops by itself: longer
#: than any configure or link step, short enough that a killed build leaves no server behind
#: for long.
SCCACHE_IDLE_SECONDS = 7200


def _free_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _read_secrets(path):
    """Credentials the controller left for this build (0600 file), removed once read."""
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        doc = {}
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    return {str(k): str(v) for k, v in (doc or {}).items()}


def _sccache(binary, arg, env, timeout=120):
    try:
        return subprocess.run(
            [binary, arg],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess([binary, arg], 1, str(exc).encode())


class CompileCache:
    """A private sccache server for one build: its own port, the host's store under
    work_root (plus the team's S3 store when configured), stats read before it stops."""

    def __init__(self, spec, base_env, log_path, secrets):
        self.spec = spec
        self.binary = spec.get("sccache") or ""
        self.result = {"enabled": False, "tool": "sccache"}
        self.server_env = None
        self.done = False
        self.wrappers = None
        port = str(_free_port())
        server = dict(base_env)
        for name in list(server):
            if name.startswith("SCCACHE_"):
                del server[name]
        server.update(
            SCCACHE_DIR=spec["dir"],
            SCCACHE_CACHE_SIZE=str(spec.get("size") or "10G"),
            SCCACHE_SERVER_PORT=port,
            SCCACHE_IDLE_TIMEOUT=str(SCCACHE_IDLE_SECONDS),
            SCCACHE_ERROR_LOG=log_path + ".sccache",
            SCCACHE_LOG="warn",
        )
        self.port = port
        self.server_base = server
        self.secrets = secrets

    def start(self):
        """Start the server; False (with the reason in `result`) when it cannot run."""
        if not self.binary or not os.access(self.binary, os.X_OK):
            self.result["reason"] = f"no sccache at {self.binary or '(unset)'}"
            return False
        os.makedirs(self.spec["dir"], exist_ok=True)
        attempts = []
        s3 = self.spec.get("s3")
        if s3:
            with_s3 = dict(self.server_base)
            with_s3.update(s3)
            with_s3.update(self.secrets)
            with_s3["SCCACHE_MULTILEVEL_CHAIN"] = "disk,s3"
            attempts.append(("disk,s3", with_s3))
        attempts.append(("disk", self.server_base))
        error = ""
        for levels, env in attempts:
            proc = _sccache(self.binary, "--start-server", env)
            if proc.returncode == 0:
                self.server_env = env
                self.result.update(enabled=True, store=self.spec["dir"], levels=levels)
                if s3:
                    self.result["team_store"] = self.spec.get("team_store") or "s3"
                if levels == "disk" and s3:
                    self.result["warning"] = (
                        "team store unreachable, local store only: " + (error[:200])
                    )
                return True
            error = _last_line(proc.stdout)
        self.result["reason"] = f"sccache server did not start: {error[:300]}"
        return False

    def build_env(self, env, scratch):
        """`env` with every build system pointed at sccache."""
        sccache = self.binary
        env = dict(env)
        for name in list(env):
            if name.startswith("SCCACHE_") or name.startswith("AWS_"):
                del env[name]
        env["SCCACHE_SERVER_PORT"] = self.port
        # Should the server ever be gone, a client starts one from its own env: the same store.
        env["SCCACHE_DIR"] = self.spec["dir"]
        env["SCCACHE_CACHE_SIZE"] = str(self.spec.get("size") or "10G")
        # torch's cpp_extension: "user can set nvcc compiler with ccache using the environment
        # variable here" (PYTORCH_NVCC, written verbatim into the ninja file).
        nvcc = os.path.join(env["CUDA_HOME"], "bin", "nvcc") if env.get("CUDA_HOME") else None
        nvcc = nvcc if nvcc and os.path.exists(nvcc) else shutil.which("nvcc", path=env["PATH"])
        if nvcc:
            env["PYTORCH_NVCC"] = f"{sccache} {nvcc}"
        # CMake >= 3.17 initialises CMAKE_<LANG>_COMPILER_LAUNCHER from these variables.
        for lang in ("C", "CXX", "CUDA"):
            env[f"CMAKE_{lang}_COMPILER_LAUNCHER"] = sccache
        # torch 2.13.0 (checked) prepends ccache/sccache itself when it finds one on PATH; the wiring
        # here is explicit, so that must not stack a second wrapper on it.
        env["TORCH_NO_COMPILER_WRAPPER"] = "1"
        # A CMakeLists may add ccache as RULE_LAUNCH_COMPILE when ccache is on PATH
        # and CCACHE_DIR is set: one compiler cache is enough.
        env.pop("CCACHE_DIR", None)
        # The host C++ compiler of torch extensions (torch's ninja `cxx`, setuptools' C++
        # link): a one-line wrapper, because CXX must stay one word. CC is left alone: torch
        # hands it to nvcc as -ccbin, where a wrapper would be cached twice. CMake builds
        # have the launchers above; a wrapper there would put sccache in front of itself.
        real = shutil.which(env.get("CXX") or "c++", path=env["PATH"])
        if real and not self.spec.get("cmake"):
            self.wrappers = os.path.join(scratch, "compile-cache-bin")
            os.makedirs(self.wrappers, exist_ok=True)
            wrapper = os.path.join(self.wrappers, "c++")
            with open(wrapper, "w", encoding="utf-8") as fh:
                fh.write(f'#!/bin/sh\nexec "{sccache}" "{real}" "$@"\n')
            os.chmod(wrapper, 0o755)
            env["CXX"] = wrapper
        return env

    def finish(self):
        """Read the stats and stop the server; returns the JSON block for the result."""
        if self.server_env is None or self.done:
            return self.result
        self.done = True
        proc = _sccache_stats(self.binary, self.server_env)
        _sccache(self.binary, "--stop-server", self.server_env, timeout=60)
        try:
            doc = json.loads(proc.stdout.decode("utf-8", "replace"))
            stats = doc["stats"]
        except (ValueError, KeyError, TypeError):
            self.result["warning"] = "sccache stats unreadable: " + _last_line(proc.stdout)
            return self.result
        hits = dict((stats.get("cache_hits") or {}).get("counts") or {})
        misses = dict((stats.get("cache_misses") or {}).get("counts") or {})
        self.result.update(
            hits=sum(int(v) for v in hits.values()),
            misses=sum(int(v) for v in misses.values()),
            hits_by_kind=hits,
            misses_by_kind=misses,
            compile_requests=int(stats.get("compile_requests") or 0),
            not_cached=int(stats.get("requests_not_cacheable") or 0)
            + int(stats.get("requests_unsupported_compiler") or 0),
            errors=int(stats.get("cache_read_errors") or 0)
            + int(stats.get("cache_write_errors") or 0),
            version=str(doc.get("version") or ""),
        )
        return self.result


def _sccache_stats(binary, env):
    try:
        return subprocess.run(
            [binary, "--show-stats", "--stats-format", "json"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess([binary], 1, str(exc).encode())


def _last_line(data):
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data or "")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def build_slot(root, package):
    """A build directory at a path every host can share (``<root>/<package>-<n>``): the
    first whose lock this process gets, so concurrent builds on one machine never share one.
    Returns (path, lock file object)."""
    import fcntl

    if not os.path.isdir(root):
        os.makedirs(root, exist_ok=True)
        try:
            os.chmod(root, 0o1777)  # like /tmp: other users' builds may take other slots
        except OSError:
            pass
    for n in range(64):
        path = os.path.join(root, f"{package}-{n}")
        try:
            lock = open(path + ".lock", "a")
        except OSError:
            continue
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        return path, lock
    raise OSError(f"no free build slot under {root}")


def run_build(args):
    src = os.path.abspath(os.path.expanduser(args["src"]))
    out_dir = os.path.abspath(os.path.expanduser(args["out_dir"]))
    log_path = os.path.abspath(os.path.expanduser(args["log"]))
    progress = Progress(os.path.expanduser(args["progress"]) if args.get("progress") else None)
    args = dict(args, src=src)
    for directory in (out_dir, os.path.dirname(log_path)):
        if not os.path.isdir(directory):
            os.makedirs(directory)
    # A rerun of the same build (same key, same log name) after a failure keeps the failed
    # run's log beside the new one: the first error is usually there.
    for path in (log_path, log_path + ".sccache"):
        if os.path.exists(path):
            os.replace(path, path + ".1")
    _remove_stale_tmp(out_dir)
    tmp_out = tempfile.mkdtemp(dir=out_dir, prefix=".tmp-build-")
    tail = deque(maxlen=40)
    start = time.time()
    env = build_env(args)
    cache, slot = None, None
    if args.get("compile_cache"):
        spec = args["compile_cache"]
        cache = CompileCache(spec, env, log_path, _read_secrets(spec.get("secrets")))
        if cache.start():
            env = cache.build_env(env, tmp_out)
            if spec.get("build_dir"):
                slot = build_slot(spec["build_dir"], spec.get("package") or "build")
                shutil.rmtree(slot[0], ignore_errors=True)
                shutil.copytree(src, slot[0], symlinks=True)
                src = slot[0]
                args = dict(args, src=src)
    command = build_command(args, tmp_out)
    exit_code = None
    try:
        with open(log_path, "w", buffering=1, encoding="utf-8", errors="replace") as log:
            log.write("# sm120kit build: {}\n".format(" ".join(command)))
            for name in sorted(args.get("env") or {}):
                log.write("# env {}={}\n".format(name, args["env"][name]))
            if cache is not None:
                log.write("# compile cache: {}\n".format(_cache_line(cache.result, env)))
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
            if cache is not None:
                cache.finish()
                log.write("# compile cache: {}\n".format(_cache_line(cache.result, env)))
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
        if cache is not None:
            result["compile_cache"] = cache.result
        if exit_code == 0 and len(wheels) == 1:
            final = os.path.join(out_dir, wheels[0])
            # The record goes in before the wheel is hashed (and cached by that hash). A wheel
            # it cannot be added to is still the build's result; the failure is reported.
            try:
                result["provenance"] = write_provenance(
                    os.path.join(tmp_out, wheels[0]), build_provenance(args, env)
                )
            except (OSError, ValueError, KeyError) as exc:
                result["provenance_error"] = f"{PROVENANCE_FILE} not written: {exc}"
                with open(log_path, "a", encoding="utf-8") as log:
                    log.write("# sm120kit: {}\n".format(result["provenance_error"]))
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
        if cache is not None:
            cache.finish()
        if slot is not None:
            shutil.rmtree(slot[0], ignore_errors=True)
            slot[1].close()


def _cache_line(info, env):
    """One log line about the compile cache (never a credential: none is in `info`)."""
    if not info.get("enabled"):
        return "off: " + str(info.get("reason") or "")
    if "hits" in info:
        return "{} hits, {} misses ({})".format(info["hits"], info["misses"], info.get("levels"))
    return "sccache {} on port {}, store {}{}; PYTORCH_NVCC={}".format(
        info.get("levels"),
        env.get("SCCACHE_SERVER_PORT"),
        info.get("store"),
        " + " + info["team_store"] if info.get("team_store") else "",
        env.get("PYTORCH_NVCC", "(unset)"),
    )


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
