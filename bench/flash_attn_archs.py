"""Compile work of flash-attn units for SM120 only vs flash-attn's default arch list.

Takes the exact nvcc command of each unit from a real flash-attn build tree (the
``build.ninja`` torch's BuildExtension writes under ``build/temp.*``; an interrupted build's
tree serves), drops the compile cache wrapper, and compiles each chosen unit twice in one run:
once with the build's own gencode (``FLASH_ATTN_CUDA_ARCHS=120``: ``compute_120,code=sm_120``)
and once with the gencodes of flash-attn's default ``80;90;100;120``. The order alternates from
unit to unit so that load on the machine falls on both alike. Reports per compile the CPU
seconds (user + system of nvcc and everything it waited for: cicc, ptxas, cudafe++, the host
compiler), the wall seconds and the largest resident set of any one process of it.

Projection for the whole build: flash_attn_2_cuda has three families of units, ``flash_fwd_*``
(forward), ``flash_fwd_split_*`` (split-KV forward) and ``flash_bwd_*`` (backward); a family's
measured CPU ratio (default list / 120 only) stands for all its units, weighted by how many
units it has in the build (``--units`` should name one unit per family; a family without a
measured unit takes the mean ratio of the measured ones, and the output says so).

    python bench/flash_attn_archs.py --build-ninja <tree>/build/temp.linux-x86_64-cpython-311/build.ninja \
        [--units flash_fwd_hdim32_fp16_sm80.cu,flash_fwd_split_hdim32_fp16_sm80.cu] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_ARCHS = ["80", "90", "100", "120"]
SM120_ONLY = ["120"]
FAMILIES = ("flash_fwd_split_", "flash_bwd_", "flash_fwd_")  # longest prefix first


def family(unit: str) -> str:
    """The family prefix of a unit's file name."""
    return next((f for f in FAMILIES if Path(unit).name.startswith(f)), "other")


def read_ninja(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(variables, {unit file name: source path}) of the cuda_compile edges of `path`."""
    variables: dict[str, str] = {}
    units: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^(\w+) = (.*)$", line)
        if m:
            variables[m[1]] = m[2]
            continue
        m = re.match(r"^build (\S+): cuda_compile (\S+)$", line)
        if m:
            units[Path(m[2]).name] = m[2]
    return variables, units


def command(variables: dict[str, str], source: str, out: str, archs: list[str]) -> list[str]:
    """The build's nvcc command for `source` with `archs` as its only gencodes."""
    nvcc = shlex.split(variables["nvcc"])
    if Path(nvcc[0]).name == "sccache":
        nvcc = nvcc[1:]  # measure the compiler, not a cache hit
    post = shlex.split(variables["cuda_post_cflags"])
    kept: list[str] = []
    skip = False
    for arg in post:
        if skip:
            skip = False
            continue
        if arg == "-gencode":
            skip = True
            continue
        if arg.startswith(("-gencode=", "--generate-code")):
            continue
        kept.append(arg)
    gencode = [g for sm in archs for g in ("-gencode", f"arch=compute_{sm},code=sm_{sm}")]
    flags = shlex.split(variables["cuda_cflags"])
    return [*nvcc, *flags, "-c", source, "-o", out, *kept, *gencode]


def measure(cmd: list[str]) -> dict[str, float]:
    """CPU and wall seconds and peak RSS (MiB, largest single process) of one compile."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"compile failed ({' '.join(cmd[:3])} ...):\n{err[-3000:]}")
    return {
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "wall_s": round(wall, 1),
        "peak_rss_mib": round(usage.ru_maxrss / 1024),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-ninja", type=Path, required=True)
    parser.add_argument(
        "--units",
        default="flash_fwd_hdim32_fp16_sm80.cu,flash_fwd_split_hdim32_fp16_sm80.cu",
        help="comma-separated unit file names (one per family for the projection)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    variables, units = read_ninja(args.build_ninja)
    wanted = [u.strip() for u in args.units.split(",") if u.strip()]
    missing = [u for u in wanted if u not in units]
    if missing:
        parser.error(f"not in {args.build_ninja}: {', '.join(missing)}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="fa-archs-") as tmp:
        for i, unit in enumerate(wanted):
            order = [SM120_ONLY, DEFAULT_ARCHS] if i % 2 == 0 else [DEFAULT_ARCHS, SM120_ONLY]
            got = {}
            for archs in order:
                out = os.path.join(tmp, f"{unit}.{len(archs)}.o")
                got[";".join(archs)] = measure(command(variables, units[unit], out, archs))
                print(f"  {unit:42s} {';'.join(archs):14s} {got[';'.join(archs)]}", flush=True)
            one, full = got["120"], got[";".join(DEFAULT_ARCHS)]
            rows.append(
                {
                    "unit": unit,
                    "family": family(unit),
                    "120": one,
                    "80;90;100;120": full,
                    "cpu_ratio": round(full["cpu_s"] / one["cpu_s"], 2),
                }
            )
    counts: dict[str, int] = {}
    for unit in units:
        counts[family(unit)] = counts.get(family(unit), 0) + 1
    by_family = {r["family"]: r for r in rows}
    mean = sum(r["cpu_ratio"] for r in rows) / len(rows)
    cpu_one = cpu_full = 0.0
    assumed = []
    for fam, n in counts.items():
        r = by_family.get(fam)
        if r is None:
            assumed.append(fam)
            base = sum(x["120"]["cpu_s"] for x in rows) / len(rows)
            cpu_one, cpu_full = cpu_one + n * base, cpu_full + n * base * mean
        else:
            cpu_one += n * r["120"]["cpu_s"]
            cpu_full += n * r["80;90;100;120"]["cpu_s"]
    projected = cpu_full / cpu_one
    print()
    print(f"{'unit':42s} {'120 cpu':>9s} {'4-arch cpu':>11s} {'ratio':>6s}  peak RSS 120 / 4-arch")
    for r in rows:
        print(
            f"{r['unit']:42s} {r['120']['cpu_s']:8.1f}s {r['80;90;100;120']['cpu_s']:10.1f}s "
            f"{r['cpu_ratio']:5.2f}x  {r['120']['peak_rss_mib']} / "
            f"{r['80;90;100;120']['peak_rss_mib']} MiB"
        )
    print(
        f"units in the build by family: {counts}; projected whole-build CPU, default list / "
        f"120 only: {projected:.2f}x"
        + (f" ({', '.join(assumed)} at the measured mean ratio {mean:.2f}x)" if assumed else "")
    )
    if args.json:
        doc = {"rows": rows, "units_by_family": counts, "projected_cpu_ratio": projected}
        doc["assumed_families"] = assumed
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
