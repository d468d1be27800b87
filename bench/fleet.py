"""The fleet's data path: `invoke provision` of one serving-stack lock on 1, 4 and 8 loopback
SSH hosts, side by side in one run (issue 46).

    python3 bench/fleet.py [--hosts 1,4,8] [--files 207] [--big-mb 512] [--rounds 1]
                           [--link-mbps 400] [--later]

The lock is synthetic, so that 8 hosts fit on this machine: `--files` small pure wheels (the
real sglang 0.5.23 lock has 207 files and uv: the controller's work per host is per file, not
per byte, once it carries no bytes) and one wheel of `--big-mb` MB of random bytes (stored,
not deflated), served by a loopback index (tests/support/tiny_index.py). The hosts are real
sshd servers on 127.0.0.101.. (tests/support/fleet.py, GPUs simulated by nvidia-smi stubs);
each run starts from fresh work roots and an empty controller store.

Reports per run: the wall time of the whole provision, the controller's CPU seconds (the
invoke process: the hosts' processes are sshd's children, not its), per host and per GB that
reached the hosts, where the files came from (index, peer, store), and the **data time**: the
latest moment a host had every file checked (the stack step's ``check_s``). On 2 cores the
whole provision of 8 hosts is CPU-bound (8 uv installs and compiles); the data time is the
bytes' part, which the controller's data path decides. Goals: controller CPU per extra host
<= 1 CPU-s; 8 hosts' data time <= 1.5x one host's.

`--link-mbps N` (root, `tc`: bench/links.py) gives every host its own N Mbit/s link both
ways, as on a LAN where each host has its own NIC, so that bytes, not the 2 shared cores,
decide the data time: at 400 Mbit/s a 512 MB file takes 10.7 s on the link and about 2 s of
CPU to hash and unpack. Without it the data time of 8 hosts measures mostly the CPU their
hashing shares. The index and the controller (127.0.0.1) are not shaped: the internet's side.

`--later`: a later run's new host (issue 46): one host provisions, then a new host alone
takes the lock from the controller store relayed over SFTP (its inventory knows no earlier
host: what main did) and another new host from the first host as its peer (the holder
record, cache/holders.py); prints both hosts' controller CPU-s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sm120kit.cache.holders import RECORD  # noqa: E402
from sm120kit.ops.stack_files import UV  # noqa: E402
from sm120kit.stack.draft import draft_lock  # noqa: E402
from sm120kit.stack.lock import dump_lock, load_lock  # noqa: E402
from tests.conftest import invoke_env  # noqa: E402
from tests.support.fleet import fleet_of  # noqa: E402
from tests.support.tiny_index import make_wheel, serve, sha256_of, stack_on_lock  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from links import shaped  # noqa: E402

UV_KEPT = Path.home() / ".cache" / "sm120kit-test" / "uv"
#: The longest one provision of the bench may take (a run past it is one line, not a hang).
PROVISION_TIMEOUT_S = 900.0
#: Where `--profile` writes each provision's controller profile (None: not profiled).
PROFILE_DIR: Path | None = None


def controller(args: list[str], env: dict[str, str], tag: str) -> subprocess.CompletedProcess[str]:
    """The real `invoke` CLI (the controller process), bounded; under bench/profiled.py when
    `--profile` is given. A run past `PROVISION_TIMEOUT_S` ends the bench in one line."""
    cmd = [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args]
    if PROFILE_DIR is not None:
        out = PROFILE_DIR / f"{tag}.pstats"
        cmd = [sys.executable, str(REPO / "bench" / "profiled.py"), str(out), *cmd[1:]]
    try:
        return subprocess.run(
            cmd, capture_output=True, text=True, env=env, timeout=PROVISION_TIMEOUT_S, cwd=REPO
        )
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stderr or b"")[-400:]
        text = tail.decode("utf-8", "replace") if isinstance(tail, bytes) else str(tail)
        last = (text.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(
            f"{tag}: `invoke {' '.join(args[:3])}` ran past {PROVISION_TIMEOUT_S:.0f} s;"
            f" its last line: {last}"
        ) from None


def uv_wheel() -> Path:
    """uv's pinned wheel, fetched once per machine (as tests/real/test_stack.py's fixture)."""
    path = UV_KEPT / UV.filename
    if not path.is_file() or sha256_of(path) != UV.sha256:
        UV_KEPT.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(".part")
        with urllib.request.urlopen(UV.url, timeout=120) as resp, part.open("wb") as out:
            shutil.copyfileobj(resp, out)
        if sha256_of(part) != UV.sha256:
            raise SystemExit(f"{UV.url}: not the pinned sha256")
        part.replace(path)
    return path


def big_wheel(out: Path, mb: int) -> Path:
    """A pure wheel holding `mb` MB of random bytes, stored (not deflated)."""
    path = make_wheel(out, "demo-big", "1.0")
    with zipfile.ZipFile(path, "a", zipfile.ZIP_STORED) as zf:
        with zf.open("demo_big/blob.bin", "w", force_zip64=True) as blob:
            for _ in range(mb):
                blob.write(os.urandom(1 << 20))
    return path


def real_sizes(lock: Path, scale: float) -> list[int]:
    """The sizes of `lock`'s files (a real pylock: uv records each), each divided by `scale`,
    smallest first (the last one is the top's, whose wheel stays tiny)."""
    entries = load_lock(lock).packages
    if any(not e.size for e in entries):
        raise SystemExit(f"{lock}: a file without a size; --sizes-of needs a lock with sizes")
    return sorted(int((e.size or 0) / scale) for e in entries)


def pad_wheel(path: Path, size: int) -> None:
    """Grow the wheel at `path` to about `size` bytes with random bytes, stored (not
    deflated): as many bytes to move and hash as a real file of that size."""
    more = size - path.stat().st_size
    if more <= 1024:
        return
    with zipfile.ZipFile(path, "a", zipfile.ZIP_STORED) as zf:
        name = f"{path.name.split('-')[0]}/pad.bin"
        with zf.open(name, "w", force_zip64=more > (1 << 31)) as blob:
            while more > 0:
                chunk = min(more, 1 << 20)
                blob.write(os.urandom(chunk))
                more -= chunk


def recipes(tmp: Path, url: str, files: int, index_dir: Path) -> Path:
    """The repo's recipes with r580's [stack] on the synthetic lock."""
    root = tmp / "tree"
    shutil.copytree(REPO / "recipes", root / "recipes")
    shutil.copytree(REPO / "patches", root / "patches")
    top = "demo-top==1.0"
    lock = draft_lock(
        top, python="3.11", platform="manylinux_2_34_x86_64", target=None,
        cache=tmp / "draft-cache", index=url,
    )  # fmt: skip
    # Sizes as a real lock has them (uv's pylock records each wheel's; the tiny index's simple
    # pages give none): the data path treats a big file by its locked size.
    sized = tuple(replace(e, size=(index_dir / e.filename).stat().st_size) for e in lock.packages)
    lock = replace(lock, packages=sized)
    text = dump_lock(lock, [f"{files} small files and one big one"])
    return stack_on_lock(root, text, top, "bench")


def provision(fleet: Any, tmp: Path, n: int, env: dict[str, str], tag: str) -> dict[str, Any]:
    """One cold provision of the first `n` hosts: fresh work roots, empty controller store."""
    doc = yaml.safe_load(fleet.inventory.read_text())
    names = [h.name for h in fleet.hosts[:n]]
    for name in names:
        doc["all"]["hosts"][name].update(
            target_driver="580.95.05", target_arch="12.0", work_root=str(tmp / tag / name)
        )
    inv = tmp / f"hosts-{tag}.yaml"
    inv.write_text(yaml.safe_dump(doc))
    store = tmp / tag / "controller-store"
    run_env = {**env, "INVOKE_SM120KIT_CACHE_CONTROLLER": str(store)}
    # No earlier run's holders either: each row measures its own hosts' fan-out.
    (tmp / "runs" / RECORD).unlink(missing_ok=True)
    load0 = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = controller(["provision", "-H", ",".join(names), "-i", str(inv), "--json"], run_env, tag)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(
            f"provision of {n} hosts failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    hosts = json.loads(proc.stdout)["hosts"]
    origins: dict[str, int] = {}
    data_s = step_s = 0.0
    each: list[float] = []
    odd: list[dict[str, Any]] = []
    for name in names:
        stack = hosts[name]["stack"]
        step = next(s for s in hosts[name]["steps"] if s["name"] == "stack")
        step_s = max(step_s, float(step["seconds"]))
        for where, k in (stack.get("files_from") or {}).items():
            key = "peer" if where.startswith("peer:") else where
            origins[key] = origins.get(key, 0) + k
            if where.startswith("cache:"):
                # A host of the run that took a file from a store while hosts held it: why.
                odd.append({
                    "host": name, "from": where, "files": k,
                    "refetched": (stack.get("sync") or {}).get("refetched"),
                    "cache_events": (hosts[name].get("cache_events") or [])[:10],
                })  # fmt: skip
        each.append(round(float((stack.get("timings") or {}).get("check_s") or 0.0), 1))
        data_s = max(data_s, each[-1])
    shutil.rmtree(tmp / tag, ignore_errors=True)
    return {
        "hosts": n, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "data_s": round(data_s, 2),
        "stack_s": round(step_s, 2),
        "files_from": origins, "data_each_s": each, "store_takers": odd, "load": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }  # fmt: skip


def data_plane(
    fleet: Any, tmp: Path, n: int, lock: Path, env: dict[str, str], tag: str
) -> dict[str, Any]:
    """The first `n` hosts take every file of `lock`, checked, and install nothing
    (bench/fleet_fetch.py, a controller process of its own): fresh work roots and store."""
    spec = tmp / f"fetch-{tag}.json"
    hosts = [
        {"name": h.name, "vars": {**fleet.all_vars(h), "work_root": str(tmp / tag / h.name)}}
        for h in fleet.hosts[:n]
    ]
    spec.write_text(json.dumps({
        "hosts": hosts, "known_hosts": str(fleet.known_hosts), "run_root": str(tmp / "runs"),
        "store": str(tmp / tag / "controller-store"), "lock": str(lock),
    }))  # fmt: skip
    (tmp / "runs" / RECORD).unlink(missing_ok=True)
    load0 = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    cmd = [sys.executable, str(REPO / "bench" / "fleet_fetch.py"), str(spec)]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=PROVISION_TIMEOUT_S, env=env
        )
    except subprocess.TimeoutExpired:
        raise SystemExit(
            f"{tag}: the fetch of {n} hosts ran past {PROVISION_TIMEOUT_S:.0f} s"
        ) from None
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    try:
        rows = json.loads(proc.stdout.strip().splitlines()[-1])["hosts"]
    except (ValueError, IndexError, KeyError):
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"{tag}: the fetch of {n} hosts printed no result: {last}") from None
    failed = {h: r["error"] for h, r in rows.items() if r.get("error")}
    if proc.returncode != 0 or failed:
        raise SystemExit(f"{tag}: the fetch failed on {len(failed)} host(s): {failed}")
    origins: dict[str, int] = {}
    for r in rows.values():
        for where, k in r["files_from"].items():
            origins[where] = origins.get(where, 0) + k
    each = [rows[h["name"]]["data_s"] for h in hosts]
    shutil.rmtree(tmp / tag, ignore_errors=True)
    return {
        "hosts": n, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "data_s": max(each),
        "data_each_s": each, "files_from": origins,
        "load": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }  # fmt: skip


def _one(
    fleet: Any, tmp: Path, env: dict[str, str], name: str, known: list[str], store: Path
) -> dict[str, Any]:
    """One provision of host `name` alone, with `known` as the inventory's hosts, work roots
    and controller store kept (a later run of the same fleet)."""
    doc = yaml.safe_load(fleet.inventory.read_text())
    doc["all"]["hosts"] = {n: doc["all"]["hosts"][n] for n in known}
    for n in known:
        doc["all"]["hosts"][n].update(
            target_driver="580.95.05", target_arch="12.0", work_root=str(tmp / "later" / n)
        )
    inv = tmp / f"hosts-later-{name}.yaml"
    inv.write_text(yaml.safe_dump(doc))
    run_env = {**env, "INVOKE_SM120KIT_CACHE_CONTROLLER": str(store)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = controller(["provision", "-H", name, "-i", str(inv), "--json"], run_env, f"later-{name}")
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"provision of {name} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    stack = json.loads(proc.stdout)["hosts"][name]["stack"]
    origins: dict[str, int] = {}
    for where, k in (stack.get("files_from") or {}).items():
        key = "peer" if where.startswith("peer:") else where
        origins[key] = origins.get(key, 0) + k
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {
        "host": name, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "files_from": origins,
        "data_s": round(float((stack.get("timings") or {}).get("check_s") or 0.0), 2),
        "load": round(os.getloadavg()[0], 2),
    }  # fmt: skip


def later(fleet: Any, tmp: Path, env: dict[str, str]) -> int:
    """``--later``: h00 provisions first (the controller store filled, the holder record
    written); then a new host alone takes the lock **before** (h01: no earlier host in its
    inventory, so the controller store relays every file over SFTP, as main did) and
    **after** (h02: h00 in its inventory, started as its peer). Prints both hosts' controller
    CPU-s side by side."""
    store = tmp / "later" / "controller-store"
    (tmp / "runs" / RECORD).unlink(missing_ok=True)
    first = _one(fleet, tmp, env, "h00", ["h00"], store)
    print(f"  first host: {first}", flush=True)
    before = _one(fleet, tmp, env, "h01", ["h01"], store)
    print(f"  before (store relays): {before}", flush=True)
    after = _one(fleet, tmp, env, "h02", ["h00", "h02"], store)
    print(f"  after (earlier host as peer): {after}", flush=True)
    print("\nlater host      wall s  data s  controller CPU-s  files from  load")
    for what, row in (("store relays", before), ("earlier peer", after)):
        print(
            f"{what:14s}  {row['wall_s']:6.1f}  {row['data_s']:6.1f}  {row['cpu_s']:16.2f}  "
            f"{row['files_from']}  {row['load']}"
        )
    ratio = after["cpu_s"] / max(before["cpu_s"], 1e-9)
    print(f"later host's controller CPU-s: {before['cpu_s']:.2f} before, {after['cpu_s']:.2f} "
          f"after ({ratio:.2f}x)")  # fmt: skip
    shutil.rmtree(tmp / "later", ignore_errors=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1,4,8")
    parser.add_argument("--files", type=int, default=207)
    parser.add_argument("--big-mb", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--sizes-of",
        type=Path,
        help="a real lock (e.g. locks/sglang-0.5.23/pylock.cp311-manylinux_2_34_x86_64.toml):"
        " its files' count and sizes (divided by --scale) instead of --files and --big-mb",
    )
    parser.add_argument("--scale", type=float, default=8.0, help="--sizes-of's divisor")
    parser.add_argument(
        "--link-mbps",
        type=float,
        default=0.0,
        help="each host's own link rate, both ways (tc; 0: not shaped)",
    )
    parser.add_argument(
        "--later",
        action="store_true",
        help="a later run's new host: controller CPU-s with the store relaying vs an earlier"
        " host as its peer (3 hosts)",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--data-plane",
        action="store_true",
        help="before each provision, the same hosts only fetch and check the lock's files"
        " (bench/fleet_fetch.py: no install, no compile): the data path apart from the CPU",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="write each provision's controller profile (cProfile, every thread) into this dir",
    )
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="seconds one provision may take"
    )
    args = parser.parse_args()
    global PROFILE_DIR, PROVISION_TIMEOUT_S
    PROVISION_TIMEOUT_S = args.timeout
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
        PROFILE_DIR = args.profile.resolve()
    counts = [3] if args.later else [int(x) for x in args.hosts.split(",")]
    with tempfile.TemporaryDirectory(prefix="sm120kit-fleet-bench-") as t:
        tmp = Path(t)
        files = tmp / "index"
        if args.sizes_of is not None:
            # The real lock's 207 files by their sizes (each / --scale): its many small files
            # and its few big ones (range-split, chained) as the data path meets them.
            sizes = real_sizes(args.sizes_of, args.scale)
            small = [f"demo-s{i:03d}==1.0" for i in range(len(sizes) - 1)]
            for spec, size in zip(small, sizes[:-1], strict=True):
                pad_wheel(make_wheel(files, spec.split("==")[0], "1.0"), size)
            make_wheel(files, "demo-top", "1.0", requires=tuple(small))
            args.files = len(sizes)
        else:
            small = [f"demo-s{i:03d}==1.0" for i in range(args.files - 2)]
            for spec in small:
                make_wheel(files, spec.split("==")[0], "1.0")
            big_wheel(files, args.big_mb)
            make_wheel(files, "demo-top", "1.0", requires=(*small, "demo-big==1.0"))
        lock_bytes = sum(p.stat().st_size for p in files.glob("*.whl"))
        big_mb = max(p.stat().st_size for p in files.glob("*.whl")) / 1e6
        fleet = fleet_of(max(counts), tmp / "fleet", first=101).start()
        rows: list[dict[str, Any]] = []
        plane: list[dict[str, Any]] = []
        links = (
            shaped([h.address for h in fleet.hosts], args.link_mbps)
            if args.link_mbps > 0
            else contextlib.nullcontext()
        )
        try:
            with links, serve(files) as url:
                rec = recipes(tmp, url, args.files, files)
                cache = tmp / "release-cache" / UV.sha256
                cache.mkdir(parents=True)
                shutil.copyfile(uv_wheel(), cache / UV.filename)
                env = invoke_env(
                    fleet, tmp, INVOKE_SM120KIT_RECIPES_DIR=str(rec),
                    SM120KIT_RELEASE_CACHE=str(cache.parent),
                )  # fmt: skip
                if args.later:
                    return later(fleet, tmp, env)
                lock = rec.parent / "locks" / "demo" / "pylock.cp311-manylinux_2_34_x86_64.toml"
                for r in range(args.rounds):
                    order = counts if r % 2 == 0 else list(reversed(counts))
                    for n in order:
                        if args.data_plane:
                            fetched = data_plane(fleet, tmp, n, lock, env, f"f{r}-{n}")
                            plane.append(fetched)
                            print(f"  round {r} data plane: {fetched}", flush=True)
                        row = provision(fleet, tmp, n, env, f"r{r}-{n}")
                        rows.append(row)
                        print(f"  round {r}: {row}", flush=True)
        finally:
            fleet.stop()
    gb = lock_bytes / 1e9
    shaping = f"{args.link_mbps:g} Mbit/s per host each way" if args.link_mbps else "not shaped"
    print(
        f"\nlock: {args.files} files, {gb:.2f} GB (largest file {big_mb:.0f} MB); links {shaping}"
    )
    print(
        "hosts  wall s  stack s  data s  controller CPU-s  per host  per GB to hosts  files from"
        "  load"
    )
    by_n: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_n.setdefault(row["hosts"], []).append(row)
        n = row["hosts"]
        print(
            f"{n:5d}  {row['wall_s']:6.1f}  {row['stack_s']:7.1f}  {row['data_s']:6.1f}  "
            f"{row['cpu_s']:16.2f}  "
            f"{row['cpu_s'] / n:8.2f}  {row['cpu_s'] / (gb * n):15.2f}  {row['files_from']}  "
            f"{row['load']}"
        )
    lo, hi = min(by_n), max(by_n)
    if hi > lo:

        def mean(n: int, k: str) -> float:
            return sum(r[k] for r in by_n[n]) / len(by_n[n])

        extra = (mean(hi, "cpu_s") - mean(lo, "cpu_s")) / (hi - lo)
        print(f"controller CPU per extra host: {extra:.2f} CPU-s  (goal <= 1)")
        print(
            f"{hi} hosts / {lo}: wall {mean(hi, 'wall_s') / mean(lo, 'wall_s'):.2f}x, stack step "
            f"{mean(hi, 'stack_s') / mean(lo, 'stack_s'):.2f}x, data time "
            f"{mean(hi, 'data_s') / max(mean(lo, 'data_s'), 1e-9):.2f}x  (goal: data <= 1.5x)"
        )
    if plane:
        print(
            "\ndata plane alone (bench/fleet_fetch.py: every file onto each host, checked; no"
            " install)\nhosts  wall s  data s  controller CPU-s  per host  files from  load"
        )
        for row in plane:
            n = row["hosts"]
            print(
                f"{n:5d}  {row['wall_s']:6.1f}  {row['data_s']:6.1f}  {row['cpu_s']:16.2f}  "
                f"{row['cpu_s'] / n:8.2f}  {row['files_from']}  {row['load']}"
            )
        lo, hi = min(r["hosts"] for r in plane), max(r["hosts"] for r in plane)
        if hi > lo:

            def pmean(n: int, k: str) -> float:
                got = [r[k] for r in plane if r["hosts"] == n]
                return sum(got) / len(got)

            print(
                f"data plane {hi} hosts / {lo}: data time "
                f"{pmean(hi, 'data_s') / max(pmean(lo, 'data_s'), 1e-9):.2f}x (goal <= 1.5x),"
                f" controller CPU per extra host "
                f"{(pmean(hi, 'cpu_s') - pmean(lo, 'cpu_s')) / (hi - lo):.2f} CPU-s"
            )
    if args.json:
        args.json.write_text(
            json.dumps({"rows": rows, "data_plane": plane, "lock_bytes": lock_bytes}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
