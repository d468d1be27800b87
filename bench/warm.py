"""Cold vs no-op `invoke provision` of the sample kernel on `local` and 4 SSH hosts.

    python bench/warm.py [--hosts 4] [--keep DIR]

Starts its own fleet of real sshd servers on 127.0.0.60.. (apart from the test fleet), all
GPU-less, so each cross-builds for an R580 SM120 host (`target_driver`/`target_arch`) with
torch 2.13.0+cpu, like inventory/hosts.yaml's `local` host. Fresh work_roots and a fresh
controller cache: the cold run creates the envs, builds the minikernel once (the other hosts
take it from the wheel cache), installs and smokes it. Then `provision` again (no-op: nothing
changed) a few times. Printed: wall time of each run, the ratio cold / no-op (goal >= 50x,
about 1 s per host), and the median time of each step of the no-op runs across hosts.

Simulated: the GPUs (there are none; the hosts have no nvidia-smi). The torch wheel comes from
this machine's wheelhouse (host var pip_args: --find-links /opt/wheels) since PyTorch's index is
not reachable from here; everything else is real (sshd, pip, nvcc, smoke).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.conftest import invoke_env, run_invoke  # noqa: E402
from tests.support.fleet import Fleet  # noqa: E402

CROSS = {
    "target_driver": "580.95.05",
    "target_arch": "12.0",
    "recipe.torch.index": "pypi",
    "recipe.torch.version": "2.13.0",
    "recipe.torch.cuda": "cpu",
    "provision_packages": ["minikernel"],
    "provision_stack": False,
    "pip_args": ["--find-links", "/opt/wheels"],
}


def provision(hosts: list[str], inv: Path, env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    start = time.perf_counter()
    proc = run_invoke(
        ["provision", "-H", ",".join(hosts), "-i", str(inv), "--json"], env, timeout=3600
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(
            f"provision failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return elapsed, json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--noop-runs", type=int, default=3)
    parser.add_argument("--keep", help="keep the work roots and run logs here")
    args = parser.parse_args()
    tmp = Path(args.keep or tempfile.mkdtemp(prefix="sm120kit-warm-"))
    fleet = Fleet(
        tmp / "fleet", [(f"w{i}", f"127.0.0.{60 + i}", "nogpu") for i in range(args.hosts)]
    ).start()
    try:
        doc = yaml.safe_load(fleet.inventory.read_text())
        names = [h.name for h in fleet.hosts]
        for name in names:
            doc["all"]["hosts"][name].update(CROSS)
        doc["all"]["hosts"]["local"] = {
            "ansible_connection": "local",
            **CROSS,
            "work_root": str(tmp / "local-work"),
        }
        inv = tmp / "hosts.yaml"
        inv.write_text(yaml.safe_dump(doc))
        env = invoke_env(fleet, tmp, XDG_CACHE_HOME=str(tmp / "xdg"))
        hosts = ["local", *names]
        cold, cold_doc = provision(hosts, inv, env)
        print(f"cold provision, {len(hosts)} hosts (local + {args.hosts} SSH): {cold:.1f}s")
        runs: list[float] = []
        steps: dict[str, list[float]] = {}
        per_host: dict[str, list[float]] = {}
        commands: set[int] = set()
        for _ in range(args.noop_runs):
            elapsed, noop_doc = provision(hosts, inv, env)
            runs.append(elapsed)
            for name, host in noop_doc["hosts"].items():
                if host["changed"] or not host["smoke"].get("reused"):
                    raise SystemExit(f"{name}: not a no-op: {host['steps']}")
                per_host.setdefault(name, []).append(host["seconds"])
                commands.add(host["commands"])
                for step in host["steps"]:
                    steps.setdefault(step["name"], []).append(step["seconds"])
        noop = statistics.median(runs)
        print(
            f"no-op provision, same hosts: median {noop:.2f}s "
            f"({', '.join(f'{t:.2f}' for t in runs)})"
        )
        print(f"ratio cold / no-op: {cold / noop:.0f}x  (goal >= 50x)")
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"load average at the end: {load} on {os.cpu_count()} CPU(s)")
        for name, secs in per_host.items():
            print(f"  {name}: no-op {statistics.median(secs):.2f}s (median)")
        print(f"remote commands per host in a no-op: {sorted(commands)}")
        print("no-op steps (median over hosts and runs):")
        for name, secs in steps.items():
            print(f"  {name:20s} {statistics.median(secs):.3f}s")
        cold_steps = {s["name"]: s["seconds"] for s in cold_doc["hosts"]["local"]["steps"]}
        print("cold steps on local: " + ", ".join(f"{k} {v:.1f}s" for k, v in cold_steps.items()))
    finally:
        fleet.stop()
        if not args.keep:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
