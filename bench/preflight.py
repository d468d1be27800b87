"""`invoke preflight` of one launch against a real serving env over loopback SSH, timed (issue 44).

Starts one host of the test fleet's kind (tests/support/fleet.py: a real OpenSSH sshd on
127.0.0.144 with its own HOME and work_root; the GPU is simulated by the profile's stub
``nvidia-smi``, 12.0). Each round runs the same real preflight (``invoke preflight -H pf
--python ENV --json -- python -m sglang.launch_server ARGS``) once from this checkout and,
with ``--baseline REPO`` (another checkout, e.g. main before the change), once from that one,
alternating, so both see the same machine load. Prints the median and each run's wall time
per checkout, their ratio, and the machine's load average before and after. This checkout's
first run starts the warm resolution server (sm120kit/remote/lib/warm.py); the bench ends the
servers its host started when it is done.

    python bench/preflight.py --env /path/to/env/bin/python [--baseline /work/main] [-n 5]
        [--work /tmp/pf-bench] [-- ARGS...]
    python bench/preflight.py --env VLLM_ENV_PY --baseline /work/main -n 3 -- vllm serve MODEL

ARGS default to ``--model-path tests/fixtures/models/deepseek-v32-dsa`` (a DSA model: the
longest resolution of the recorded configs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.fleet import Fleet  # noqa: E402

DEFAULT_ARGS = ["--model-path", str(REPO / "tests/fixtures/models/deepseek-v32-dsa")]


def run_once(repo: Path, env: dict[str, str], inventory: Path, python: str, args: list[str]):
    """One real `invoke preflight` from checkout `repo`: (wall seconds, exit, summary)."""
    argv = [sys.executable, "-m", "invoke", "--search-root", str(repo), "preflight", "-H", "pf"]
    argv += ["-i", str(inventory), "--python", python, "--json", "--"]
    # ARGS that start with a launcher word (``vllm serve M ...``) are given as they are: any
    # engine's launch (sm120kit/engines.py); bare ARGS are sglang's.
    argv += (
        args
        if args and not args[0].startswith("-")
        else ["python", "-m", "sglang.launch_server", *args]
    )
    t0 = time.perf_counter()
    done = subprocess.run(
        argv, cwd=repo, env=dict(env, PYTHONPATH=str(repo)), capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    try:
        host = json.loads(done.stdout)["hosts"]["pf"]
        pre = host.get("preflight") or {}
        got = f"ok={pre.get('ok')} resolved_by={pre.get('resolved_by')!r}"
    except (ValueError, KeyError, TypeError):
        got = "no JSON: " + done.stderr.strip()[-300:]
    return wall, done.returncode, got


def stop_warm_servers(work: Path) -> None:
    """End the warm resolution servers this bench's host started (sm120kit/remote/lib/warm.py:
    they idle out by themselves, later): by pid, those whose HOME lies under `work`."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes()
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        home = next((e[5:] for e in env if e.startswith(b"HOME=")), b"")
        if b"_SERVE = True" in cmd and home.startswith(str(work).encode()):
            os.kill(int(proc.name), 15)


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    launch = DEFAULT_ARGS
    if "--" in raw:
        launch = raw[raw.index("--") + 1 :]
        raw = raw[: raw.index("--")]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True, help="the serving env's python")
    parser.add_argument("--baseline", type=Path, help="another checkout to time side by side")
    parser.add_argument("-n", type=int, default=5, help="runs per checkout")
    parser.add_argument("--work", type=Path, default=Path("/tmp/sm120kit-bench-preflight"))
    args = parser.parse_args(raw)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    fleet = Fleet(args.work / "fleet", [("pf", "127.0.0.144", "rtx5090")]).start()
    env = {
        **os.environ,
        "INVOKE_SM120KIT_KNOWN_HOSTS": str(fleet.known_hosts),
        "INVOKE_SM120KIT_RUN_ROOT": str(args.work / "runs"),
    }
    checkouts = [("this", REPO)] + ([("baseline", args.baseline)] if args.baseline else [])
    times: dict[str, list[float]] = {name: [] for name, _ in checkouts}
    load0 = os.getloadavg()
    try:
        for i in range(args.n):
            for name, repo in checkouts if i % 2 == 0 else checkouts[::-1]:
                wall, rc, got = run_once(repo, env, fleet.inventory, args.env, launch)
                times[name].append(wall)
                print(f"run {i + 1} {name:8s} {wall:6.1f} s exit {rc} {got}", flush=True)
    finally:
        stop_warm_servers(args.work)
        fleet.stop()
        shutil.rmtree(args.work, ignore_errors=True)
    load1 = os.getloadavg()
    print(f"launch: {' '.join(launch)}")
    for name, _repo in checkouts:
        print(f"{name:8s} median {statistics.median(times[name]):6.1f} s over {args.n} runs")
        if name == "this" and args.n > 1:
            # The first run of this checkout starts the warm server (sglang's import paid once).
            warm = statistics.median(times[name][1:])
            print(f"{name:8s} first run {times[name][0]:6.1f} s, median of the rest {warm:6.1f} s")
    if args.baseline:
        ratio = statistics.median(times["baseline"]) / statistics.median(times["this"])
        print(f"baseline / this: {ratio:.2f}x")
    print(f"load average (1, 5, 15 min): before {load0}, after {load1}; cpus {os.cpu_count()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
