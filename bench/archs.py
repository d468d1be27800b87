"""nvcc time for one arch (12.0) vs flash-attn's default arch list (80;90;100;120).

Compiles the sample kernel's .cu (examples/minikernel/csrc/add_one.cu) with real nvcc, once
per arch list per round, alternating the two lists so that load on the machine hits both
alike; reports each list's median and the ratio. This is what FLASH_ATTN_CUDA_ARCHS=120
saves per compile unit (docs/stack-facts.md section 4: roughly by the number of archs dropped).

    python bench/archs.py [--reps 5] [--nvcc PATH] [--source FILE] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "examples" / "minikernel" / "csrc" / "add_one.cu"
LISTS = {"12.0": ["120"], "80;90;100;120": ["80", "90", "100", "120"]}


def find_nvcc() -> str:
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return str(Path(os.environ[var]) / "bin" / "nvcc")
    return shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"


def compile_once(nvcc: str, source: Path, sms: list[str], out: Path) -> float:
    """Seconds for one `nvcc -c` of `source` with one -gencode per SM (as flash-attn does)."""
    gencode = [f"-gencode=arch=compute_{sm},code=sm_{sm}" for sm in sms]
    cmd = [
        nvcc,
        "-c",
        str(source),
        "-o",
        str(out),
        "-O3",
        "-std=c++17",
        "-Xcompiler",
        "-fPIC",
        f"-I{source.parent}",
        *gencode,
    ]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="rounds (each compiles both lists)")
    parser.add_argument("--nvcc", default=find_nvcc())
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    if not Path(args.nvcc).exists():
        print(f"nvcc not found at {args.nvcc}", file=sys.stderr)
        return 2
    times: dict[str, list[float]] = {name: [] for name in LISTS}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "k.o"
        compile_once(args.nvcc, args.source, ["120"], out)  # warm the page cache, not counted
        for rep in range(args.reps):
            # Alternate which list goes first so drift in machine load favours neither.
            order = list(LISTS) if rep % 2 == 0 else list(reversed(LISTS))
            for name in order:
                times[name].append(compile_once(args.nvcc, args.source, LISTS[name], out))
    medians = {name: statistics.median(values) for name, values in times.items()}
    ratio = medians["80;90;100;120"] / medians["12.0"]
    version = subprocess.run([args.nvcc, "--version"], capture_output=True, text=True).stdout
    doc = {
        "source": str(
            args.source.relative_to(REPO) if args.source.is_relative_to(REPO) else args.source
        ),
        "nvcc": next((ln for ln in version.splitlines() if "release" in ln), "nvcc ?").strip(),
        "reps": args.reps,
        "seconds": {name: [round(v, 3) for v in values] for name, values in times.items()},
        "median_s": {name: round(v, 3) for name, v in medians.items()},
        "ratio_4_archs_over_1": round(ratio, 2),
    }
    if args.json:
        print(json.dumps(doc))
    else:
        print(f"{doc['nvcc']}; {doc['source']}; {args.reps} alternating rounds")
        for name, median in doc["median_s"].items():
            print(f"  arch list {name:<15} median {median:7.3f} s   {doc['seconds'][name]}")
        print(f"  ratio (80;90;100;120) / (12.0): {doc['ratio_4_archs_over_1']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
