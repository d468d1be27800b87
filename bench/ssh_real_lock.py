"""The real lock over loopback SSH, end to end, as a new user would run it (issue 31).

Starts two hosts of the test fleet's kind (tests/support/fleet.py: a real OpenSSH sshd each,
on 127.0.0.61 and .62, with its own HOME and work_root; sshd's default MaxSessions). Only the
GPU is simulated: profile ``nogpu`` (no nvidia-smi, no driver) with host vars
``target_driver``/``target_arch`` naming an r580 RTX PRO 6000 host. The inventory names no
package vars and no ``ansible_python_interpreter`` (interpreter discovery picks it), and the
controller store and release cache start empty, so every file of the lock is downloaded by
the first host from the index and copied back to the controller store over SFTP.

Then, with the repository's own inventory rules and CLI: ``plan -H s1``, ``provision -H s1``,
the no-op ``provision -H s1``, ``provision -H s2`` (the second host, from the stores: goal 0
index bytes), ``smoke -H s1``, and a drift repair (``uv pip uninstall`` of one distribution
and ``uv pip install`` of an extra one in s1's env, outside the tool, then ``provision -H
s1``). Prints one line per step and, with ``--json FILE``, every step's figures.

    python bench/ssh_real_lock.py --work /tmp/ssh-real [--json FILE]
    python bench/ssh_real_lock.py --work /work/vllmrun --one-host --stack vllm --no-drift \
        --env-file FILE    # the vLLM stack (vllm 0.33.0), its env's python written to FILE

Needs about 30 GB under --work and the index (the real lock's 4.4 GB).
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

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.fleet import Fleet  # noqa: E402

HOSTS = [("s1", "127.0.0.61", "nogpu"), ("s2", "127.0.0.62", "nogpu")]


def write_inventory(fleet: Fleet, driver: str, arch: str, stack: str | None = None) -> Path:
    """The fleet's inventory as a new user writes it: address, port, user, key, work_root and
    the simulated GPU's target; no interpreter, no package vars; with `stack` the group's
    engine (``stack: vllm``, sm120kit/engines.py)."""
    hosts: dict[str, Any] = {}
    for h in fleet.hosts:
        hosts[h.name] = {
            "ansible_host": h.address,
            "ansible_port": fleet.port,
            "work_root": str(h.work_root),
            "target_driver": driver,
            "target_arch": arch,
        }
    common = {"ansible_user": fleet.user, "ansible_ssh_private_key_file": str(fleet.client_key)}
    group: dict[str, Any] = {"hosts": hosts}
    if stack:
        group["vars"] = {"stack": stack}
    doc = {"all": {"vars": common, "children": {"gpus": group}}}
    fleet.inventory.parent.mkdir(parents=True, exist_ok=True)
    fleet.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    return fleet.inventory


def invoke(args: list[str], env: dict[str, str]) -> tuple[int, float, str, str]:
    """One real `invoke` run: (exit, wall seconds, stdout, stderr)."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args],
        cwd=REPO, env=env, capture_output=True, text=True,
    )  # fmt: skip
    return done.returncode, time.perf_counter() - t0, done.stdout, done.stderr


def summary(name: str, rc: int, wall: float, out: str, err: str) -> dict[str, Any]:
    """The figures of one step: exit, wall, and from --json the host's steps and stack."""
    row: dict[str, Any] = {"step": name, "exit": rc, "wall_s": round(wall, 1)}
    try:
        doc = json.loads(out)
    except ValueError:
        row["stderr_tail"] = err[-2000:]
        return row
    for host, rep in (doc.get("hosts") or {}).items():
        row.setdefault("hosts", {})[host] = {
            "status": rep.get("status"),
            "error": rep.get("error"),
            "steps": {s["name"]: [s.get("status"), s.get("seconds")] for s in rep.get("steps", [])},
            "stack": {
                k: (rep.get("stack") or {}).get(k)
                for k in ("files_from", "downloaded_bytes", "sync", "timings", "smoke", "verdict")
            },
        }
    if rc != 0:
        row["stderr_tail"] = err[-2000:]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--driver", default="580.95.05")
    parser.add_argument("--arch", default="12.0")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--max-sessions",
        type=int,
        help="sshd MaxSessions on every host, and the setting ssh_max_sessions set to it",
    )
    parser.add_argument(
        "--one-host", action="store_true", help="s1's steps only (half the disk: about 15 GB)"
    )
    parser.add_argument("--stack", help="the group's engine (inventory var stack), e.g. vllm")
    parser.add_argument(
        "--env-file",
        type=Path,
        help="write s1's serving env python here (one line) as soon as provision made it",
    )
    parser.add_argument(
        "--no-drift", action="store_true", help="leave the env as provisioned (no drift repair)"
    )
    args = parser.parse_args(argv)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    hosts = HOSTS[:1] if args.one_host else HOSTS
    options = {}
    if args.max_sessions is not None:
        options = {name: f"MaxSessions {args.max_sessions}" for name, _a, _p in hosts}
    fleet = Fleet(args.work / "fleet", hosts, sshd_options=options).start()
    inventory = write_inventory(fleet, args.driver, args.arch, args.stack)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "INVOKE_SM120KIT_KNOWN_HOSTS": str(fleet.known_hosts),
        "INVOKE_SM120KIT_CACHE_CONTROLLER": str(args.work / "controller-store"),
        "INVOKE_SM120KIT_RUN_ROOT": str(args.work / "runs"),
        "SM120KIT_RELEASE_CACHE": str(args.work / "no-release-cache"),
    }
    if args.max_sessions is not None:
        env["INVOKE_SM120KIT_SSH_MAX_SESSIONS"] = str(args.max_sessions)
    inv = ["-i", str(inventory)]
    rows: list[dict[str, Any]] = []

    def step(name: str, task: list[str]) -> dict[str, Any]:
        rc, wall, out, err = invoke([*task, *inv], env)
        row = summary(name, rc, wall, out, err)
        rows.append(row)
        states = {h: r["status"] for h, r in (row.get("hosts") or {}).items()}
        print(f"{name:32s} exit {rc}  {wall:7.1f} s  {states}", flush=True)
        if rc != 0:
            print(err[-3000:], flush=True)
        return row

    try:
        rc, wall, _out, err = invoke(["plan", "-H", "s1", *inv], env)
        rows.append({"step": "plan -H s1", "exit": rc, "wall_s": round(wall, 1), "text": err})
        print(f"{'plan -H s1':32s} exit {rc}  {wall:7.1f} s", flush=True)
        step("provision -H s1", ["provision", "-H", "s1", "--json"])
        if args.env_file:
            root = fleet.by_name("s1").work_root
            made = sorted(p for p in (root / "envs").glob("stack-*/bin/python") if p.exists())
            if made:
                args.env_file.write_text(f"{made[-1]}\n")
                print(f"env: {made[-1]} (written to {args.env_file})", flush=True)
        step("no-op provision -H s1", ["provision", "-H", "s1", "--json"])
        if not args.one_host:
            step("provision -H s2 (stores)", ["provision", "-H", "s2", "--json"])
        step("smoke -H s1", ["smoke", "-H", "s1", "--json"])
        if not args.no_drift:
            drift(fleet, args.work)
            step("provision -H s1 (drift)", ["provision", "-H", "s1", "--json"])
            step("no-op provision -H s1 again", ["provision", "-H", "s1", "--json"])
    finally:
        fleet.stop()
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(r["exit"] == 0 for r in rows) else 1


def drift(fleet: Fleet, work: Path) -> None:
    """Change s1's serving env behind the tool's back with uv itself: one distribution removed
    (``idna``), one not in the lock added (``cowsay``, from the index)."""
    root = fleet.by_name("s1").work_root
    envs = sorted(p for p in (root / "envs").glob("*") if (p / "bin" / "python").exists())
    uv = sorted(p for p in root.glob("tools/uv-*/uv") if p.is_file())
    if not envs or not uv:
        print(f"drift: no env or no uv under {root}", flush=True)
        return
    py = str(envs[-1] / "bin" / "python")
    cmd = [str(uv[0]), "pip"]
    subprocess.run([*cmd, "uninstall", "-q", "--python", py, "idna"], check=True)
    subprocess.run([*cmd, "install", "-q", "--no-deps", "--python", py, "cowsay==6.1"], check=True)
    print(f"drift: idna removed, cowsay added in {envs[-1].name}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
