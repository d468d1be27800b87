"""Copy, check and rename wheels into a folder on the host: the wheel cache's on-host part.

Runs on the host with any Python >= 3.8 and the standard library only. Argument (argv[1],
JSON)::

    {"ops": [{"src": path, "dir": folder, "name": file name, "sha256": hex, "move": bool?}]}

For each op: copy `src` (or, with ``move``, take it as it is) to a hidden temp name in `dir`,
check its sha256, and rename it to ``dir/name`` only when it matches; a wheel reaches its final
name only after its sha256 was checked here, so a killed copy (a hidden ``.part`` file) or a
changed file never looks like a wheel. `src` already at ``dir/name`` is only checked. Prints one
JSON document, one result per op, in order::

    {"results": [{"path": final path, "ok": bool, "sha256": hex?, "size": int?,
                  "missing": true?, "error": "OSError: ..."?}]}
"""

import json
import os
import shutil
import sys

from sm120kit.remote.lib.files import sha256_file


def digest(path):
    """(sha256 hex, size in bytes) of the file at `path`."""
    return sha256_file(path), os.path.getsize(path)


def place_one(op):
    src = os.path.expanduser(op["src"])
    folder = os.path.expanduser(op["dir"])
    final = os.path.join(folder, op["name"])
    res = {"path": os.path.abspath(final), "ok": False}
    tmp = None
    try:
        if not os.path.isfile(src):
            res["missing"] = True
            raise IOError("no such file: " + src)
        if not os.path.isdir(folder):
            os.makedirs(folder)
        if os.path.abspath(src) == os.path.abspath(final):
            res["sha256"], res["size"] = digest(final)
        else:
            if op.get("move"):
                tmp = src
            else:
                tmp = os.path.join(folder, ".%s.part-%s" % (op["name"], os.urandom(6).hex()))
                shutil.copyfile(src, tmp)
            res["sha256"], res["size"] = digest(tmp)
        res["ok"] = res["sha256"] == op["sha256"]
        if tmp is not None:
            if res["ok"]:
                os.replace(tmp, final)
            else:
                os.unlink(tmp)
            tmp = None
    except (IOError, OSError) as exc:
        res["error"] = "%s: %s" % (type(exc).__name__, exc)
        if tmp is not None and not op.get("move"):
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return res


def main():
    args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    print(json.dumps({"results": [place_one(op) for op in args.get("ops") or []]}))


if __name__ == "__main__":
    main()
