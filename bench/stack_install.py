"""The stack step vs uv's own install of the same lock, side by side in one run (issue 31).

Every contender installs every file of one lock (``locks/<top>/pylock.*.toml``) into a fresh env on this
machine, from the same URLs, each file checked against the lock's sha256, with cold caches:

- **uv**: ``uv venv`` then ``uv pip install --no-deps --require-hashes`` of ``name @ url
  --hash=sha256:...`` lines written from the lock, with an empty uv cache (uv 0.13.9, the
  version the tool pins);
- **uv --compile-bytecode**: the same, with bytecode compiled as the tool's env is (the
  like-for-like figure);
- **the tool**: ``invoke provision -H s1`` of a loopback SSH host (a real sshd on
  127.0.0.109, tests/support/fleet.py, GPU simulated: host vars ``target_driver`` and
  ``target_arch``; ``--local``: the ``local`` host instead) on a fresh ``work_root`` with host
  vars ``provision_stack: true`` and ``provision_packages: []``, an empty controller wheel
  store and no controller release cache, so every file is downloaded by the host from the
  index, and the controller store filled after the step, as on a fleet's first host. The figure compared is its **stack step** (download through the wheel
  cache, sha256, verification of every compiled release for the target driver and arch, uv's
  offline sync of the verified files with bytecode). The whole provision (toolkit, stack
  smoke: work uv does not do) is shown beside it;
- **a second host from the stores** (first round only): another host (``s2``, 127.0.0.110;
  ``local2``) with its own empty ``work_root``, provisioned right after, in a run of its own,
  from the controller store the first one filled: its stack step and the bytes it downloaded
  from the index (goal: 0).

The order alternates between rounds (``--rounds`` 2: uv, uv-compile, tool in round 0, the
reverse in round 1) so that a warming network cache or other load falls on all alike, and
each contender starts after `settle()`: the disk's writeback done, the page cache dropped.
Then ``--hog-rounds`` (1) more rounds run beside a CPU hog: ``--hog`` (2) busy processes
started before each contender and killed after it, at normal priority, so every contender
shares the cores alike. Reports wall seconds, the ratio stack step / uv --compile-bytecode
for every round (goal: at most 1.15x in each), the load average (1 min) at each contender's
start and end, and the bytes each received (from /proc/net/dev, all interfaces but lo, so
other traffic counts too).

    python3 bench/stack_install.py --lock locks/sglang-0.5.23/pylock.cp311-manylinux_2_34_x86_64.toml \
        --work /tmp/stack-bench [--rounds 2] [--hog-rounds 1] [--json FILE]

Needs about 30 GB of disk under --work (each contender's env and caches are removed when it
is done).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sm120kit.stack.lock import load_lock  # noqa: E402
from tests.support.fleet import Fleet  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from proc_cpu import Sampler  # noqa: E402

#: The bench's two SSH hosts (loopback addresses apart from the test fleet's).
HOSTS = [("s1", "127.0.0.109", "nogpu"), ("s2", "127.0.0.110", "nogpu")]
#: A busy process of the hog: a CPU-bound loop, ended by SIGKILL.
HOG = "while True: pass"


@contextmanager
def hog(n: int) -> Iterator[None]:
    """`n` busy processes for the block's duration (killed after it, whatever happens)."""
    procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(10)


def load() -> float:
    """The 1-minute load average."""
    return round(os.getloadavg()[0], 2)


def rx_bytes() -> int:
    """Bytes received on every interface but loopback."""
    total = 0
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, rest = line.split(":", 1)
        if name.strip() != "lo":
            total += int(rest.split()[0])
    return total


def requirements(lock_path: Path) -> str:
    """The lock as a hash-checked requirements file of direct URLs."""
    lock = load_lock(lock_path)
    lines = [f"{e.name} @ {e.url} --hash=sha256:{e.sha256}" for e in lock.packages]
    return "\n".join(lines) + "\n"


UV = os.environ.get("UV_BIN", "uv")


def settle() -> None:
    """Start the next contender on a quiet disk: the last one's dirty pages written out (its
    writeback, and the removal of its 10 GB env, otherwise fall on whoever runs next: the same
    code measured 137 s after uv and 165 s right after another provision), and, where this
    runs as root, the page cache dropped, so each starts as cold as the first."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        pass


def uv_install(work: Path, lock_path: Path, *, compile_bytecode: bool) -> dict[str, Any]:
    """A fresh venv and one cold ``uv pip install`` of the lock's files."""
    env = work / "uv-env"
    req = work / "requirements.txt"
    req.write_text(requirements(lock_path))
    python = load_lock(lock_path).python
    uv_env = {**os.environ, "UV_CACHE_DIR": str(work / "uv-cache"), "UV_NO_CONFIG": "1"}
    settle()
    load0 = load()
    rx0, t0 = rx_bytes(), time.perf_counter()
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([UV, "venv", "-q", "--python", python, str(env)], check=True, env=uv_env)
    extra = ["--compile-bytecode"] if compile_bytecode else []
    subprocess.run(
        [UV, "pip", "install", "-q", "--python", str(env / "bin" / "python"), "--no-deps",
         "--require-hashes", *extra, "-r", str(req)],
        check=True, env=uv_env,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "rx_bytes": rx_bytes() - rx0,
            "load": [load0, load()]}  # fmt: skip


def inventory(work: Path, driver: str, arch: str, fleet: Fleet | None) -> tuple[Path, list[str]]:
    """The two hosts' inventory (fresh work roots under `work`) and their names."""
    hosts: dict[str, Any] = {}
    names = [h.name for h in fleet.hosts] if fleet is not None else ["local", "local2"]
    for name in names:
        vars_: dict[str, Any] = {
            "target_driver": driver,
            "target_arch": arch,
            "work_root": str(work / name),
            "provision_stack": True,
            "provision_packages": [],
        }
        if fleet is None:
            vars_["ansible_connection"] = "local"
        else:
            vars_.update(ansible_host=fleet.by_name(name).address, ansible_port=fleet.port)
        hosts[name] = vars_
    common: dict[str, Any] = {}
    if fleet is not None:
        common = {"ansible_user": fleet.user, "ansible_ssh_private_key_file": str(fleet.client_key)}
    inv = work / "hosts.yaml"
    inv.write_text(yaml.safe_dump({"all": {"vars": common, "hosts": hosts}}, sort_keys=False))
    return inv, names


def tool(
    work: Path, driver: str, arch: str, fleet: Fleet | None, *, second: bool = True
) -> dict[str, Any]:
    """`invoke provision` of the recipe's stack on a fresh work_root (host ``s1``, or
    ``local``), then (`second`) on a second fresh host from the stores the first filled."""
    inv, names = inventory(work, driver, arch, fleet)
    names = names if second else names[:1]
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "INVOKE_SM120KIT_CACHE_CONTROLLER": str(work / "controller-store"),
        "INVOKE_SM120KIT_RUN_ROOT": str(work / "runs"),
        "SM120KIT_RELEASE_CACHE": str(work / "no-release-cache"),
    }
    if fleet is not None:
        env["INVOKE_SM120KIT_KNOWN_HOSTS"] = str(fleet.known_hosts)
    out: dict[str, Any] = {}
    for name in names:
        settle()
        load0 = load()
        rx0, t0 = rx_bytes(), time.perf_counter()
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.Popen(
            [sys.executable, "-m", "invoke", "provision", "-H", name, "-i", str(inv), "--json"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        # Every process of the provision on this machine: the controller and, over SSH, the
        # host's sshd and all it runs (bench/proc_cpu.py).
        sshd = fleet.by_name(name).proc if fleet is not None else None
        sampler = Sampler([proc.pid] + ([sshd.pid] if sshd is not None else []), proc.pid)
        sampler.start()
        stdout, stderr = proc.communicate()
        sampler.stop()
        wall = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
        if proc.returncode != 0:
            raise SystemExit(f"provision failed (exit {proc.returncode}):\n{stderr[-3000:]}")
        host = json.loads(stdout)["hosts"][name]
        steps = {s["name"]: s["seconds"] for s in host["steps"]}
        stack = host.get("stack") or {}
        out["first" if not out else "second"] = {
            "host": name,
            "wall_s": round(wall, 1),
            # the whole provision: every process it waited for (over SSH: the controller's)
            "cpu_s": round(cpu, 1),
            "stack_s": round(steps.get("stack", 0.0), 1),
            "smoke_s": round(steps.get("stack smoke", 0.0), 1),
            "toolkit_s": round(steps.get("toolkit", 0.0), 1),
            "rx_bytes": rx_bytes() - rx0,
            "index_bytes": stack.get("downloaded_bytes"),
            "files_from": stack.get("files_from"),
            "stores_filled": stack.get("stores_filled"),
            "host_timings": stack.get("timings"),
            "load": [load0, load()],
            # CPU-s per kind of process over the whole provision (bench/proc_cpu.py)
            "cpu_kinds": {**sampler.kinds(), "controller": round(cpu, 1)},
        }
        shutil.rmtree(work / name, ignore_errors=True)
    return out


def where_time(t: dict[str, Any]) -> str:
    """One line of a stack step's host timings: every file checked, installed, compiled, and
    each file of many modules (`stream_install.FEEDER`): when it was ready, its batch's start
    and end (what decides when the compile workers have all their work)."""
    feeders = "; ".join(
        f"{name} ({modules}) ready {ready} s, batch {began}-{ended} s"
        for name, modules, ready, began, ended in t.get("stage_feeders") or []
    )
    children, compiling = t.get("stage_cpu_children_s"), t.get("stage_cpu_compile_s")
    rest = round(children - compiling, 1) if children is not None and compiling else None
    return (
        f"checked {t.get('check_s')} s, installed {t.get('installed_s')} s, compiled "
        f"{t.get('stage_s')} s, {t.get('stage_batches')} uv batches; {feeders or 'no feeders'}"
        f"\n    step CPU-s: stage script {t.get('stage_cpu_self_s')}, compile workers "
        f"{compiling}, uv runs and verify forks {rest}, controller {t.get('controller_cpu_s')}"
    )


def cpu_line(kinds: dict[str, float]) -> str:
    """One line of a provision's CPU-seconds per kind of process (bench/proc_cpu.py)."""
    total = sum(kinds.values())
    return f"{total:.1f} CPU-s: " + ", ".join(f"{k} {v}" for k, v in kinds.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lock", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--driver", default="580.95.05")
    parser.add_argument("--arch", default="12.0")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--hog-rounds", type=int, default=1, help="rounds beside the CPU hog")
    parser.add_argument("--hog", type=int, default=2, help="busy processes of the CPU hog")
    parser.add_argument("--local", action="store_true", help="the local host, not SSH")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--only",
        help="comma-separated contenders to run (uv, uv-compile, tool): a quick look, no ratios",
    )
    args = parser.parse_args(argv)

    shutil.rmtree(args.work / "fleet", ignore_errors=True)  # a stopped run's keys and sshd dirs
    fleet = None if args.local else Fleet(args.work / "fleet", HOSTS).start()
    rows: list[dict[str, Any]] = []
    try:
        for i in range(args.rounds + args.hog_rounds):
            hogged = i >= args.rounds
            got: dict[str, Any] = {}
            order = ["uv", "uv-compile", "tool"]
            if i % 2:
                order.reverse()
            if args.only:
                order = [w for w in order if w in args.only.split(",")]
            for which in order:
                work = args.work / f"round{i}-{which}"
                shutil.rmtree(work, ignore_errors=True)
                work.mkdir(parents=True)
                with hog(args.hog if hogged else 0):
                    if which == "tool":
                        # The second host (from the stores) in the first round only.
                        got[which] = tool(work, args.driver, args.arch, fleet, second=i == 0)
                    else:
                        got[which] = uv_install(work, args.lock, compile_bytecode=which != "uv")
                print(
                    f"  round {i}{' (hog)' if hogged else ''} {which:10s} {got[which]}", flush=True
                )
                shutil.rmtree(work, ignore_errors=True)
            rows.append({"order": order, "hog": args.hog if hogged else 0, **got})
    finally:
        if fleet is not None:
            fleet.stop()
    if args.only:
        return 0

    print()
    print("round  hog  uv s   uv --compile-bytecode s  stack step s  ratio  second host  load")
    for i, r in enumerate(rows):
        first, second = r["tool"]["first"], r["tool"].get("second")
        ratio = first["stack_s"] / r["uv-compile"]["wall_s"]
        loads = [r["uv"]["load"], r["uv-compile"]["load"], first["load"]]
        print(
            f"{i:5d}  {r['hog']:3d}  {r['uv']['wall_s']:5.1f}  {r['uv-compile']['wall_s']:23.1f}  "
            f"{first['stack_s']:12.1f}  {ratio:4.2f}x  "
            + (
                f"{second['stack_s']:7.1f} s, {second['index_bytes']} index bytes"
                if second
                else "-"
            )
            + f"  {loads}"
        )
    print()
    print("where the stack step's time went (host seconds from the stage's start):")
    for i, r in enumerate(rows):
        print(f"  round {i}: {where_time(r['tool']['first'].get('host_timings') or {})}")
    print("the whole provision's CPU per kind of process (uv --compile-bytecode's beside it):")
    for i, r in enumerate(rows):
        kinds = r["tool"]["first"].get("cpu_kinds") or {}
        print(f"  round {i}: {cpu_line(kinds)}; uv --compile-bytecode {r['uv-compile']['cpu_s']}")
    uv_s = sum(r["uv"]["wall_s"] for r in rows)
    uvc_s = sum(r["uv-compile"]["wall_s"] for r in rows)
    stack_s = sum(r["tool"]["first"]["stack_s"] for r in rows)
    worst = max(r["tool"]["first"]["stack_s"] / r["uv-compile"]["wall_s"] for r in rows)
    print(
        f"all rounds: stack step {stack_s:.1f} s, {stack_s / uv_s:.2f}x uv, "
        f"{stack_s / uvc_s:.2f}x uv --compile-bytecode; worst round {worst:.2f}x"
    )
    print(
        "goal: stack step at most 1.15x uv --compile-bytecode in every round; second host 0 index bytes"
    )
    if args.json:
        doc = {"rows": rows, "ratio_uv": stack_s / uv_s, "ratio_uv_compile": stack_s / uvc_s}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
