"""Make a venv hold exactly a set of verified wheel files, with uv: offline, hashes required.

uv comes to the host as a locked file like any other (its PyPI wheel, checked by sha256), and
`ensure_uv` unpacks its binary once to ``<tools>/uv-<version>/uv``. `sync` then runs
``uv pip sync --offline --no-index --require-hashes --compile-bytecode`` with a requirements
file of ``name @ file://<path> --hash=sha256:<hex>`` lines: the files already checked on the
host, nothing from an index, and exactly that set afterwards (uv removes any other
distribution). What changed is read from the env before and after (`installed`), so the
caller reports what was added, removed or replaced whoever caused the drift.

A new env is made beside its final place (``<env>.sm120kit-new``, ``uv venv --relocatable``),
filled, and renamed into place in whole: an env cut off while it was being made is never at
the final path. An env at the final path that does not work (`env_ok`: no pyvenv.cfg, or its
python does not start) is removed and made again.

Stdlib only, Python >= 3.8.
"""

import glob
import os
import re
import stat
import subprocess
import zipfile

from sm120kit.remote.lib.files import remove

NEW = ".sm120kit-new"


def normalize(name):
    """PEP 503 name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(env):
    """Distribution name -> version of every .dist-info in the env's site-packages."""
    out = {}
    for info in glob.glob(os.path.join(env, "lib", "python*", "site-packages", "*.dist-info")):
        base = os.path.basename(info)[: -len(".dist-info")]
        name, _, version = base.partition("-")
        out[normalize(name)] = version
    return out


def ensure_uv(wheel, tools, version):
    """The uv binary from uv's wheel at `wheel`, unpacked once to ``<tools>/uv-<version>/uv``
    (beside, then renamed: a half-written binary is never at the final path)."""
    final = os.path.join(tools, "uv-%s" % version, "uv")
    if os.access(final, os.X_OK):
        return final
    os.makedirs(os.path.dirname(final), exist_ok=True)
    member = "uv-%s.data/scripts/uv" % version
    part = final + ".part"
    with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, open(part, "wb") as out:
        while True:
            block = src.read(1 << 20)
            if not block:
                break
            out.write(block)
    os.chmod(part, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    os.rename(part, final)
    return final


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


def run_uv(uv, argv, cache, timeout):
    """(error line or None) of ``uv <argv>`` with its cache at `cache`."""
    env = dict(os.environ, UV_CACHE_DIR=cache, UV_NO_CONFIG="1", UV_NO_PROGRESS="1")
    env.pop("VIRTUAL_ENV", None)
    try:
        done = subprocess.run(
            [uv] + argv, capture_output=True, universal_newlines=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired:
        return "uv %s: timed out after %ds" % (argv[0], timeout)
    if done.returncode != 0:
        return "uv %s: %s" % (" ".join(argv[:2]), error_line(done.stderr, done.returncode))
    return None


def sync(uv, python, env, files, cache, scratch, timeout, phase=None):
    """Make `env` hold exactly `files` ([(name, path, sha256)]), byte-compiled. Returns
    ``(error or None, {"made": bool, "remade": bool, "added": [...], "removed": [...],
    "replaced": [...]})``: ``name==version`` rows of what changed. `phase(name)` is told
    when a phase starts (``venv``, ``install``)."""
    report = {"made": False, "remade": False, "added": [], "removed": [], "replaced": []}
    before = {}
    target = env
    if os.path.lexists(env) and not env_ok(env):
        remove(env)  # half-made (cut off while made by an older tool, a full disk): made again
        report["remade"] = True
    if os.path.lexists(env):
        before = installed(env)
    else:
        if phase:
            phase("venv")
        target = env + NEW
        remove(target)  # left by a run cut off while it made the env
        error = run_uv(uv, ["venv", "--relocatable", "--python", python, target], cache, 600)
        if error:
            remove(target)
            return error, report
        report["made"] = True
    req = os.path.join(scratch, "requirements.txt")
    with open(req, "w") as fh:
        fh.write(requirements(files))
    if phase:
        phase("install")
    argv = ["pip", "sync", "--offline", "--no-index", "--require-hashes", "--compile-bytecode"]
    argv += ["--python", os.path.join(target, "bin", "python"), req]
    error = run_uv(uv, argv, cache, timeout)
    if error:
        if target != env:
            remove(target)
        return error, report
    after = installed(target)
    if target != env:
        os.rename(target, env)
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        if old is None:
            report["added"].append("%s==%s" % (name, new))
        elif new is None:
            report["removed"].append("%s==%s" % (name, old))
        else:
            report["replaced"].append("%s %s -> %s" % (name, old, new))
    return None, report
