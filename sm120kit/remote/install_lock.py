"""Install a lock's files into the serving env, and nothing else: no resolver runs here.

Runs on the host with any Python >= 3.8 and the standard library only. Argument (argv[1],
JSON)::

    {"action": "probe" | "fetch" | "apply" | "cuda_home" | "memo", "env": path,
     "record": path, "python": interpreter for a new venv, "entries": [{"name", "version",
     "filename", "url", "sha256", "compiled", "dest"}], "verify": {"cc": [12, 0], "driver",
     "driver_cuda", "python", "not_for_arch": {}, "loaders": {dist: {cc: dir}}, "digest"} |
     null, "timeout": seconds}

``probe`` changes nothing: ``{"exists", "record", "installed": {name: version},
"present": [dest paths already on the host], "cuda_home": the CUDA_HOME the env's .pth file
sets or null, "memo": the env's last passing smoke or null}``. ``cuda_home`` writes (or with
null removes) ``<site-packages>/sm120kit_cuda_home.pth``, which sets CUDA_HOME for every
process of the env's Python unless it is set already: the JIT packages (flashinfer, deep_gemm,
humming) look there first for nvcc and the headers, so they get the toolkit step's one
release instead of whatever pip put beside them. ``memo`` writes the smoke memo (``memo``).

``fetch`` is apply's first phase alone, for the entries given (a file the wheel stores did
not have, fetched by the one host elected to download it): ``{"ok", "error",
"downloaded"}``.

``apply`` takes the entries to install, in three phases, each complete before the next:
(1) every file is obtained into its ``dest`` (downloaded unless a file is there already)
and its sha256 compared with the lock's, and one mismatch refuses the whole install before
anything is installed; (2) every compiled entry is verified for the target (`wheel_check`),
and one refusal stops it likewise; a verdict is kept beside its file, keyed by the target's
``digest`` (of the target and of this program) and the file's sha256, so that a file
installed again (another env, an env removed) is not read again; (3) the venv is made if absent
and the files are installed with ``pip install --no-deps --require-hashes --no-index``, one
pip per CPU at once, then byte-compiled (`wheel_install`), and the record (what was
installed, by sha256) is written atomically. Prints ``{"ok", "error", "downloaded":
[[name, bytes]], "verdicts": {name: {...}}, "installed": n, "seconds", "timings"}``.
"""

import concurrent.futures
import glob
import json
import os
import re
import subprocess
import sys
import time

from sm120kit.remote.lib import wheel_install
from sm120kit.remote.lib.download import DownloadFailed, download
from sm120kit.remote.lib.files import remove, sha256_file, write_atomic
from sm120kit.remote.lib.wheel_check import loaded_modules, shared_objects, verify_wheel


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(env):
    """Distribution name -> version of every .dist-info in the env's site-packages."""
    out = {}
    for info in glob.glob(os.path.join(env, "lib", "python*", "site-packages", "*.dist-info")):
        base = os.path.basename(info)[: -len(".dist-info")]
        name, _, version = base.partition("-")
        out[normalize(name)] = version
    return out


def read_record(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


PTH = "sm120kit_cuda_home.pth"
PTH_LINE = "import os; os.environ.setdefault('CUDA_HOME', %r)\n"
MEMO = ".sm120kit-smoke.json"


def pth_cuda_home(env):
    site = wheel_install.site_packages(env)
    try:
        with open(os.path.join(site or "", PTH)) as fh:
            text = fh.read()
    except OSError:
        return None
    m = re.match(r"import os; os\.environ\.setdefault\('CUDA_HOME', '(.*)'\)\n?$", text)
    return m.group(1) if m else "(unreadable)"


def probe(args):
    entries = args.get("entries") or []
    return {
        "ok": True,
        "exists": os.path.isfile(os.path.join(args["env"], "bin", "python")),
        "record": read_record(args["record"]),
        "installed": installed(args["env"]),
        "present": [e["dest"] for e in entries if os.path.isfile(e["dest"])],
        "cuda_home": pth_cuda_home(args["env"]),
        "memo": read_record(os.path.join(args["env"], MEMO)),
    }


def set_cuda_home(args):
    site = wheel_install.site_packages(args["env"])
    if site is None:
        return {"ok": False, "error": "no site-packages under %s" % args["env"]}
    path = os.path.join(site, PTH)
    if args.get("cuda_home"):
        write_atomic(path, PTH_LINE % str(args["cuda_home"]))
    else:
        remove(path)
    return {"ok": True, "error": None}


def write_memo(args):
    write_atomic(os.path.join(args["env"], MEMO), json.dumps(args["memo"], sort_keys=True))
    return {"ok": True, "error": None}


def obtain(entry, timeout):
    """The entry's file at its dest with the lock's sha256, or an error line. Returns
    (error or None, bytes downloaded)."""
    dest, want = entry["dest"], entry["sha256"]
    fetched = 0
    if not os.path.isfile(dest):
        part = dest + ".part"
        try:
            got = download(entry["url"], part, "", timeout=timeout)
        except DownloadFailed as exc:
            return "%s %s: %s" % (entry["name"], entry["version"], exc), 0
        fetched = os.path.getsize(part)
        os.rename(part, dest)
    else:
        got = sha256_file(dest)
    if got != want:
        remove(dest)  # never install it, never take it for the lock's file again
        return (
            "%s %s: sha256 %s differs from the lock's %s (%s)"
            % (entry["name"], entry["version"], got, want, entry["url"])
        ), fetched
    return None, fetched


def verify_all(entries, target):
    """`verify` of each entry, in order; on several CPUs in parallel processes (reading the
    device code of 93 wheels is CPU work: about 110 s on one core for sglang 0.5.23's lock)."""
    workers = min(len(entries), os.cpu_count() or 1, 8)
    if workers < 2:
        return [verify(e, target) for e in entries]
    # Biggest first, so that the long ones do not end up last on one worker.
    order = sorted(range(len(entries)), key=lambda i: -os.path.getsize(entries[i]["dest"]))
    with concurrent.futures.ProcessPoolExecutor(workers) as pool:
        futures = {i: pool.submit(verify, entries[i], target) for i in order}
        return [futures[i].result() for i in range(len(entries))]


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
    cc = tuple(target["cc"])
    path = entry["dest"]
    variants = (target.get("loaders") or {}).get(normalize(entry["name"]))
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


def fetch(args):
    """Phase 1 for the given entries, several files at once (the hashing of files already
    present is most of it after the controller has placed them)."""
    timeout = float(args.get("timeout") or 3600)
    entries = args.get("entries") or []
    for entry in entries:
        parent = os.path.dirname(entry["dest"])
        if not os.path.isdir(parent):
            os.makedirs(parent)
    workers = max(1, min(len(entries), os.cpu_count() or 1, 8))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda e: obtain(e, timeout), entries))
    downloaded = [[e["name"], n] for e, (_err, n) in zip(entries, results) if n]
    for error, _n in results:
        if error:
            return {"ok": False, "error": error, "downloaded": downloaded}
    return {"ok": True, "error": None, "downloaded": downloaded}


def apply(args):
    start = time.time()
    entries = args.get("entries") or []
    timeout = float(args.get("timeout") or 3600)
    got = fetch(args)
    downloaded = got["downloaded"]
    if not got["ok"]:
        return dict(got, installed=0)
    verdicts = {}
    target = args.get("verify")
    compiled = [e for e in entries if target and e.get("compiled")]
    for entry, doc in zip(compiled, verify_all(compiled, target)):
        verdicts[entry["name"]] = {
            "ok": doc["ok"],
            "refusal": doc["refusal"],
            "notes": doc["notes"],
        }
        if not doc["ok"]:
            error = "%s %s: %s" % (entry["name"], entry["version"], doc["refusal"])
            return {
                "ok": False,
                "error": error,
                "downloaded": downloaded,
                "verdicts": verdicts,
                "installed": 0,
            }
    verified = time.time()
    env = args["env"]
    py = os.path.join(env, "bin", "python")
    if entries and not os.path.isfile(py):
        proc = subprocess.run([args["python"], "-m", "venv", env], capture_output=True, text=True)
        if proc.returncode != 0:
            return {
                "ok": False,
                "error": "venv %s: %s" % (env, proc.stderr.strip()[-300:]),
                "downloaded": downloaded,
                "installed": 0,
            }
    timings = {"verify_s": round(verified - start, 3)}
    if entries:
        scratch = os.path.join(env, ".sm120kit-install")
        remove(scratch)
        os.makedirs(scratch)
        files = [(e["dest"], e["sha256"]) for e in entries]
        error, done = wheel_install.install(env, files, scratch, timeout)
        remove(scratch)
        timings.update(done)
        if error:
            return {
                "ok": False,
                "error": error,
                "downloaded": downloaded,
                "verdicts": verdicts,
                "installed": 0,
            }
    record = read_record(args["record"]) or {}
    packages = dict(record.get("packages") or {})
    for e in entries:
        packages[normalize(e["name"])] = {"version": e["version"], "sha256": e["sha256"]}
    write_atomic(
        args["record"],
        json.dumps({"lock": args.get("lock"), "packages": packages}, sort_keys=True, indent=1),
    )
    return {
        "ok": True,
        "error": None,
        "downloaded": downloaded,
        "verdicts": verdicts,
        "installed": len(entries),
        "seconds": round(time.time() - start, 3),
        "timings": timings,
    }


ACTIONS = {
    "probe": probe,
    "fetch": fetch,
    "apply": apply,
    "cuda_home": set_cuda_home,
    "memo": write_memo,
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
