"""What an env really holds of one distribution: is it installed, at which version, intact?

Runs on the host with any Python >= 3.8 and the standard library only. Argument (argv[1],
JSON): ``{"env": path, "name": distribution name}``. Changes nothing. Prints::

    {"present": bool, "version": str | null, "record": sha256 of RECORD | null,
     "missing": [up to 5 files RECORD lists that are gone], "dist_info": path | null}

The install step compares this with its own record of the install (a `pip uninstall`, another
version, another build of the same version, files deleted by hand), so a record that no longer
matches the env is repaired instead of trusted. pip writes the sha256 of every installed file
into RECORD, so another build of the same version has another RECORD.
"""

import glob
import json
import os
import re
import sys

from sm120kit.remote.lib.files import sha256_file


def normalize(name):
    """A distribution name as its .dist-info directory spells it (PEP 503, with _)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def find(env, name):
    want = normalize(name)
    pattern = os.path.join(env, "lib", "python*", "site-packages", "*.dist-info")
    for info in sorted(glob.glob(pattern)):
        base = os.path.basename(info)[: -len(".dist-info")]
        if normalize(base.split("-", 1)[0]) == want:
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
    print(json.dumps(doc, sort_keys=True))


if __name__ == "__main__":
    main()
