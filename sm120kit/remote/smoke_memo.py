"""Fingerprint what a smoke verdict depends on, and read or store remembered verdicts.

Runs on the host with any Python >= 3.8 and the standard library only. Arguments (argv[1],
JSON), one of::

    {"action": "check", "env": path, "marker": name, "packages": [name, ...],
     "memo_dir": path, "context": {...}, "tree": bool}
    {"action": "store", "memo_dir": path, "key": hex, "doc": {...}}

``check`` changes nothing. Per package it hashes the installed distribution's ``RECORD`` (pip
writes the sha256 of every installed file there, so another build of the same version
differs) and reads the install record's wheel sha256 (``<env>/.sm120kit/installed/<pkg>.json``);
it hashes the env's marker file (the managed env's ``.sm120kit-env.json``, or the serving
env's record ``.sm120kit-lock.json``, which already names every file by sha256: no packages
are given then). The key is a sha256 over those and the controller's context
(probe version, arch, GPU presence). With ``tree`` the env's own state is in it too
(`tree_fingerprint`: every directory under the env but ``__pycache__``, by path and mtime):
a distribution installed, removed or rewritten, or a file replaced by hand (an editor's or
``sed -i``'s rename), gives another key even when no record says so. It prints ``{"key", "fingerprints", "memo"}``: ``memo`` is
the stored verdict for that key, or null. ``store`` writes ``<memo_dir>/<key>.json``
atomically and prints ``{"ok": true}``.
"""

import glob
import hashlib
import json
import os
import sys
import tempfile

from sm120kit.remote.lib.files import sha256_file
from sm120kit.remote.lib.names import dist_stem, install_record


def file_sha256(path):
    try:
        return sha256_file(path)
    except OSError:
        return None


def dist_record(env, name):
    """sha256 of the installed distribution's RECORD (None: not installed)."""
    want = dist_stem(name)
    pattern = os.path.join(env, "lib", "python*", "site-packages", "*.dist-info")
    for info in sorted(glob.glob(pattern)):
        base = os.path.basename(info)[: -len(".dist-info")]
        if dist_stem(base.split("-", 1)[0]) == want:
            return file_sha256(os.path.join(info, "RECORD"))
    return None


def installed_wheel(env, name):
    try:
        with open(install_record(env, name)) as fh:
            return json.load(fh).get("sha256")
    except (OSError, ValueError, AttributeError):
        return None


def tree_fingerprint(env):
    """sha256 over (path, mtime) of every directory under `env` but ``__pycache__`` (whose
    entries the interpreter rewrites as it imports), in a sorted walk: any file added, removed
    or renamed into place changes its directory's mtime. Directories, not files: the real
    serving env has 8,700 of them and 76,000 files, and a stat of each file would cost the
    no-op 1-2 s (0.2-0.4 s for the directories, on a loaded 2-core machine). A write into an
    existing file in place changes no directory: not seen."""
    h = hashlib.sha256()
    todo = [""]  # paths relative to env
    while todo:
        rel = todo.pop()
        path = os.path.join(env, rel) if rel else env
        try:
            mtime = os.lstat(path).st_mtime_ns
            with os.scandir(path) as it:
                dirs = [e.name for e in it
                        if e.name != "__pycache__" and e.is_dir(follow_symlinks=False)]  # fmt: skip
        except OSError:
            h.update(("%s\0missing\n" % rel).encode())
            continue
        h.update(("%s\0%d\n" % (rel, mtime)).encode())
        todo.extend(os.path.join(rel, d) if rel else d for d in sorted(dirs, reverse=True))
    return h.hexdigest()


def check(args):
    env = args["env"]
    fingerprints = {
        "env_marker": file_sha256(os.path.join(env, args["marker"])),
        "packages": {
            name: {"record": dist_record(env, name), "wheel_sha256": installed_wheel(env, name)}
            for name in args["packages"]
        },
        "context": args.get("context") or {},
    }
    if args.get("tree"):
        fingerprints["tree"] = tree_fingerprint(env) if os.path.isdir(env) else None
    text = json.dumps(fingerprints, sort_keys=True).encode()
    key = hashlib.sha256(text).hexdigest()
    memo = None
    complete = fingerprints["env_marker"] and all(
        p["record"] for p in fingerprints["packages"].values()
    )
    if complete:
        try:
            with open(os.path.join(args["memo_dir"], key + ".json")) as fh:
                memo = json.load(fh)
        except (OSError, ValueError):
            memo = None
    return {"key": key if complete else None, "fingerprints": fingerprints, "memo": memo}


def store(args):
    directory = args["memo_dir"]
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".memo-", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(args["doc"], fh, sort_keys=True)
        os.rename(tmp, os.path.join(directory, args["key"] + ".json"))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return {"ok": True}


def main():
    args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    if args.get("action") == "check":
        doc = check(args)
    elif args.get("action") == "store":
        doc = store(args)
    else:
        doc = {"error": "unknown action %r" % args.get("action")}
    print(json.dumps(doc, sort_keys=True))


if __name__ == "__main__":
    main()
