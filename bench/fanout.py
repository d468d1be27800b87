"""Fan-out benchmark: `invoke facts` on 1 vs 16 loopback SSH hosts, measured side by side.

    python bench/fanout.py [--rounds 5] [--hosts 16]

Starts its own fleet of real sshd servers on 127.0.0.20.. (apart from the test fleet), then
alternates 1-host and N-host runs of the real CLI so machine noise hits both alike. Prints the
median wall times, their ratio (goal <= 1.5x), the SSH commands each host cost (goal 1), and
the controller's own CPU time, in all and per extra host (goal <= 10 ms).
The GPUs behind the hosts are simulated by nvidia-smi stubs (no GPU on this machine).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.conftest import invoke_env, run_invoke  # noqa: E402
from tests.support.fleet import fleet_of  # noqa: E402


def timed(args: list[str], env: dict[str, str]) -> tuple[float, float, dict]:
    """Wall time, the controller's own CPU time (the invoke process), and the JSON result."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = run_invoke(args, env)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"invoke {' '.join(args)} failed:\n{proc.stderr}")
    return elapsed, cpu, json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hosts", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sm120kit-fanout-") as tmp:
        fleet = fleet_of(args.hosts, Path(tmp) / "fleet", first=20).start()
        try:
            env = invoke_env(fleet, Path(tmp))
            one = fleet.hosts[0].name
            many = ",".join(h.name for h in fleet.hosts)
            timed(["facts", "-H", many, "--json"], env)  # warm-up: imports, page cache
            t1: list[float] = []
            tn: list[float] = []
            c1: list[float] = []
            cn: list[float] = []
            commands: set[int] = set()
            for _ in range(args.rounds):
                elapsed, cpu, _doc = timed(["facts", "-H", one, "--json"], env)
                t1.append(elapsed)
                c1.append(cpu)
                elapsed, cpu, doc = timed(["facts", "-H", many, "--json"], env)
                tn.append(elapsed)
                cn.append(cpu)
                commands |= {h["commands"] for h in doc["hosts"].values()}
        finally:
            fleet.stop()
    m1, mn = statistics.median(t1), statistics.median(tn)
    print(f"facts on 1 host:   median {m1:.2f}s  ({', '.join(f'{t:.2f}' for t in t1)})")
    print(f"facts on {args.hosts} hosts: median {mn:.2f}s  ({', '.join(f'{t:.2f}' for t in tn)})")
    print(f"ratio {args.hosts} hosts / 1 host: {mn / m1:.2f}x  (goal <= 1.5x)")
    print(f"SSH commands per host for facts: {sorted(commands)}  (goal [1])")
    k1, kn = statistics.median(c1), statistics.median(cn)
    print(
        f"controller CPU (the invoke process alone): 1 host {k1:.2f}s, {args.hosts} hosts "
        f"{kn:.2f}s, ratio {kn / k1:.2f}x"
    )
    extra = (kn - k1) / max(args.hosts - 1, 1) * 1000
    print(f"controller CPU per extra host: {extra:.1f} ms  (goal <= 10 ms)")
    print(
        f"note: the {args.hosts} simulated hosts' sshd and probes share this machine's "
        f"{os.cpu_count()} CPU(s) with the controller; on real hosts they run in parallel"
    )


if __name__ == "__main__":
    main()
