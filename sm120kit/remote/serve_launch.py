"""Start a model server on the host, detached, and read its log back (stdlib only, Python 3.8+).

Two modes, chosen by the JSON argument's "mode":

- "start" (default): ``{"argv": [...], "log": path}``: runs argv in a new session (so neither
  the SSH channel closing nor a cancelled run kills it), stdin from /dev/null, stdout and
  stderr appended to `log`; answers ``{"pid", "log", "started": true}`` or
  ``{"started": false, "error"}`` when the program cannot be run at all.
- "tail": ``{"log": path, "bytes": 4000}``: the end of the log, ``{"tail": text | null}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any


def start(args: dict[str, Any]) -> dict[str, Any]:
    """Start argv detached with its output in the log; its pid."""
    log = os.path.expanduser(args["log"])
    os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
    with open(log, "ab") as out, open(os.devnull, "rb") as devnull:
        try:
            proc = subprocess.Popen(
                args["argv"],
                stdin=devnull,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                cwd=os.path.expanduser(args.get("cwd") or "~"),
            )
        except OSError as exc:
            return {"started": False, "log": log, "error": "%s: %s" % (args["argv"][0], exc)}
    return {"started": True, "pid": proc.pid, "log": log}


def tail(args: dict[str, Any]) -> dict[str, Any]:
    """The last `bytes` of the log (decoded leniently), or None when there is none."""
    path = os.path.expanduser(args["log"])
    size = int(args.get("bytes") or 4000)
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - size))
            return {"tail": fh.read().decode("utf-8", "replace")}
    except OSError:
        return {"tail": None}


def main(argv: list[str]) -> int:
    args = json.loads(argv[1]) if len(argv) > 1 else {}
    mode = args.get("mode") or "start"
    doc = tail(args) if mode == "tail" else start(args)
    print(json.dumps(doc, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
