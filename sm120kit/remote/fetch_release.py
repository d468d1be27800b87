"""Download locked files onto the host, each checked against the lock's sha256 before it takes
its final name: the wheel stores' download of a released file (ops/stack_files.py) when
nothing needs to be verified on the host as it lands.

A service (`sm120kit.remote.service`): started once per host and run, it answers every
download of the run, several at once, so that a lock's 200 files cost one interpreter, one
import of urllib and one load of the CA bundle, not 200 of each.

Runs on the host with any Python >= 3.8 and the standard library only. Argument (argv[1],
JSON): ``{"workers": downloads at once}``. Then one request per stdin line::

    {"id": n, "entry": {"name", "version", "url", "sha256", "dest"}, "indexes": [URL
     prefixes] | null, "timeout": seconds}

and one reply per stdout line, as each download ends: ``{"id": n, "ok", "error": its line or
null, "downloaded": bytes from the lock's URL, "mirrored": bytes from a peer, "source":
"peer" | "index" | "kept", "refused": [lines]}``. An entry's ``mirrors`` (peer hosts' URLs,
`lib/peers.py`) are tried first, each file checked against the lock's sha256 (a peer's file
with other bytes is refused, and the lock's URL is next); an entry with no ``url`` has no
index to fall back on.

``{"id": n, "serve": {"root": releases dir, "token": the run's}}`` starts this host's peer
server (once; it lives as long as this process) and answers ``{"ok", "address", "port"}``.
Ends when stdin closes, once every request is answered.
"""

import json
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from sm120kit.remote.lib import peers
from sm120kit.remote.lib.obtain import obtain


def answer(request, out, lock):
    """Download one request's file and write its reply line."""
    reply = {"id": request.get("id"), "ok": False, "error": None, "downloaded": 0}
    try:
        if request.get("serve"):
            reply.update(peers.serve(request["serve"]["root"], request["serve"]["token"]))
            return
        entry = request["entry"]
        timeout = float(request.get("timeout") or 3600)
        placed, mirrored, refused = peers.from_mirrors(entry, timeout)
        reply.update(mirrored=mirrored, refused=refused)
        if placed:
            reply.update(ok=True, source="peer")
        elif not entry.get("url"):
            reply["error"] = "%s %s: no peer served it (%s)" % (
                entry["name"], entry["version"], "; ".join(refused) or "none asked")  # fmt: skip
        else:
            there = os.path.isfile(entry["dest"])
            line, fetched, _corrupt = obtain(entry, timeout, request.get("indexes"))
            source = "index" if fetched else ("kept" if there else "index")
            reply.update(ok=line is None, error=line, downloaded=fetched, source=source)
    except Exception as exc:  # one line back to the controller, never a traceback
        reply["error"] = "%s: %s" % (type(exc).__name__, exc)
    finally:
        with lock:
            out.write(json.dumps(reply, sort_keys=True) + "\n")
            out.flush()


def serve(inp, out, workers):
    """Answer every request line of `inp` on `out` until `inp` ends."""
    lock = threading.Lock()
    with ThreadPoolExecutor(max(1, workers)) as pool:
        for line in inp:
            line = line.strip()
            if not line:
                continue
            try:
                request = json.loads(line)
            except ValueError as exc:
                request = {"id": None, "entry": None, "error": str(exc)}
            pool.submit(answer, request, out, lock)


def main():
    args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    serve(sys.stdin, sys.stdout, int(args.get("workers") or 8))


if __name__ == "__main__":
    main()
