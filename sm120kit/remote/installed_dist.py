"""What an env really holds of one distribution: is it installed, at which version, intact?

Runs on the host with any Python >= 3.8 and the standard library only. Argument (argv[1],
JSON): ``{"env": path, "name": distribution name}``, which changes nothing, or with
``"record": path, "doc": {...}`` too (the install step's last Step, right after pip): writes
`doc` plus what was found (``dist``, ``dist_present``, ``dist_version``, ``dist_record``) and
``installed_at`` (this host's time) to that path, atomically. Prints::

    {"present": bool, "version": str | null, "record": sha256 of RECORD | null,
     "missing": [up to 5 files RECORD lists that are gone], "dist_info": path | null,
     "ok": true, "error": null}

The install step compares this with its own record of the install (a `pip uninstall`, another
version, another build of the same version, files deleted by hand), so a record that no longer
matches the env is repaired instead of trusted. pip writes the sha256 of every installed file
into RECORD, so another build of the same version has another RECORD.
"""

import glob
import json
import os
import sys
import time

from sm120kit.remote.lib.files import sha256_file, write_atomic
from sm120kit.remote.lib.names import dist_stem


def find(env, name):
    want = dist_stem(name)
    pattern = os.path.join(env, "lib", "python*", "site-packages", "*.dist-info")
    for info in sorted(glob.glob(pattern)):
        base = os.path.basename(info)[: -len(".dist-info")]
        if dist_stem(base.split("-", 1)[0]) == want:
            return info
    return None


def version_of(info):
    try:
        with open(os.path.join(info, "METADATA"), encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    break
                if line.lower().startswith("version:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def missing_files(info):
    site = os.path.dirname(info)
    gone = []
    try:
        with open(os.path.join(info, "RECORD"), encoding="utf-8", errors="replace") as fh:
            rows = fh.read().splitlines()
    except OSError:
        return ["RECORD"]
    for row in rows:
        path = row.rsplit(",", 2)[0] if row.count(",") >= 2 else row
        if not path:
            continue
        full = os.path.normpath(os.path.join(site, path))
        if not os.path.lexists(full):
            gone.append(path)
            if len(gone) >= 5:
                break
    return gone


def main():
    args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    info = find(args["env"], args["name"])
    if info is None:
        doc = {"present": False, "version": None, "record": None, "missing": [], "dist_info": None}
    else:
        try:
            record = sha256_file(os.path.join(info, "RECORD"))
        except OSError:
            record = None
        doc = {
            "present": True,
            "version": version_of(info),
            "record": record,
            "missing": missing_files(info),
            "dist_info": info,
        }
    doc.update(ok=True, error=None)
    if args.get("record"):
        try:
            write_record(args["record"], args.get("doc") or {}, args["name"], doc)
        except OSError as exc:
            doc.update(ok=False, error="%s: %s" % (type(exc).__name__, exc))
    print(json.dumps(doc, sort_keys=True))


def write_record(path, given, name, found):
    """The install record: what the controller installed (`given`) and what the env holds of
    it now (`found`), for the next run's drift check."""
    record = dict(given)
    record.update(
        dist=name,
        dist_present=bool(found["present"]),
        dist_version=found["version"],
        dist_record=found["record"],
        installed_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )
    folder = os.path.dirname(path)
    if folder and not os.path.isdir(folder):
        os.makedirs(folder)
    write_atomic(path, json.dumps(record, sort_keys=True))


if __name__ == "__main__":
    main()
