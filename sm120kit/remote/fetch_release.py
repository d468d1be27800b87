"""Download locked files onto the host, each checked against the lock's sha256 before it takes
its final name: the wheel stores' download of a released file (ops/stack_files.py) when
nothing needs to be verified on the host as it lands.

Kept apart from `install_lock` so that each of a lock's 200 downloads starts a small program
(the download and the hash alone), not the installer and its verifier.

Runs on the host with any Python >= 3.8 and the standard library only. Argument (argv[1],
JSON)::

    {"entries": [{"name", "version", "url", "sha256", "dest"}], "indexes": [URL prefixes] |
     null, "timeout": seconds}

Prints ``{"ok", "error": the first failure's line or null, "downloaded": [[name, bytes]]}``.
"""

import json
import sys

from sm120kit.remote.lib.obtain import obtain


def main():
    args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    timeout = float(args.get("timeout") or 3600)
    error, downloaded = None, []
    try:
        for entry in args.get("entries") or []:
            line, fetched, _corrupt = obtain(entry, timeout, args.get("indexes"))
            if fetched:
                downloaded.append([entry["name"], fetched])
            if line:
                error = line
                break
    except Exception as exc:  # one line back to the controller, never a traceback
        error = "%s: %s" % (type(exc).__name__, exc)
    print(json.dumps({"ok": error is None, "error": error, "downloaded": downloaded}))


if __name__ == "__main__":
    main()
