"""The on-host part of the wheel cache: copy, check and rename a wheel in one command.

A wheel reaches its final name on the host only after its sha256 was checked there, so a
killed copy or a changed file never looks like a wheel.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from ..errors import HostFailed
from ..remote import parse_last_json
from .context import CacheHost

#: Stdlib-only (Python 3.8+) helper run on the host with its stdin: for each op, copy `src`
#: (or take it as is with "move") to a temp name in `dir`, check its sha256, and rename it to
#: `dir/name` only when it matches. A killed copy leaves a hidden `.part` file, never a wheel.
PLACE_SNIPPET = r"""
import hashlib, json, os, shutil, sys

def digest(path):
    h, n = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(1 << 20)
            if not chunk:
                return h.hexdigest(), n
            h.update(chunk)
            n += len(chunk)

results = []
for op in json.loads(sys.argv[1])["ops"]:
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
    results.append(res)
print(json.dumps({"results": results}))
"""


def place(ctx: CacheHost, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run PLACE_SNIPPET on the host (one command) and return one result per op."""
    args = json.dumps({"ops": ops}, sort_keys=True)
    cmd = f"{shlex.quote(ctx.host.python)} - {shlex.quote(args)}"
    res = ctx.run(cmd, stdin=PLACE_SNIPPET, what="place wheel")
    doc = parse_last_json(res.stdout)
    if not doc or len(doc.get("results", [])) != len(ops):
        raise HostFailed(f"{ctx.host.name}: placing a wheel printed no result: {res.stdout[-200:]}")
    results: list[dict[str, Any]] = doc["results"]
    return results


def shell_path(path: str) -> str:
    """Quote a host path for the shell, keeping a leading ~/ expandable."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def host_dir(ctx: CacheHost, dest_dir: str) -> str:
    """Create dest_dir on the host and return it as an absolute path (for SFTP puts)."""
    quoted = shell_path(dest_dir)
    res = ctx.run(f"mkdir -p -- {quoted} && cd -- {quoted} && pwd", what="mkdir")
    lines = res.stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("/"):
        raise HostFailed(
            f"{ctx.host.name}: creating {dest_dir} printed no directory: {res.stdout!r:.200}"
        )
    return lines[-1]
