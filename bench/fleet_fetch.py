"""The fleet's data plane alone: every file of a lock onto each host, checked, nothing installed.

    python3 bench/fleet_fetch.py SPEC.json

Run by bench/fleet.py ``--data-plane`` as a controller process of its own (its CPU-s are
this process's): SPEC names the hosts (``[{"name", "vars"}]``, vars as an inventory gives
them), ``known_hosts``, ``run_root``, ``store`` (the controller store, empty) and ``lock``
(a pylock file). Each host takes every file the way `provision`'s stack step does
(`ops/stack_files.obtain_release`: from a peer of the run as it arrives there, else the
stores or the index; every file's sha256 checked on the host before it takes its name;
`FETCH_WORKERS` at once, uv included), then leaves the peers as a provision's host does
(waiting, bounded, for the downloads still in flight from it). No facts, no uv install, no
compile: on 2 cores the provision's 8 installs and compiles share the CPU with the bytes,
this measures the bytes' path alone. Prints one JSON line: per host the seconds from the
op's start to its last file placed, where its files came from, its error if it failed.
"""

from __future__ import annotations

import json
import posixpath
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sm120kit.inventory.host import Host  # noqa: E402
from sm120kit.ops.stack_files import UV, UV_INDEXES, leave_peers, obtain_release  # noqa: E402
from sm120kit.plays.stack import FETCH_WORKERS  # noqa: E402
from sm120kit.runner.connection import ConnectOptions  # noqa: E402
from sm120kit.runner.host_context import HostContext  # noqa: E402
from sm120kit.runner.pool import Runner, RunOptions  # noqa: E402
from sm120kit.stack.lock import load_lock  # noqa: E402


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print("usage: fleet_fetch.py SPEC.json\n\n" + (__doc__ or "").strip())
        return 0 if sys.argv[1:2] in (["-h"], ["--help"]) else 2
    spec = json.loads(Path(sys.argv[1]).read_text())
    lock = load_lock(Path(spec["lock"]))
    entries = [*lock.packages, UV]
    hosts = [Host(h["name"], vars=h["vars"]) for h in spec["hosts"]]
    runner = Runner(
        RunOptions(
            run_root=spec["run_root"], connect=ConnectOptions(known_hosts=spec["known_hosts"])
        )
    )
    runner.settings = {"cache": {"controller": spec["store"]}}
    rows: dict[str, dict[str, Any]] = {}

    def op(ctx: HostContext) -> None:
        start = time.monotonic()
        root = posixpath.join(str(ctx.host.work_root), "releases")

        def one(entry: Any) -> str:
            dest = posixpath.join(root, entry.sha256, entry.filename)
            indexes = UV_INDEXES if entry == UV else lock.indexes
            return obtain_release(ctx, entry, dest, indexes=indexes)[0]

        try:
            with ThreadPoolExecutor(FETCH_WORKERS) as pool:
                got = list(pool.map(one, entries))
            seconds = time.monotonic() - start
        finally:
            leave_peers(ctx)
        origins = Counter("peer" if g.startswith("peer:") else g for g in got)
        rows[ctx.host.name] = {"data_s": round(seconds, 2), "files_from": dict(origins)}

    result = runner.run("fetch", hosts, op)
    for res in result.hosts.values():
        if res.error:
            rows.setdefault(res.host, {})["error"] = res.error
    print(json.dumps({"hosts": rows}))
    return 0 if all("error" not in r for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
