"""Install a lock's files into the serving env, and nothing else: no resolver runs here.

Runs on the host with any Python >= 3.8 and the standard library only. Argument (argv[1],
JSON)::

    {"action": "probe" | "fetch" | "apply", "env": path, "record": path,
     "entries": [{"name", "version", "filename", "url", "sha256", "compiled", "dest",
     "checked"?, "verdict"?}], "verify": {"cc": [12, 0], "driver", "driver_cuda", "python",
     "not_for_arch": {}, "loaders": {dist: {cc: dir}}, "digest"} | null, "indexes": [URL
     prefixes a file may be downloaded from] | null, "steps": [...], "cleanup": [paths],
     "progress": path, "timeout": seconds, "fetched": {"path", "token"} | null}

``probe`` changes nothing: ``{"exists", "works": the env works, "record", "installed": {name:
version}, "present": [dest paths already on the host], "cuda_home": the CUDA_HOME the env's
.pth file sets or null, "changed": [[file, dist]] or null}``: with ``"hash_shared": true``
(``provision --recheck``) every shared object a distribution's RECORD lists with a sha256 is
hashed, and ``changed`` names those whose bytes differ or that are gone (a change in place
keeps the version, the size and even the mtime: only the bytes tell). (The env's smoke verdicts are remembered by remote/smoke_memo.py,
keyed by the record.)

``fetch`` downloads the given entries (files the wheel stores did not have, fetched by the
one host elected to download each), hashing each as it arrives, and verifies each compiled
one for ``verify`` right after its download, while the others still download: the verdict
is kept beside the file (below), so ``apply`` does not read it again. ``{"ok", "error",
"downloaded"}``.

``apply`` runs the controller's steps (sm120kit/stack/stack_steps.py plans them, `plan` shows
them) through the step interpreter (`lib.steps`), with these ops beside the core ones:
``check``: every entry's file is obtained into its ``dest`` and its sha256 compared with the
lock's (an entry marked ``checked`` arrived in this run and was hashed as it arrived); a file
whose bytes differ is removed and named in ``corrupt`` (the controller fetches it again and
applies again); then every compiled entry is verified for the target (`wheel_check`), and
one refusal stops it (an entry that carries its ``verdict``, judged by the controller from
the lock's catalogue, whose facts were read from the file of that very sha256, is not read
again); a verdict is kept beside its file, keyed by the target's ``digest`` (of
the target and of this program) and the file's sha256, so that a file installed again is not
read again. ``stage`` (a new env only): the same checks, but streaming: a file the
controller is still placing is waited for (until its ``fetched`` marker, ``<token> ok`` or
``<token> failed: ...``, says its fetches are over), and each file, once there and judged fit,
is installed into the new env by uv (no compile) while the rest arrive, and its modules are
byte-compiled by workers in the env's own python (`lib.stream_install`: the env's one compile
pass, every ``.py`` under site-packages); the ``uv`` sync after it (``compile: "new"``, without
uv's compile pass) finds everything installed, and whatever it adds or rewrites is compiled
after it. ``unpack``: uv's binary out of its wheel, once. ``uv``: uv run with the step's
argv (`uv_sync.run_uv`; a ``pip sync`` reports what it added, removed or replaced).
``requirements``: uv's requirements file. ``record``: what the env holds, by sha256,
atomically. ``pth``: ``<site-packages>/sm120kit_cuda_home.pth`` written (or with a null
``cuda_home`` removed); it sets CUDA_HOME for every process of the env's Python unless it is
set already: the JIT packages (flashinfer, deep_gemm, humming) look there first for nvcc and
the headers, so they get the toolkit step's one release instead of whatever pip put beside
them. On a failed step the ``cleanup`` paths are removed. Prints ``{"ok", "error", "done":
steps completed, "corrupt", "downloaded": [[name, bytes]], "verdicts": {name: {...}},
"installed": n, "sync": {"made", "added", "removed", "replaced"}, "seconds", "timings"}``.
Progress (phase, files, bytes) goes to the ``progress`` file as it goes.
"""

import concurrent.futures
import csv
import glob
import json
import os
import re
import resource
import sys
import threading
import time

from sm120kit.remote.lib import steps, stream_install, uv_sync
from sm120kit.remote.lib.files import record_digest, remove, write_atomic
from sm120kit.remote.lib.names import CUDA_HOME_PTH, CUDA_HOME_PTH_LINE, dist_name
from sm120kit.remote.lib.obtain import obtain
from sm120kit.remote.lib.proc import StepFailed

installed = uv_sync.installed


def site_packages(env):
    """The env's site-packages directory, or None."""
    found = sorted(glob.glob(os.path.join(env, "lib", "python*", "site-packages")))
    return found[0] if found else None


def read_record(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def pth_cuda_home(env):
    site = site_packages(env)
    try:
        with open(os.path.join(site or "", CUDA_HOME_PTH)) as fh:
            text = fh.read()
    except OSError:
        return None
    m = re.match(r"import os; os\.environ\.setdefault\('CUDA_HOME', '(.*)'\)\n?$", text)
    return m.group(1) if m else "(unreadable)"


def shared_object(rel):
    """Whether a RECORD path names a shared object (``x.so``, ``libx.so.12``)."""
    base = rel.rsplit("/", 1)[-1]
    return base.endswith(".so") or ".so." in base


def catalogued_shared_objects(site):
    """[(path, RECORD path, dist, RECORD digest)] of every shared object the env's
    distributions' RECORD files list with a sha256."""
    out = []
    for info in sorted(glob.glob(os.path.join(site, "*.dist-info"))):
        dist = dist_name(os.path.basename(info)[: -len(".dist-info")].partition("-")[0])
        try:
            with open(os.path.join(info, "RECORD"), newline="") as fh:
                rows = list(csv.reader(fh))
        except (OSError, csv.Error, UnicodeDecodeError):
            continue
        for row in rows:
            if len(row) >= 2 and row[1].startswith("sha256=") and shared_object(row[0]):
                path = os.path.normpath(os.path.join(site, row[0]))
                out.append((path, row[0], dist, row[1]))
    return out


def changed_in_place(env):
    """[[RECORD path, dist]] of the catalogued shared objects whose bytes are not RECORD's
    (or that are gone); hashed by a few threads (hashlib lets go of the GIL)."""
    site = site_packages(env)
    if site is None:
        return []
    listed = catalogued_shared_objects(site)
    workers = max(1, min(8, os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        digests = list(pool.map(record_digest, [row[0] for row in listed]))
    return [[rel, dist] for (_, rel, dist, want), got in zip(listed, digests) if got != want]


def probe(args):
    entries = args.get("entries") or []
    works = uv_sync.env_ok(args["env"])
    return {
        "ok": True,
        "exists": os.path.lexists(args["env"]),
        "works": works,
        "record": read_record(args["record"]),
        "installed": installed(args["env"]),
        "present": [e["dest"] for e in entries if os.path.isfile(e["dest"])],
        "cuda_home": pth_cuda_home(args["env"]),
        "changed": changed_in_place(args["env"]) if works and args.get("hash_shared") else None,
    }


def set_cuda_home(args):
    site = site_packages(args["env"])
    if site is None:
        return {"ok": False, "error": "no site-packages under %s" % args["env"]}
    path = os.path.join(site, CUDA_HOME_PTH)
    if args.get("cuda_home"):
        write_atomic(path, CUDA_HOME_PTH_LINE % str(args["cuda_home"]))
    else:
        remove(path)
    return {"ok": True, "error": None}


class Progress:
    """The install's progress, written to a file the controller polls: phase, files done of
    total, bytes downloaded. Written at most twice a second, atomically."""

    def __init__(self, path, total):
        self.path, self.total = path, total
        self.phase, self.done, self.bytes, self.last = "fetch", 0, 0, 0.0
        # More counts to show: a streaming install's files "checked" and "installed", its
        # modules "compiled" of those queued ("modules").
        self.extra = {}
        self.lock = threading.Lock()  # set() is called from the stage's threads too

    def set(self, phase=None, done=0, nbytes=0, force=False, **extra):
        with self.lock:
            if phase is not None and phase != self.phase:
                self.phase, self.done, force = phase, 0, True
            self.done += done
            self.bytes += nbytes
            self.extra.update(extra)
            now = time.time()
            if not self.path or not (force or now - self.last >= 0.5):
                return
            self.last = now
            doc = dict(self.extra, phase=self.phase, done=self.done, total=self.total,
                       bytes=self.bytes)  # fmt: skip
            try:
                write_atomic(self.path, json.dumps(doc))
            except OSError:
                pass  # progress is never worth failing the install


def check(entries, target, timeout, indexes, progress, marker=None, ready=None, stop=None):
    """Obtain every entry's file (downloads and hashing several at once) and verify each
    compiled one for `target` as soon as its file is there, in processes beside the
    downloads (reading the device code of 93 wheels is CPU work). Returns (errors in entry
    order, bytes downloaded per entry, corrupt dests, {name: verdict}).

    Streaming (`marker`, a `FetchMarker`): a file the controller is still placing (``checked``
    and absent) is waited for rather than downloaded here, until the marker says the
    controller's fetches are over; each entry that is there and judged fit is handed to
    `ready` at once; the first error, or `stop()` turning true, ends it early."""
    errors, sizes, corrupt, verdicts = [None] * len(entries), [0] * len(entries), [], {}
    import multiprocessing

    cpus = os.cpu_count() or 1
    fetchers = max(1, min(len(entries), 16))
    # fork: the library is served from memory by the boot loader, which a child must share.
    procs = concurrent.futures.ProcessPoolExecutor(
        max(1, min(cpus, 8)), mp_context=multiprocessing.get_context("fork")
    )
    threads = concurrent.futures.ThreadPoolExecutor(fetchers)
    jobs = {}
    waiting = set()
    for i, e in enumerate(entries):
        if marker is not None and e.get("checked") and not os.path.isfile(e["dest"]):
            waiting.add(i)
        else:
            jobs[threads.submit(obtain, e, timeout, indexes)] = ("obtain", i)
    try:
        while jobs or waiting:
            if waiting:
                arrived = set(i for i in waiting if os.path.isfile(entries[i]["dest"]))
                state = marker.state()
                if state is not None and state != "ok":
                    raise StepFailed("the controller's fetches %s" % state)
                if state == "ok":
                    arrived = set(waiting)  # what is still absent is fetched here
                for i in sorted(arrived):
                    jobs[threads.submit(obtain, entries[i], timeout, indexes)] = ("obtain", i)
                waiting -= arrived
            if not jobs:
                time.sleep(0.2)
                continue
            done, _ = concurrent.futures.wait(
                list(jobs), timeout=0.2 if waiting else None,
                return_when=concurrent.futures.FIRST_COMPLETED)  # fmt: skip
            for fut in done:
                kind, i = jobs.pop(fut)
                entry = entries[i]
                if kind == "obtain":
                    error, n, bad = fut.result()
                    errors[i], sizes[i] = error, n
                    progress.set(done=1, nbytes=n)
                    if bad:
                        corrupt.append(entry["dest"])
                    if error is None and target and entry.get("verdict"):
                        # Judged by the controller from the catalogue's facts of this sha256.
                        doc = dict(entry["verdict"], **{"from": "catalogue"})
                        verdicts[entry["name"]] = doc
                        if doc["ok"] and ready is not None:
                            ready(entry)
                    elif error is None and target and entry.get("compiled"):
                        jobs[procs.submit(verify, entry, target)] = ("verify", i)
                    elif error is None and ready is not None:
                        ready(entry)
                    continue
                doc = fut.result()
                verdicts[entry["name"]] = {k: doc[k] for k in ("ok", "refusal", "notes")}
                if doc["ok"] and ready is not None:
                    ready(entry)
            if marker is not None and (any(errors) or refused(entries, verdicts)):
                break  # streaming: nothing more is installed after the first failure
            if stop is not None and stop():
                break
    finally:
        for fut in jobs:
            fut.cancel()
        threads.shutdown(wait=True)
        procs.shutdown(wait=True)
    return errors, sizes, corrupt, verdicts


VERDICTS = ".sm120kit-verdicts.json"


def verdict_memo(entry, target):
    """(path, key) of the memo of `entry`'s verdict for `target`, beside the file; key None
    when the target carries no digest (of the target and of the verifier's code)."""
    path = os.path.join(os.path.dirname(entry["dest"]), VERDICTS)
    digest = target.get("digest")
    return path, ("%s:%s" % (digest, entry["sha256"]) if digest else None)


def verify(entry, target):
    """The verdict on one compiled release for the target: the memo beside the file when one
    was written for this file, target and verifier, else read from the file (and memoised)."""
    memo, key = verdict_memo(entry, target)
    if key is not None:
        doc = (read_record(memo) or {}).get(key)
        if isinstance(doc, dict) and "ok" in doc:
            return doc
    # Imported here: a fetch without a target (one per file, 200 a stack) never pays for it.
    from sm120kit.remote.lib.wheel_check import loaded_modules, shared_objects, verify_wheel

    cc = tuple(target["cc"])
    path = entry["dest"]
    variants = (target.get("loaders") or {}).get(dist_name(entry["name"]))
    loaded = loaded_modules(shared_objects(path), cc, target["python"], variants)
    doc = verify_wheel(
        path,
        sha256=entry["sha256"],
        cc=cc,
        driver=target["driver"],
        driver_cuda=target["driver_cuda"],
        loaded=loaded,
        not_for_arch=target.get("not_for_arch") or {},
        digest=entry["sha256"],  # phase 1 checked it
    )
    if key is not None:
        kept = read_record(memo) or {}
        kept[key] = {k: doc[k] for k in ("ok", "refusal", "notes")}
        write_atomic(memo, json.dumps(kept, sort_keys=True))
    return doc


def refused(entries, verdicts):
    """The first refusal among `verdicts`, in entry order, as an error line; or None."""
    for entry in entries:
        doc = verdicts.get(entry["name"])
        if doc is not None and not doc["ok"]:
            return "%s %s: %s" % (entry["name"], entry["version"], doc["refusal"])
    return None


def fetch(args):
    """Download the given entries, several at once, each compiled one verified as it lands."""
    timeout = float(args.get("timeout") or 3600)
    entries = args.get("entries") or []
    progress = Progress(None, len(entries))
    errors, sizes, _corrupt, verdicts = check(
        entries, args.get("verify"), timeout, args.get("indexes"), progress
    )
    downloaded = [[e["name"], n] for e, n in zip(entries, sizes) if n]
    # A refusal is apply's to report (with every verdict); a fetch fails on its file alone.
    error = next((x for x in errors if x), None)
    return {"ok": error is None, "error": error, "downloaded": downloaded, "verdicts": verdicts}


def apply(args):
    """Run the controller's stack steps (``args["steps"]``, planned by
    sm120kit/stack/stack_steps.py) with this script's ops beside the core ones."""
    entries = args.get("entries") or []
    timeout = float(args.get("timeout") or 3600)
    progress = Progress(args.get("progress"), len(entries))
    start = time.time()
    sync = {"made": False, "added": [], "removed": [], "replaced": []}
    timings = {}
    staged_into = {}

    def checked(result, got, began):
        # check()'s outcome into the result (and its time); its first failure line, or None.
        errors, sizes, corrupt, verdicts = got
        result["downloaded"] = [[e["name"], n] for e, n in zip(entries, sizes) if n]
        result["verdicts"], result["corrupt"] = verdicts, corrupt
        timings["check_s"] = round(time.time() - began, 3)
        return next((x for x in errors if x), None) or refused(entries, verdicts)

    def check_op(step, result):
        got = check(entries, args.get("verify"), timeout, args.get("indexes"), progress)
        error = checked(result, got, start)
        if error:
            raise StepFailed(error)
        progress.total = len(entries)

    def stage_op(step, result):
        # A new env filled while the controller still places files: each file installed and
        # its modules compiled as soon as it is there and judged fit (lib/stream_install).
        site = site_packages(step["env"])
        if site is None:
            raise StepFailed("no site-packages under %s" % step["env"])
        began = time.time()
        cpu0 = (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
        staged_into["before"] = installed(step["env"])  # what the sync's report counts from
        progress.set("fetch", force=True, checked=0, installed=0, compiled=0, modules=0)

        def compiled_now(done, submitted):
            progress.set(compiled=done, modules=submitted)

        python = os.path.join(step["env"], "bin", "python")
        compiler = stream_install.Compiler(python, on_done=compiled_now)

        def installed_now(n):
            progress.set(installed=n)

        installer = stream_install.Installer(
            step["argv"], step["cache"], step["scratch"], site, compiler, int(step["timeout"]),
            on_batch=installed_now)  # fmt: skip
        installer.start()

        def ready(entry):
            progress.set(checked=progress.extra.get("checked", 0) + 1)
            installer.add(entry)

        try:
            got = check(
                entries, args.get("verify"), timeout, args.get("indexes"), progress,
                marker=stream_install.FetchMarker(args.get("fetched")), ready=ready,
                stop=lambda: installer.error is not None)  # fmt: skip
        except BaseException:
            installer.abort()
            compiler.abort()
            raise
        error = checked(result, got, began)
        if error or installer.error:
            installer.abort()
            compiler.abort()
            raise StepFailed(error or installer.error)
        progress.set("install", force=True)
        error = installer.finish()
        if error:
            compiler.abort()
            raise StepFailed(error)
        timings["installed_s"] = round(time.time() - began, 3)
        progress.set("compile", force=True)
        # The env's one compile pass (the sync after this step compiles nothing of its own).
        compiled, lost = stream_install.compile_all(compiler, python, site)
        if lost:
            raise StepFailed(
                "byte-compiling %d modules failed: no compile worker answered (first: %s)"
                % (len(lost), lost[0])
            )
        cpu1 = (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
        spent = [b.ru_utime + b.ru_stime - a.ru_utime - a.ru_stime for a, b in zip(cpu0, cpu1)]
        timings.update(
            # CPU seconds: this script (waiting, hashing what was there, the batches' lists)
            # and its children (uv, the compile workers)
            stage_cpu_self_s=round(spent[0], 1),
            stage_cpu_children_s=round(spent[1], 1),
            stage_s=round(time.time() - began, 3),
            stage_batches=installer.batches,
            stage_uv_s=round(installer.uv_s, 3),
            stage_uv_runs=[[round(b[0] - began, 1)] + b[1:] for b in installer.log],
            # when each file of many modules was ready, and its batch's start and end
            stage_feeders=[
                [f[0], f[1]] + [round(t - began, 1) for t in f[2:]] for f in installer.feeders
            ],
            compiled=compiled,
            compile_busy_s=round(compiler.busy_s, 3),
            # of the children's CPU: the compile workers' (the rest: uv's runs, verify forks)
            stage_cpu_compile_s=round(compiler.cpu_s, 1),
        )
        progress.total = len(entries)

    def uv_op(step, result):
        argv = step["argv"]
        if argv[1:3] == ["cache", "clean"]:  # no env: the repair's dropped cache entries
            error = uv_sync.run_uv(argv[0], argv[1:], step["cache"], int(step["timeout"]))
            if error:
                raise StepFailed(error)
            return
        syncing = argv[1:3] == ["pip", "sync"]
        progress.set("install" if syncing else "venv", force=True)
        # A sync's env: the one whose python it is given (new or existing).
        target = os.path.dirname(os.path.dirname(argv[argv.index("--python") + 1]))
        before = staged_into.get("before") if syncing else {}
        if before is None:
            before = installed(target)
        began = time.time()
        # A sync after ``stage`` runs without uv's compile pass (the stage's was the env's):
        # whatever it adds or rewrites is compiled here after it.
        site = site_packages(target) if step.get("compile") == "new" else None
        records = stream_install.records(site) if site else {}
        error = uv_sync.run_uv(argv[0], argv[1:], step["cache"], int(step["timeout"]))
        if error:
            raise StepFailed(error)
        if site:
            python = os.path.join(target, "bin", "python")
            timings["sync_compiled"], lost = stream_install.compile_new(python, site, records)
            if lost:
                raise StepFailed("byte-compiling %d modules after the sync failed" % lost)
        if syncing:
            added, removed, replaced = uv_sync.changes(before, installed(target))
            sync.update(added=added, removed=removed, replaced=replaced)
            timings["sync_s"] = round(time.time() - began, 3)
        else:
            sync["made"] = True

    def unpack_op(step, result):
        uv_sync.unpack(step["wheel"], step["member"], step["dest"])

    def requirements_op(step, result):
        write_atomic(step["path"], uv_sync.requirements([tuple(f) for f in step["files"]]))

    def record_op(step, result):
        doc = {"lock": step["lock"], "packages": step["packages"]}
        write_atomic(step["path"], json.dumps(doc, sort_keys=True, indent=1))
        result["installed"] = len(step["packages"])

    def pth_op(step, result):
        done = set_cuda_home(step)
        if not done["ok"]:
            raise StepFailed(done["error"])

    ops = {"check": check_op, "stage": stage_op, "uv": uv_op, "unpack": unpack_op, "requirements": requirements_op,
           "record": record_op, "pth": pth_op}  # fmt: skip
    base = {"corrupt": [], "downloaded": [], "verdicts": {}, "installed": 0}
    result = steps.apply(args, ops, base)
    if result["ok"]:
        progress.set("done", force=True)
    result.update(sync=sync, timings=timings)
    return result


ACTIONS = {
    "probe": probe,
    "fetch": fetch,
    "apply": apply,
}


def main():
    args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    action = ACTIONS.get(args.get("action"))
    if action is None:
        doc = {"ok": False, "error": "unknown action %r" % args.get("action")}
    else:
        try:
            doc = action(args)
        except Exception as exc:  # one line back to the controller, never a traceback
            doc = {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc), "installed": 0}
    print(json.dumps(doc, sort_keys=True))


if __name__ == "__main__":
    main()
