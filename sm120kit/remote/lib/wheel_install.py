"""Install local wheel files into a venv: several pips at once, each group compiled after it.

One ``pip install`` unpacks one wheel after another on one core and compiles each wheel's
``.py`` files as it goes. The files of a lock installed ``--no-deps`` do not depend on one
another (no resolver runs, and each distribution owns its files), so they are split into
groups of about equal work, twice as many groups as CPUs, biggest first; one worker per CPU
takes the next group, installs it with ``pip install --no-compile`` and then compiles that
group's ``.py`` files with ``python -m compileall`` in the env's own interpreter (bytecode is
per Python version), so no CPU waits for the slowest pip before compiling. The env ends up
with the same files as after one pip, byte-compiled alike, except that the ``.pyc`` files
are not listed in the RECORD files (``pip uninstall`` removes them anyway). A file that does
not compile is left as pip leaves it: without bytecode.

Stdlib only, Python >= 3.8.
"""

import concurrent.futures
import glob
import os
import subprocess
import threading
import time
import zipfile

PIP_FLAGS = [
    "-m",
    "pip",
    "install",
    "--no-deps",
    "--require-hashes",
    "--no-index",
    "--no-compile",
    "--disable-pip-version-check",
    "--no-input",
]
MAX_WORKERS = 8
#: Cost of compiling a byte of Python relative to unpacking a byte (measured on sglang
#: 0.5.23's lock: 10.7 GB unpacked in about 100 CPU s, 570 MB of .py compiled in about 90).
COMPILE_WEIGHT = 17


def site_packages(env):
    """The env's site-packages directory, or None."""
    found = sorted(glob.glob(os.path.join(env, "lib", "python*", "site-packages")))
    return found[0] if found else None


def split(items, n, size):
    """`items` in at most `n` groups of about equal total `size` (biggest first, each to the
    lightest group so far); no empty group."""
    groups = [[] for _ in range(max(1, min(n, len(items))))]
    totals = [0] * len(groups)
    for item in sorted(items, key=size, reverse=True):
        i = totals.index(min(totals))
        groups[i].append(item)
        totals[i] += size(item)
    return [g for g in groups if g]


def workers():
    """How many processes to run at once on this host."""
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS))


def error_line(stderr, code):
    """One line for a failed command: its first ERROR line, with its last line when that says
    more (pip's hash mismatch ends with the hash it got)."""
    lines = [" ".join(ln.split()) for ln in stderr.splitlines() if ln.strip()]
    if not lines:
        return "exit %d" % code
    first = next((ln for ln in lines if ln.startswith("ERROR")), lines[-1])
    return first if first == lines[-1] else "%s ... %s" % (first, lines[-1])


def installed_paths(wheel):
    """Where each file of a wheel lands, with its size: ``("lib", "pkg/mod.py", n)`` for
    site-packages (``.data/purelib`` and ``platlib`` included), ``("scripts", name, n)`` and
    the like for the other ``.data`` directories."""
    paths = []
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.filename.endswith("/"):
                continue
            parts = info.filename.split("/")
            if parts[0].endswith(".data") and len(parts) > 2:
                lib = parts[1] in ("purelib", "platlib")
                paths.append(("lib" if lib else parts[1], "/".join(parts[2:]), info.file_size))
            else:
                paths.append(("lib", info.filename, info.file_size))
    return paths


def bundles(files, paths):
    """Indexes of `files` in bundles that must go through one pip, in their given order: two
    wheels that write the same file (an ``__init__.py`` of a shared namespace, say) share a
    bundle, so the later one still wins as with one pip; the others are alone."""
    parent = list(range(len(files)))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner = {}
    for i, wheel_paths in enumerate(paths):
        for scheme, rel, _size in wheel_paths:
            j = owner.setdefault((scheme, rel), i)
            if j != i:
                parent[root(i)] = root(j)
    out = {}
    for i in range(len(files)):
        out.setdefault(root(i), []).append(i)
    return list(out.values())


def work_of(wheel_paths):
    """What installing one wheel costs, in unpacked bytes (its Python weighted for compiling)."""
    compiled = sum(size for scheme, rel, size in wheel_paths
                   if scheme == "lib" and rel.endswith(".py"))  # fmt: skip
    return sum(size for _scheme, _rel, size in wheel_paths) + COMPILE_WEIGHT * compiled


class _Run:
    """The commands of one install: each waits at most until the deadline, and once one fails
    (or time is up) the others are killed and no new one starts."""

    def __init__(self, deadline):
        self.deadline = deadline
        self.failed = None
        self._lock = threading.Lock()
        self._procs = []

    def command(self, argv):
        """(returncode, stderr) of `argv`; None when the install has already failed."""
        with self._lock:
            if self.failed is not None:
                return None
            proc = subprocess.Popen(
                argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, universal_newlines=True
            )
            self._procs.append(proc)
        try:
            _, err = proc.communicate(timeout=max(1.0, self.deadline - time.time()))
        except subprocess.TimeoutExpired:
            self.fail("timed out: %s" % " ".join(argv[:5]))
            return None
        return proc.returncode, err or ""

    def fail(self, line):
        with self._lock:
            if self.failed is None:
                self.failed = line
            for proc in self._procs:
                if proc.poll() is None:
                    proc.kill()


def install(env, files, scratch, timeout):
    """pip-install `files` ([(path, sha256)]) into the venv `env` and compile their Python to
    bytecode. `scratch`: a directory for the requirement and file lists. Returns ``(error
    line or None, {"install_s", "processes", "groups", "python_files"})``."""
    py = os.path.join(env, "bin", "python")
    start = time.time()
    n = workers()
    paths = [installed_paths(path) for path, _sha in files]
    cost = [work_of(p) for p in paths]
    groups = split(bundles(files, paths), 2 * n, lambda b: sum(cost[i] for i in b))
    groups = [[i for b in g for i in b] for g in groups]
    groups.sort(key=lambda g: -sum(cost[i] for i in g))  # the biggest start first
    site = site_packages(env) or ""
    run = _Run(start + timeout)
    compiled = []

    def one(k, group):
        req = os.path.join(scratch, "requirements-%d.txt" % k)
        with open(req, "w") as fh:
            fh.writelines("%s --hash=sha256:%s\n" % files[i] for i in group)
        done = run.command([py] + PIP_FLAGS + ["-r", req])
        if done is None:
            return
        if done[0] != 0:
            run.fail("pip install --no-deps: " + error_line(done[1], done[0]))
            return
        sources = [
            os.path.join(site, rel)
            for i in group
            for scheme, rel, _size in paths[i]
            if scheme == "lib" and rel.endswith(".py")
        ]
        compiled.append(len(sources))
        if not sources:
            return
        listing = os.path.join(scratch, "compile-%d.txt" % k)
        with open(listing, "w") as fh:
            fh.writelines(p + "\n" for p in sources)
        done = run.command([py, "-m", "compileall", "-q", "-i", listing])
        if done is not None and done[0] not in (0, 1):  # 1: a file did not compile, as pip allows
            run.fail("compileall in %s: %s" % (env, error_line(done[1], done[0])))

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        for f in [pool.submit(one, k, g) for k, g in enumerate(groups)]:
            f.result()
    if run.failed is not None:
        return run.failed, {}
    return None, {
        "install_s": round(time.time() - start, 3),
        "processes": min(n, len(groups)),
        "groups": len(groups),
        "python_files": sum(compiled),
    }
