"""uv on the host: unpack it, run it, and read what a venv holds before and after.

The controller plans the stack's steps (sm120kit/stack/stack_steps.py) and `install_lock` runs
them with these: uv comes to the host as a locked file like any other (its PyPI wheel,
checked by sha256), and `unpack` takes its binary out once to ``<tools>/uv-<version>/uv``.
`run_uv` runs the argv of a ``uv`` step as given (``uv venv --relocatable`` for a new env made
beside its final place, ``uv pip sync --offline --no-index --require-hashes
--compile-bytecode`` with a requirements file of ``name @ file://<path> --hash=sha256:<hex>``
lines: the files already checked on the host, nothing from an index, and exactly that set
afterwards). What changed is read from the env before and after (`installed`, `changes`), so
the report says what was added, removed or replaced whoever caused the drift. `env_ok` tells
a working venv (pyvenv.cfg there, its python starts) from one cut off while it was made.

Stdlib only, Python >= 3.8.
"""

import glob
import os
import stat
import subprocess
import threading
import zipfile

from sm120kit.remote.lib.names import dist_name


def installed(env):
    """Distribution name -> version of every .dist-info in the env's site-packages."""
    out = {}
    for info in glob.glob(os.path.join(env, "lib", "python*", "site-packages", "*.dist-info")):
        base = os.path.basename(info)[: -len(".dist-info")]
        name, _, version = base.partition("-")
        out[dist_name(name)] = version
    return out


def unpack(wheel, member, dest):
    """`member` of the wheel at `wheel` (uv's binary) at `dest`, executable, once (beside, then
    renamed: a half-written binary is never at the final path)."""
    if os.access(dest, os.X_OK):
        return dest
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    # This writer's own temporary (its pid: remote/host_lock.py sweeps a dead writer's).
    part = "%s.%d-%d.part" % (dest, os.getpid(), threading.get_ident())
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, open(part, "wb") as out:
            while True:
                block = src.read(1 << 20)
                if not block:
                    break
                out.write(block)
        os.chmod(part, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
        os.rename(part, dest)
    finally:
        if os.path.lexists(part):
            os.unlink(part)
    return dest


def env_ok(env):
    """Whether `env` is a working venv: its pyvenv.cfg is there and its python starts."""
    py = os.path.join(env, "bin", "python")
    if not os.path.isfile(os.path.join(env, "pyvenv.cfg")) or not os.path.exists(py):
        return False
    try:
        done = subprocess.run([py, "-c", "import sys"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def error_line(stderr, code):
    """One line for a failed uv run: its first ``error:`` line with the cause after it."""
    lines = [" ".join(ln.split()) for ln in stderr.splitlines() if ln.strip()]
    if not lines:
        return "exit %d" % code
    for i, ln in enumerate(lines):
        if ln.startswith("error:"):
            return " ".join(lines[i : i + 3])[:600]
    return lines[-1][:600]


def requirements(files):
    """The requirements text for `files` ([(name, path, sha256)])."""
    return "".join(
        "%s @ file://%s --hash=sha256:%s\n" % (name, os.path.abspath(path), sha)
        for name, path, sha in files
    )


def uv_environ(cache):
    """The environment uv runs with: its cache at `cache`, no config files, no progress bars,
    no VIRTUAL_ENV (the env is always named by ``--python``)."""
    env = dict(os.environ, UV_CACHE_DIR=cache, UV_NO_CONFIG="1", UV_NO_PROGRESS="1")
    env.pop("VIRTUAL_ENV", None)
    return env


def start_uv(uv, argv, cache):
    """``uv <argv>`` started (stdout and stderr piped, text), for a caller that may kill it."""
    return subprocess.Popen(
        [uv] + argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        env=uv_environ(cache),
    )


def run_uv(uv, argv, cache, timeout):
    """(error line or None) of ``uv <argv>`` with its cache at `cache`."""
    try:
        done = subprocess.run(
            [uv] + argv,
            capture_output=True,
            universal_newlines=True,
            timeout=timeout,
            env=uv_environ(cache),
        )
    except subprocess.TimeoutExpired:
        return "uv %s: timed out after %ds" % (argv[0], timeout)
    if done.returncode != 0:
        return "uv %s: %s" % (" ".join(argv[:2]), error_line(done.stderr, done.returncode))
    return None


def changes(before, after):
    """``(added, removed, replaced)`` rows (``name==version``) between two `installed` maps."""
    added, removed, replaced = [], [], []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        if old is None:
            added.append("%s==%s" % (name, new))
        elif new is None:
            removed.append("%s==%s" % (name, old))
        else:
            replaced.append("%s %s -> %s" % (name, old, new))
    return added, removed, replaced
