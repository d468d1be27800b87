"""Install a lock's files into a new env while the rest are still arriving, and byte-compile
each one's modules as soon as it is in.

A cold stack install is three kinds of work: getting 4 GB of files (network, hashing),
unpacking them (uv: mostly file-system time) and byte-compiling 35,000 modules (CPU). Done one
after another, as a plain ``uv pip sync --compile-bytecode`` after the last download, they
add up; uv's own cold install overlaps its downloads with its unpacking but still compiles only
at the end. Here each file, once on the host with the lock's sha256 (and, if compiled,
verified for the target), goes to an `Installer` that runs ``uv pip install --no-deps
--offline --no-index --require-hashes --no-compile-bytecode`` on a batch of what has arrived
(the files with the most modules per byte first, so that compiling starts early and never
runs dry while uv unpacks the big binaries), and the modules of every distribution it adds go
to a `Compiler`: one worker per CPU in the env's own interpreter, compiling each file exactly
as uv's own compile pass does (``compileall.compile_file``, the interpreter's default
invalidation mode, ``force`` only for hash-based pycs, errors swallowed as pip and uv swallow
them). This is the env's one compile pass: once the last batch is in, every other ``.py``
under site-packages is compiled too (`leftover_modules`: uv's pass walks the whole directory,
so files no RECORD names, such as the venv's ``_virtualenv.py``, are compiled), and the
modules of a worker that died are compiled again by a new one. The ``uv pip sync`` that
follows, without ``--compile-bytecode``, audits the set (hashes required) and removes anything
extra; what it adds or replaces is compiled after it (`compile_new`). Its own compile pass
would only have read 35,000 fresh pyc headers again (1.4-1.9 s at the end of the step).

Only for a new env (made beside its final place, moved in whole afterwards): nothing is
installed into a live env before every file has been checked.

Stdlib only, Python >= 3.8.
"""

import csv
import glob
import json
import os
import queue
import subprocess
import threading
import time
import zipfile

from sm120kit.remote.lib import uv_sync

#: The compile worker, run by the env's own python: the same call as uv's ``pip_compileall.py``
#: makes for each file (uv 0.13.9). Each stdin line is a JSON list of paths; the count is
#: echoed when they are done (one round trip a chunk, not a module: 35,000 round trips cost
#: the workers a wake-up each and the feeders their share of the GIL).
WORKER = r"""
import compileall, json, os, py_compile, sys, warnings
warnings.filterwarnings("ignore")
mode = os.environ.get("PYC_INVALIDATION_MODE")
mode = py_compile.PycInvalidationMode[mode] if mode else None
if mode is None:
    try:
        mode = py_compile._get_default_invalidation_mode()
    except AttributeError:
        mode = None
force = mode is not None and mode != py_compile.PycInvalidationMode.TIMESTAMP
for line in sys.stdin:
    paths = json.loads(line) if line.strip() else []
    for path in paths:
        compileall.compile_file(path, invalidation_mode=mode, force=force, quiet=2)
    sys.stdout.write("%d\n" % len(paths))
    sys.stdout.flush()
"""

# The compile workers run at the priority of everything else, as uv's own compile does (uv
# 0.13.9's binary imports neither setpriority nor nice: ``nm -D`` of the wheel's
# ``uv-0.13.9.data/scripts/uv``): at nice 10 they starved beside any other
# load on the machine (a bench round next to two busy processes: all files installed at
# 103-116 s, then 100-130 s more of compiling), which uv's install never does.

#: The most paths one worker is handed at once; fewer near the end, so that no worker is
#: left with a long chunk while the others idle.
CHUNK_MAX = 64


def chunk_size(queued, workers):
    """How many paths a worker takes when `queued` wait: a share that leaves the others
    work, between 1 and `CHUNK_MAX`."""
    return max(1, min(CHUNK_MAX, queued // (2 * max(1, workers))))


def proc_cpu(pid):
    """CPU seconds (user + system) process `pid` has used so far, from ``/proc/<pid>/stat``;
    None where that cannot be read (not Linux, or the process is gone)."""
    try:
        with open("/proc/%d/stat" % pid) as fh:
            text = fh.read()
        fields = text[text.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def cpus():
    """CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Compiler:
    """Byte-compile paths as they are submitted, `workers` at once, in the env's interpreter.

    An optimisation only: uv's compile pass after the final sync is the authority, so a worker
    that dies is counted in `lost` and its files are left to that pass."""

    def __init__(self, python, workers=None, on_done=None):
        self.queue = queue.Queue()
        self.on_done = on_done  # called with (modules done, modules submitted) after each
        self.submitted = 0
        self.compiled = 0
        self.seen = set()  # every path submitted (`leftover_modules` skips them)
        self.lost_paths = []  # a dead worker's chunks, for `compile_all` to hand to a new one
        self.busy_s = 0.0
        self.cpu_s = 0.0  # the workers' own CPU (Linux /proc; 0 where it cannot be read)
        self.procs = []
        self.threads = []
        self.lock = threading.Lock()
        for _ in range(workers or cpus()):
            try:
                proc = subprocess.Popen(
                    [python, "-c", WORKER],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    universal_newlines=True,
                    bufsize=1,
                )
            except OSError:
                continue
            self.procs.append(proc)
            thread = threading.Thread(target=self._feed, args=(proc,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _feed(self, proc):
        while True:
            path = self.queue.get()
            if path is None:
                break
            chunk, last = [path], False
            for _ in range(chunk_size(self.queue.qsize(), len(self.procs)) - 1):
                try:
                    more = self.queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    last = True
                    break
                chunk.append(more)
            began = time.time()
            try:
                proc.stdin.write(json.dumps(chunk) + "\n")
                proc.stdin.flush()
                done = proc.stdout.readline()
            except (OSError, ValueError):
                done = ""
            with self.lock:
                self.busy_s += time.time() - began
                if done.strip() == str(len(chunk)):
                    self.compiled += len(chunk)
                else:
                    self.lost_paths.extend(chunk)
                counts = (self.compiled + len(self.lost_paths), self.submitted)
            if self.on_done is not None:
                self.on_done(*counts)
            if last:
                break
        # Idle now: what it used is (all but its exit) what compiling cost.
        used = proc_cpu(proc.pid)
        with self.lock:
            self.cpu_s += used or 0.0
        try:
            proc.stdin.close()
        except OSError:
            pass

    def submit(self, paths):
        with self.lock:
            self.submitted += len(paths)
            self.seen.update(paths)
        for path in paths:
            self.queue.put(path)

    def finish(self, timeout=None):
        """Wait for every submitted path; (compiled, lost)."""
        for _ in self.threads:
            self.queue.put(None)
        for thread in self.threads:
            thread.join(timeout)
        for proc in self.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        while True:  # never handed to a worker (none started, or every one died)
            try:
                path = self.queue.get_nowait()
            except queue.Empty:
                break
            if path is not None:
                self.lost_paths.append(path)
        return self.compiled, len(self.lost_paths)

    def abort(self):
        for proc in self.procs:
            try:
                proc.kill()
            except OSError:
                pass
        while True:  # release the feeders blocked on a dead worker's pipe or the queue
            try:
                self.queue.get_nowait()
            except queue.Empty:
                break
        for _ in self.threads:
            self.queue.put(None)


def leftover_modules(site, seen):
    """The ``.py`` files under `site` not in `seen`: the rest of what uv's compile pass covers
    (it walks the whole site-packages, RECORDs or not)."""
    out = []
    for dirpath, dirs, names in os.walk(site):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                if path not in seen:
                    out.append(path)
    return out


def compile_all(compiler, python, site):
    """Finish the env's compile pass: what no RECORD named (`leftover_modules`), then wait for
    `compiler`; a dead worker's modules are compiled once more by a new one. Returns
    (compiled, modules no worker could compile)."""
    compiler.submit(leftover_modules(site, compiler.seen))
    compiled, _lost = compiler.finish()
    lost = list(compiler.lost_paths)
    if lost:
        again = Compiler(python, workers=1)
        again.submit(lost)
        more, _ = again.finish()
        compiled += more
        lost = again.lost_paths
    return compiled, lost


def records(site):
    """``{dist-info name: its RECORD's mtime}`` in `site`: what `compile_new` compares."""
    out = {}
    for info in dist_infos(site):
        try:
            out[info] = os.path.getmtime(os.path.join(site, info, "RECORD"))
        except OSError:
            out[info] = None
    return out


def new_modules(site, before):
    """The modules of every distribution in `site` that is new or rewritten since `records`
    gave `before` (what a uv run added or replaced)."""
    out = []
    for info, mtime in sorted(records(site).items()):
        if before.get(info, -1) != mtime:
            out += modules_of(site, info)
    return out


def compile_new(python, site, before):
    """Compile `new_modules` (what a sync added or replaced); (compiled, lost)."""
    modules = new_modules(site, before)
    if not modules:
        return 0, 0
    compiler = Compiler(python)
    compiler.submit(modules)
    return compiler.finish()


def dist_infos(site):
    """The ``*.dist-info`` directory names in `site`."""
    return set(os.path.basename(p) for p in glob.glob(os.path.join(site, "*.dist-info")))


def modules_of(site, info):
    """The ``.py`` files a distribution installed under `site` (its RECORD; scripts and data
    outside site-packages are not compiled, as uv does not compile them either)."""
    out = []
    try:
        with open(os.path.join(site, info, "RECORD"), newline="") as fh:
            for row in csv.reader(fh):
                path = row[0] if row else ""
                if path.endswith(".py") and not path.startswith(("..", "/")):
                    out.append(os.path.join(site, path))
    except OSError:
        pass
    return out


#: A batch's limits while the compile workers are short of work: small, so that the first
#: modules reach them early (compiling is the largest share of the work, and it starts only
#: once a batch is in).
BATCH_FILES = 16
BATCH_BYTES = 256 << 20
#: Once the workers have `BACKLOG` modules queued, a batch takes any number of files, up to
#: `BUSY_BYTES`. Not more: the modules of a batch reach the workers only when uv is done with
#: it, so a long batch starves them (measured on the real lock: a batch of 2.8 GB and 97 files
#: took 21 s, and held 17,900 of the lock's modules back all that time).
BACKLOG = 2000
BUSY_BYTES = 768 << 20
#: Modules per MB under which a file is light: it feeds the compile workers (almost)
#: nothing, so nothing waits for its batch's end. Light files pending alone go in one batch,
#: whatever their size: uv unpacks a batch's files in parallel, and capped batches of two or
#: three such files (the real lock's CUDA libraries, 500-800 MB each) ran one after another,
#: 12-20 s each, for the last 50 s of a step whose files had all arrived.
LIGHT = 1.0


def py_files(path):
    """How many ``.py`` files the wheel at `path` holds (read from its zip directory alone);
    0 when it cannot be read (uv will say why)."""
    try:
        with zipfile.ZipFile(path) as zf:
            return sum(1 for name in zf.namelist() if name.endswith(".py"))
    except (OSError, zipfile.BadZipFile):
        return 0


def _size(entry):
    if entry.get("size"):
        return entry["size"]
    try:
        return os.path.getsize(entry["dest"])
    except OSError:
        return 0


def density(entry):
    """Modules per byte of an entry (``modules`` as `Installer.add` counted them)."""
    return entry.get("modules", 0) / float(max(1, _size(entry)))


def light(entry):
    """Whether an entry's module count is known and under `LIGHT` per MB."""
    return "modules" in entry and entry["modules"] < LIGHT * _size(entry) / float(1 << 20)


def alone(entry):
    """Whether an entry goes in a batch of its own: bigger than `BATCH_BYTES` and not `light`.
    Its unpack alone takes seconds, and every other file in its batch only holds its modules
    back from the workers (the real lock's torch, 555 MB and 2,438 modules, went in a batch of
    54 files and 763 MB that took 12.4 s)."""
    return _size(entry) > BATCH_BYTES and not light(entry)


#: Files with at least this many modules are named in the step's timings (`Installer.feeders`:
#: when each was ready, when its batch began and ended).
FEEDER = 1000


def take_batch(pending, backlog=0):
    """The entries of `pending` that make the next batch: the densest first (most modules per
    byte: what keeps the compile workers busy soonest), at least one (a bigger file goes
    alone). While the workers have fewer than `BACKLOG` modules queued (`backlog`), at most
    `BATCH_FILES` files and `BATCH_BYTES`; after, any number of files up to `BUSY_BYTES`. A
    file that goes `alone` ends the batch before it, or is the batch. When every pending file
    is `light`, all of them at once. Ties keep the order of arrival."""
    if pending and all(light(e) for e in pending):
        return list(pending)
    order = sorted(pending, key=density, reverse=True)
    busy = backlog >= BACKLOG
    files = len(order) if busy else BATCH_FILES
    budget = BUSY_BYTES if busy else BATCH_BYTES
    total = 0
    for n, entry in enumerate(order):
        size = _size(entry)
        if n and (n >= files or total + size > budget or alone(entry)):
            return order[:n]
        if alone(entry):
            return order[:1]
        total += size
    return order


class Installer(threading.Thread):
    """Runs `argv` (``uv pip install ... --python <env python>``) with ``-r <batch file>`` on
    every file `add`ed since its last run, then submits the new distributions' modules to
    `compiler`. The first uv failure stops it (`error`)."""

    def __init__(self, argv, cache, scratch, site, compiler, timeout, on_batch=None):
        threading.Thread.__init__(self, daemon=True)
        self.on_batch = on_batch  # called with the count installed after each batch
        self.argv, self.cache, self.scratch, self.site = argv, cache, scratch, site
        self.compiler, self.timeout = compiler, timeout
        self.pending = []
        self.closed = False
        self.cond = threading.Condition()
        self.error = None
        self.installed = 0
        self.batches = 0
        self.uv_s = 0.0
        self.proc = None
        # [began, seconds, files, MB, modules] of each uv run (the step's timings show them)
        self.log = []
        # [name, modules, ready, batch began, batch ended] of each file of `FEEDER` modules
        self.feeders = []

    def add(self, entry):
        # Counted here, once, from the zip's directory: the batches take the densest first.
        entry = dict(entry, modules=py_files(entry["dest"]), size=_size(entry), ready=time.time())
        with self.cond:
            self.pending.append(entry)
            self.cond.notify()

    def run(self):
        while True:
            with self.cond:
                while not self.pending and not self.closed:
                    self.cond.wait()
                if not self.pending:
                    return
                batch = take_batch(self.pending, self.compiler.queue.qsize())
                taken = set(id(e) for e in batch)
                self.pending = [e for e in self.pending if id(e) not in taken]
            if self.error is None:
                self._install(batch)

    def _install(self, batch):
        self.batches += 1
        req = os.path.join(self.scratch, "stage-%d.txt" % self.batches)
        with open(req, "w") as fh:
            fh.write(uv_sync.requirements([(e["name"], e["dest"], e["sha256"]) for e in batch]))
        before = records(self.site)
        began = time.time()
        self.proc = uv_sync.start_uv(self.argv[0], self.argv[1:] + ["-r", req], self.cache)
        try:
            _out, err = self.proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            self.error = "uv pip install: timed out after %ds" % self.timeout
            return
        self.uv_s += time.time() - began
        mb = sum(e.get("size", 0) for e in batch) / 1e6
        modules = sum(e.get("modules", 0) for e in batch)
        ended = time.time()
        self.log.append([round(began, 1), round(ended - began, 1), len(batch), round(mb), modules])
        for e in batch:
            if e.get("modules", 0) >= FEEDER:
                self.feeders.append([e["name"], e["modules"], e.get("ready", began), began, ended])
        if self.proc.returncode != 0:
            self.error = "uv pip install: %s" % uv_sync.error_line(err, self.proc.returncode)
            return
        self.installed += len(batch)
        if self.on_batch is not None:
            self.on_batch(self.installed)
        self.compiler.submit(new_modules(self.site, before))

    def finish(self):
        """Wait for the last batch; the first uv error, or None."""
        with self.cond:
            self.closed = True
            self.cond.notify()
        self.join()
        return self.error

    def abort(self):
        with self.cond:
            self.closed, self.pending = True, []
            self.cond.notify()
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:
                proc.kill()
            except OSError:
                pass
        self.join(60)


#: Seconds without a word from the controller (its heartbeat rewrites the marker every
#: minute while it fetches) after which the host stops waiting: a controller killed outright
#: never writes its last word.
SILENCE_S = 600


class FetchMarker:
    """The controller's word on its fetches, in a file: ``<token> fetching`` rewritten every
    minute while it fetches, then ``<token> ok`` or ``<token> failed: <why>``. The token is
    this run's, so a marker left by an earlier run is never read as this one's."""

    def __init__(self, spec, silence=SILENCE_S):
        self.path = (spec or {}).get("path")
        self.token = (spec or {}).get("token") or ""
        self.silence = silence
        self.heard = time.time()

    def state(self):
        """None while the controller still fetches; ``"ok"``; or the failure line (also when
        it has said nothing for `silence` seconds)."""
        if not self.path:
            return "ok"
        try:
            with open(self.path) as fh:
                text = fh.read().strip()
            mtime = os.path.getmtime(self.path)
        except OSError:
            text, mtime = "", 0.0
        if text.startswith(self.token + " "):
            word = text[len(self.token) + 1 :]
            if word != "fetching":
                return word
            self.heard = max(self.heard, mtime)
        quiet = time.time() - self.heard
        if quiet > self.silence:
            return "failed: no word from the controller for %d s (%s)" % (quiet, self.path)
        return None
