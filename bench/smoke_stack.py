"""The whole-env smoke of a serving env: every check in a fresh interpreter with every fatbin
read (how smoke ran before issue 32) vs checks forked from two interpreters of the env with the
device code of the catalogued wheels taken from the catalogue (issue 32).

    python bench/smoke_stack.py --python ENV/bin/python [--arch 12.0] [--rounds 2] [--json FILE]

Both contenders run the same probe (``sm120kit/remote/extension_probe.py``, bundled and fed
to ``python3 -`` as a host runs it) with the arguments ``invoke smoke`` sends without
``--package``: the default packages, the serving stack to discover, its JIT rules and the
catalogues' facts. The "fresh" contender is told ``"fork": false`` and is given no
per-wheel catalogue facts (``wheels``), so it starts one interpreter per check and reads every
fatbin, as before; the "forked" one runs as shipped. The order alternates between rounds
(fresh first in round 0, forked first in round 1) so load from elsewhere falls on both.

Printed per run: wall seconds, CPU seconds of the probe and every process it started
(``RUSAGE_CHILDREN``), interpreters started and checks forked; then the ratio of the medians
(fresh / forked) and whether the verdict lines (package, check, status, reason) are the same.
Made for a serving env installed by ``provision`` from a lock (its marker names the wheels);
any env works, only without the catalogue's part.
"""

from __future__ import annotations

import argparse
import difflib
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sm120kit.packages import registry  # noqa: E402
from sm120kit.packages import stack as serving  # noqa: E402
from sm120kit.plays import smoke as smoke_check  # noqa: E402
from sm120kit.remote import parse_last_json, script_bundle  # noqa: E402
from sm120kit.smoke import report  # noqa: E402


def probe_arguments(python: str, arch: str, fresh: bool) -> dict[str, Any]:
    """What `invoke smoke --python PYTHON` sends (no recipe: the default packages); `fresh`:
    the pre-issue-32 way (no forks, no per-wheel catalogue facts)."""
    names = registry.smoke_defaults()
    args = report.probe_args(
        names,
        python=python,
        arch=arch,
        timeout=smoke_check.CHECK_TIMEOUT,
        declared=smoke_check.declarations(None),
    )
    args.update(serving.probe_knowledge(names))
    if fresh:
        args["fork"] = False
        args["facts"] = {
            n: {k: v for k, v in f.items() if k != "wheels"} for n, f in args["facts"].items()
        }
    return args


def verdicts(doc: dict[str, Any]) -> list[str]:
    """One line per check: package (or stack), check, status, reason."""
    out = []
    for name, pkg in sorted((doc.get("packages") or {}).items()):
        for c in pkg.get("checks") or []:
            out.append(f"{name}\t{c['check']}\t{c['status']}\t{c['reason']}")
    for c in (doc.get("stack") or {}).get("checks") or []:
        out.append(f"stack\t{c['check']}\t{c['status']}\t{c['reason']}")
    return out


def run(args: dict[str, Any]) -> tuple[float, float, dict[str, Any]]:
    """(wall s, CPU s of the probe and its children, the probe's JSON)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-", json.dumps(args)],
        input=script_bundle(report.SCRIPT),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    doc = parse_last_json(proc.stdout)
    if doc is None:
        raise SystemExit(
            f"the probe printed no JSON (exit {proc.returncode}): {proc.stderr[-2000:]}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the serving env's python")
    parser.add_argument("--arch", default="12.0")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", help="write every run's figures here")
    opts = parser.parse_args()
    rows: list[dict[str, Any]] = []
    lines: dict[str, list[str]] = {}
    for rnd in range(opts.rounds):
        order = ["fresh", "forked"] if rnd % 2 == 0 else ["forked", "fresh"]
        for mode in order:
            wall, cpu, doc = run(probe_arguments(opts.python, opts.arch, mode == "fresh"))
            runs = doc.get("runs") or {}
            rows.append({"round": rnd, "mode": mode, "wall_s": round(wall, 1),
                         "cpu_s": round(cpu, 1), **runs})  # fmt: skip
            lines.setdefault(mode, verdicts(doc))
            print(f"round {rnd} {mode:6s} wall {wall:6.1f} s  cpu {cpu:6.1f} s  "
                  f"interpreters {runs.get('interpreters', '?')}  forked {runs.get('forked', 0)}",
                  flush=True)  # fmt: skip
    med = {m: statistics.median(r["wall_s"] for r in rows if r["mode"] == m) for m in lines}
    cpus = {m: statistics.median(r["cpu_s"] for r in rows if r["mode"] == m) for m in lines}
    print(f"median wall: fresh {med['fresh']:.1f} s, forked {med['forked']:.1f} s, "
          f"ratio {med['fresh'] / med['forked']:.2f}x")  # fmt: skip
    print(f"median CPU:  fresh {cpus['fresh']:.1f} s, forked {cpus['forked']:.1f} s, "
          f"ratio {cpus['fresh'] / cpus['forked']:.2f}x")  # fmt: skip
    same = lines["fresh"] == lines["forked"]
    print(f"verdict lines: {len(lines['forked'])}, the same: {'yes' if same else 'NO'}")
    if not same:
        for line in difflib.unified_diff(lines["fresh"], lines["forked"], "fresh", "forked"):
            print("  " + line.rstrip("\n"))
    if opts.json:
        Path(opts.json).write_text(json.dumps({"runs": rows, "same_verdicts": same}, indent=1))


if __name__ == "__main__":
    main()
