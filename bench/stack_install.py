"""`invoke provision --stack` vs a plain `pip install` of the same lock, side by side in one run.

Both install every file of one lock (``locks/*.toml``) into a fresh env on this machine, from
the same URLs, each file checked against the lock's sha256:

- **plain pip**: a fresh ``python -m venv``, then ``pip install --no-deps --require-hashes
  --no-cache-dir`` of ``name @ url --hash=sha256:...`` lines written from the lock (pip checks
  the hashes, resolves nothing, downloads each file once, caches nothing);
- **the tool**: ``invoke provision -H local`` on a fresh ``work_root`` with host vars
  ``provision_stack: true`` and ``provision_packages: []``, so it runs facts, recipe, toolkit,
  the stack step (download, sha256, verification of every compiled release for the target
  driver and arch, ``pip install --no-deps --require-hashes`` from the downloaded files) and
  the stack smoke step. Each round gets an empty controller wheel store and no controller
  release cache, so every file is downloaded and stored as on a fleet's first host (the
  store's copy is work a single pip does not do either). The toolkit step (a CUDA toolkit
  for the JIT packages) and the smoke step are work plain pip does not do; the report shows
  the stack step alone as well, the like-for-like figure.

The order alternates with ``--rounds`` > 1 so that a warming network cache or other load
falls on both alike. Reports wall seconds, the ratio tool / pip (goal: within 1.2x,
verification included) and the bytes each downloaded (from /proc/net/dev, all interfaces
but lo, so other traffic on the machine counts too).

    python bench/stack_install.py --lock locks/sglang-0.5.23-cp311-manylinux_2_34_x86_64.toml \
        --work /tmp/stack-bench [--driver 580.95.05 --arch 12.0] [--rounds 1] [--json FILE]

Needs about 2 x 11 GB of disk under --work (each round removes its envs when done).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sm120kit.lock import load_lock  # noqa: E402


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


def plain_pip(work: Path, lock_path: Path) -> dict[str, float]:
    """A fresh venv and one pip install of the lock's files."""
    env = work / "plain-env"
    req = work / "requirements.txt"
    req.write_text(requirements(lock_path))
    rx0, t0 = rx_bytes(), time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    subprocess.run(
        [str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--isolated",
         "--disable-pip-version-check", "--no-deps", "--require-hashes", "--no-cache-dir",
         "-r", str(req)],
        check=True,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    return {"wall_s": round(wall, 1), "rx_bytes": rx_bytes() - rx0}


def tool(work: Path, driver: str, arch: str) -> dict[str, float]:
    """`invoke provision -H local` of the recipe's stack on a fresh work_root."""
    root = work / "tool-root"
    inv = work / "hosts.yaml"
    inv.write_text(
        "all:\n  hosts:\n    local:\n      ansible_connection: local\n"
        f'      target_driver: "{driver}"\n      target_arch: "{arch}"\n'
        f"      work_root: {root}\n      provision_stack: true\n      provision_packages: []\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "INVOKE_SM120KIT_CACHE_CONTROLLER": str(work / "controller-store"),
        "INVOKE_SM120KIT_RUN_ROOT": str(work / "runs"),
        "SM120KIT_RELEASE_CACHE": str(work / "no-release-cache"),
    }
    rx0, t0 = rx_bytes(), time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "invoke", "provision", "-H", "local", "-i", str(inv), "--json"],
        cwd=REPO, env=env, capture_output=True, text=True,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"provision failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    host = json.loads(out.stdout)["hosts"]["local"]
    steps = {s["name"]: s["seconds"] for s in host["steps"]}
    return {
        "wall_s": round(wall, 1),
        "stack_s": round(steps.get("stack", 0.0), 1),
        "smoke_s": round(steps.get("stack smoke", 0.0), 1),
        "toolkit_s": round(steps.get("toolkit", 0.0), 1),
        "rx_bytes": rx_bytes() - rx0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lock", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--driver", default="580.95.05")
    parser.add_argument("--arch", default="12.0")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    rows: list[dict[str, Any]] = []
    for i in range(args.rounds):
        got: dict[str, dict[str, float]] = {}
        order = ["pip", "tool"] if i % 2 == 0 else ["tool", "pip"]
        for which in order:
            work = args.work / f"round{i}-{which}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            if which == "pip":
                got[which] = plain_pip(work, args.lock)
            else:
                got[which] = tool(work, args.driver, args.arch)
            print(f"  round {i} {which:4s} {got[which]}", flush=True)
            shutil.rmtree(work, ignore_errors=True)
        rows.append({"order": order, **got})

    pip_s = sum(r["pip"]["wall_s"] for r in rows)
    tool_s = sum(r["tool"]["wall_s"] for r in rows)
    stack_s = sum(r["tool"]["stack_s"] for r in rows)
    smoke_s = sum(r["tool"]["smoke_s"] for r in rows)
    print()
    print(f"plain pip install of the lock:        {pip_s:8.1f} s wall")
    print(
        f"invoke provision (toolkit, stack, smoke): {tool_s:8.1f} s wall  ratio {tool_s / pip_s:.2f}x"
    )
    print(
        f"  its stack step (pip's work + verification): {stack_s:8.1f} s  ratio {stack_s / pip_s:.2f}x"
    )
    print(f"  its stack smoke step:               {smoke_s:8.1f} s")
    print("goal: within 1.2x, verification included")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "ratio": tool_s / pip_s}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
