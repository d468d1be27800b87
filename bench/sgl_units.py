"""Compile work of real sgl-kernel 0.3.21 units: upstream's default build vs the SM120-only build.

Configures the real sgl-kernel CMake tree offline (every FetchContent dependency from a local
source tree), reads the exact compile commands from compile_commands.json, and compiles K
common_ops units three ways, one at a time:

- upstream `common_ops_sm90_build` (fast math) with every gencode the CMakeLists adds,
- upstream `common_ops_sm100_build` (precise math) with the same gencodes,
- SM120-only: the sm100 command with its -gencode flags replaced by the single
  `-gencode=arch=compute_120a,code=sm_120a` (the loader picks `sm100/` on a 12.x GPU, so the
  SM120-only build needs that one variant for that one arch).

For each compile it prints wall time, CPU time (user + sys of nvcc and everything it ran) and
peak RSS (os.wait4), then projects the whole build's compile work for both builds from the
unit counts and gencode counts in compile_commands.json (see `project` for the model).

Memory: one compile of the default CUTLASS unit (nvfp4_scaled_mm_kernels.cu) had a cicc of
7.5-8.1 GB RSS; keep --jobs x 8 GB well inside the machine's free memory.

The source location is required: `--sources DIR` or SM120KIT_REAL_SOURCES, either a directory
whose `src/` holds `sgl-kernel/` and its dependency trees or that `src/` itself. Needs CMake >=
3.26 and Ninja on PATH (or --cmake), nvcc 13 (--nvcc or CUDA_HOME), torch importable by this
Python (the CPU build is enough to configure), libnuma headers, and the cuBLAS/cuSPARSE/
cuSOLVER/cuRAND/NVRTC headers (--cuda-extra-include; found in this Python's nvidia/cu13/include
when the nvidia-* wheels are installed there).

    python bench/sgl_units.py --sources DIR [--units a.cu,b.cu] [--threads 1]
        [--build-dir DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

# One small unit, the unit measured before (activation.cu), one CUTLASS-heavy unit (CUTLASS 3.x
# block-scaled GEMM for sm_100a/sm_120a), relative to sgl-kernel/.
DEFAULT_UNITS = (
    "csrc/speculative/packbit.cu",
    "csrc/elementwise/activation.cu",
    "csrc/gemm/nvfp4_scaled_mm_kernels.cu",
)
SM120_GENCODE = "-gencode=arch=compute_120a,code=sm_120a"
GOAL = 10.0

# FetchContent names (upper-cased by CMake, dashes kept) -> directory in the source bundle.
FETCH_DIRS = {
    "REPO-CUTLASS": "cutlass",
    "REPO-DEEPGEMM": "deepgemm",
    "REPO-FMT": "fmt",
    "REPO-TRITON": "triton",
    "REPO-FLASHINFER": "flashinfer",
    "REPO-FLASH-ATTENTION": "sgl-attn",
    "REPO-MSCCLPP": "mscclpp",
    "REPO-FAST-HADAMARD-TRANSFORM": "fast-hadamard-transform",
    "REPO-FLASHMLA": "flashmla",
    "JSON": "json",
    "NANOBIND": "nanobind",
    "DLPACK": "dlpack",
}


class BenchError(Exception):
    """A problem with the inputs, reported as one line."""


@dataclass
class Run:
    """One compile: what was built and what it cost."""

    unit: str
    build: str
    gencodes: int
    wall_s: float
    cpu_s: float
    max_rss_kb: int


def find_sources(arg: str | None) -> Path:
    """The bundle's src/ directory, from --sources or SM120KIT_REAL_SOURCES (required)."""
    raw = arg or os.environ.get("SM120KIT_REAL_SOURCES")
    if not raw:
        raise BenchError("no sources: pass --sources DIR or set SM120KIT_REAL_SOURCES")
    root = Path(raw).resolve()
    for cand in (root, root / "src"):
        if (cand / "sgl-kernel" / "CMakeLists.txt").is_file():
            return cand
    raise BenchError(f"{root}: no sgl-kernel/CMakeLists.txt here or under src/")


def find_nvcc(arg: str | None) -> str:
    if arg:
        return arg
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return str(Path(os.environ[var]) / "bin" / "nvcc")
    found = shutil.which("nvcc")
    return str(Path(found).resolve()) if found else "/usr/local/cuda/bin/nvcc"


def find_extra_include(arg: str | None) -> str | None:
    if arg:
        return arg
    try:
        import nvidia  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    for base in getattr(nvidia, "__path__", []):
        cand = Path(base) / "cu13" / "include"
        if (cand / "cublas_v2.h").is_file():
            return str(cand)
    return None


def configure(
    src: Path, build: Path, nvcc: str, cmake: str, extra_inc: str | None, threads: int
) -> None:
    """Configure the real tree offline, as upstream's CMake would with a CUDA build of torch.

    The defines that a CUDA torch or scikit-build-core would otherwise supply (CUDA_VERSION,
    CMAKE_CUDA_ARCHITECTURES=OFF, SKBUILD_SABI_*) are passed by hand so a CPU torch suffices.
    """
    import torch

    cuda = Path(nvcc).resolve().parent.parent
    inc = cuda / "targets" / "x86_64-linux" / "include"
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"release (\d+\.\d+)", version)
    if not m:
        raise BenchError(f"{nvcc}: cannot read the CUDA release from --version")
    xflags = "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE" + (f" -isystem {extra_inc}" if extra_inc else "")
    cmd = [
        cmake,
        "-S",
        str(src / "sgl-kernel"),
        "-B",
        str(build),
        "-G",
        "Ninja",
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DCMAKE_CUDA_COMPILER={nvcc}",
        f"-DTorch_DIR={Path(torch.__file__).parent / 'share' / 'cmake' / 'Torch'}",
        f"-DPython_EXECUTABLE={sys.executable}",
        f"-DPython3_EXECUTABLE={sys.executable}",
        "-DSKBUILD_SABI_COMPONENT=Development.SABIModule",
        "-DSKBUILD_SABI_VERSION=3.10",
        "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
        "-DFETCHCONTENT_FULLY_DISCONNECTED=ON",
        *(f"-DFETCHCONTENT_SOURCE_DIR_{name}={src / d}" for name, d in FETCH_DIRS.items()),
        "-DCMAKE_POLICY_VERSION_MINIMUM=3.5",
        f"-DCUDA_VERSION={m.group(1)}",
        "-DCMAKE_CUDA_ARCHITECTURES=OFF",
        f"-DSGL_KERNEL_COMPILE_THREADS={threads}",
        f"-DCUDA_cuda_driver_LIBRARY={cuda / 'lib64' / 'stubs' / 'libcuda.so'}",
        f"-DCMAKE_CUDA_FLAGS={xflags}",
        f"-DCMAKE_CXX_FLAGS={xflags} -isystem {inc} -isystem {inc / 'cccl'}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        raise BenchError(f"cmake configure of {src / 'sgl-kernel'} failed: {' | '.join(tail)}")


def target_of(entry: dict[str, str]) -> str:
    m = re.search(r"CMakeFiles/([^/]+)\.dir/", entry.get("output") or entry["command"])
    return m.group(1) if m else "?"


def gencodes(argv: list[str]) -> list[str]:
    return [a for a in argv if a.startswith("-gencode")]


def sm120_only(argv: list[str]) -> list[str]:
    """The same command with its gencodes replaced by sm_120a alone (at the first one's place)."""
    out: list[str] = []
    for a in argv:
        if a.startswith("-gencode"):
            if SM120_GENCODE not in out:
                out.append(SM120_GENCODE)
        else:
            out.append(a)
    return out


def measure(argv: list[str], cwd: str, unit: str, build: str, out: Path) -> Run:
    """Run one compile into `out`; wall, CPU and peak RSS of nvcc and its children (os.wait4)."""
    argv = list(argv)
    argv[argv.index("-o") + 1] = str(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = output.decode(errors="replace").strip().splitlines()[-3:]
        raise BenchError(f"{unit} ({build}): nvcc exit {proc.returncode}: {' | '.join(tail)}")
    return Run(
        unit, build, len(gencodes(argv)), wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss
    )


def project(
    runs: list[Run], counts: dict[str, int], gen: dict[str, int], key: str
) -> tuple[float, float, dict[str, float]]:
    """Whole-build compile work (seconds of `key`: wall_s or cpu_s) for upstream and SM120-only.

    common_ops and spatial_ops use the measured means directly. FA3 (flash_ops) and FlashMLA
    units were not compiled: each measured unit's sm100 (n gencodes) and sm_120a-only times
    fit t = base + per_gencode * gencodes, and those units are costed at the mean base plus
    their own gencode count times the mean per-gencode cost. Units that both builds compile
    alike (mscclpp, nanobind, deep_gemm_cpp, dlpack) are left out of both.
    """

    def mean(build: str) -> float:
        return statistics.mean(getattr(r, key) for r in runs if r.build == build)

    by_unit: dict[str, dict[str, Run]] = {}
    for r in runs:
        by_unit.setdefault(r.unit, {})[r.build] = r
    fits = []
    for b in by_unit.values():
        if "sm100" in b and "sm120" in b and b["sm100"].gencodes > 1:
            full, one = getattr(b["sm100"], key), getattr(b["sm120"], key)
            g = (full - one) / (b["sm100"].gencodes - 1)
            fits.append((one - g, g))
    base = statistics.mean(f[0] for f in fits)
    per_gen = statistics.mean(f[1] for f in fits)
    parts = {
        "common_ops_sm90_build": counts["common_ops_sm90_build"] * mean("sm90"),
        "common_ops_sm100_build": counts["common_ops_sm100_build"] * mean("sm100"),
        "spatial_ops": counts["spatial_ops"] * mean("sm100"),
        "flash_ops": counts["flash_ops"] * (base + per_gen * gen["flash_ops"]),
        "flashmla_ops": counts["flashmla_ops"] * (base + per_gen * gen["flashmla_ops"]),
    }
    upstream = sum(parts.values())
    sm120 = (counts["common_ops_sm100_build"] + counts["spatial_ops"]) * mean("sm120")
    parts["base"], parts["per_gencode"] = base, per_gen
    return upstream, sm120, parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sources", help="bundle dir or its src/ (else SM120KIT_REAL_SOURCES)")
    parser.add_argument(
        "--units", default=",".join(DEFAULT_UNITS), help="comma-separated, relative to sgl-kernel/"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="SGL_KERNEL_COMPILE_THREADS (nvcc --threads)"
    )
    parser.add_argument(
        "--build-dir", help="configure here (reused if it has compile_commands.json)"
    )
    parser.add_argument("--nvcc", help="nvcc (default: CUDA_HOME/bin/nvcc, then PATH)")
    parser.add_argument("--cmake", default=shutil.which("cmake") or "cmake")
    parser.add_argument(
        "--cuda-extra-include", help="dir with cublas_v2.h etc. (nvidia/cu13/include)"
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="compiles at once (1 for clean wall times)"
    )
    parser.add_argument("--json", help="also write the raw figures here (after every compile)")
    parser.add_argument(
        "--replay", help="report from the runs in an earlier --json file; compile nothing"
    )
    args = parser.parse_args(argv)
    try:
        return run(args)
    except BenchError as exc:
        print(f"sgl_units: {exc}", file=sys.stderr)
        return 1


def run(args: argparse.Namespace) -> int:
    src = find_sources(args.sources)
    nvcc = find_nvcc(args.nvcc)
    build = Path(args.build_dir or tempfile.mkdtemp(prefix="sgl-units-")).resolve()
    db = build / "compile_commands.json"
    if not db.is_file():
        t0 = time.perf_counter()
        configure(
            src, build, nvcc, args.cmake, find_extra_include(args.cuda_extra_include), args.threads
        )
        print(
            f"configured {src / 'sgl-kernel'} offline into {build} in {time.perf_counter() - t0:.1f} s"
        )
    entries = json.loads(db.read_text())
    counts: dict[str, int] = {}
    gen: dict[str, int] = {}
    for e in entries:
        t = target_of(e)
        counts[t] = counts.get(t, 0) + 1
        if e["file"].endswith(".cu"):
            gen[t] = max(gen.get(t, 0), len(gencodes(shlex.split(e["command"]))))
    for need in (
        "common_ops_sm90_build",
        "common_ops_sm100_build",
        "flash_ops",
        "flashmla_ops",
        "spatial_ops",
    ):
        counts.setdefault(need, 0)
        gen.setdefault(need, 0)
    print(
        "units in compile_commands.json: "
        + ", ".join(f"{t} {counts[t]} ({gen[t]} gencodes)" for t in sorted(counts) if gen.get(t))
    )
    sgl = (src / "sgl-kernel").resolve()
    runs: list[Run] = []
    if args.replay:
        runs = [Run(**r) for r in json.loads(Path(args.replay).read_text())["runs"]]
    jobs: list[tuple[str, str, list[str], str]] = []
    for unit in [] if args.replay else [u.strip() for u in args.units.split(",") if u.strip()]:
        path = str(sgl / unit)
        cmds = {}
        for e in entries:
            if e["file"] == path and target_of(e) in (
                "common_ops_sm90_build",
                "common_ops_sm100_build",
            ):
                cmds["sm90" if "sm90" in target_of(e) else "sm100"] = e
        if set(cmds) != {"sm90", "sm100"}:
            raise BenchError(f"{unit}: not a unit of both common_ops builds in {db}")
        sm100 = shlex.split(cmds["sm100"]["command"])
        if not jobs:
            print("upstream gencodes:   " + " ".join(gencodes(sm100)))
            print("SM120-only gencodes: " + " ".join(gencodes(sm120_only(sm100))))
        cwd = cmds["sm100"]["directory"]
        jobs += [
            (unit, "sm120", sm120_only(sm100), cwd),
            (unit, "sm90", shlex.split(cmds["sm90"]["command"]), cwd),
            (unit, "sm100", sm100, cwd),
        ]
    lock = threading.Lock()

    def one(job: tuple[str, str, list[str], str]) -> Run:
        unit, name, argv, cwd = job
        obj = build / "sgl-units" / name / (unit.replace("/", "_") + ".o")
        r = measure(argv, cwd, unit, name, obj)
        with lock:
            runs.append(r)
            if args.json:
                dump = {"runs": [asdict(x) for x in runs]}
                Path(args.json).write_text(json.dumps(dump, indent=2) + "\n")
            print(
                f"  {unit:42s} {name:6s} {r.gencodes} gencodes  wall {r.wall_s:7.1f} s  "
                f"cpu {r.cpu_s:7.1f} s  peak RSS {r.max_rss_kb / 1024:7.0f} MiB",
                flush=True,
            )
        return r

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for fut in [pool.submit(one, job) for job in jobs]:
            fut.result()
    builds: dict[str, set[str]] = {}
    for r in runs:
        builds.setdefault(r.unit, set()).add(r.build)
    partial = sorted(u for u, b in builds.items() if b != {"sm90", "sm100", "sm120"})
    if partial:
        print(f"left out (not all three compiles measured): {', '.join(partial)}")
    runs = [r for r in runs if r.unit not in partial]
    if not runs:
        raise BenchError("no unit has all three compiles measured")
    print()
    print(
        f"{'unit':42s} {'upstream 2 variants':>22s} {'SM120-only':>12s} {'ratio':>7s}  peak RSS up/120 (MiB)"
    )
    for unit in dict.fromkeys(r.unit for r in runs):
        b = {r.build: r for r in runs if r.unit == unit}
        up = b["sm90"].cpu_s + b["sm100"].cpu_s
        up_wall = b["sm90"].wall_s + b["sm100"].wall_s
        print(
            f"{unit:42s} {up:8.1f} s cpu {up_wall:7.1f} s wall {b['sm120'].cpu_s:6.1f} s cpu "
            f"{up / b['sm120'].cpu_s:6.1f}x  "
            f"{max(b['sm90'].max_rss_kb, b['sm100'].max_rss_kb) / 1024:.0f}/{b['sm120'].max_rss_kb / 1024:.0f}"
        )
        print(
            f"{'':42s} per variant: sm90 {b['sm90'].wall_s:.1f} s, sm100 {b['sm100'].wall_s:.1f} s wall; "
            f"sm_120a alone {b['sm120'].wall_s:.1f} s wall; sm100/sm120a {b['sm100'].wall_s / b['sm120'].wall_s:.1f}x wall"
        )
    print()
    result: dict[str, object] = {
        "runs": [asdict(r) for r in runs],
        "counts": counts,
        "gencodes": gen,
    }
    for key in ("cpu_s", "wall_s"):
        upstream, sm120, parts = project(runs, counts, gen, key)
        print(f"projected whole-build compile work ({key[:-2]} time, one compile at a time):")
        print(
            f"  upstream:   {counts['common_ops_sm90_build']} + {counts['common_ops_sm100_build']} common_ops "
            f"({parts['common_ops_sm90_build'] + parts['common_ops_sm100_build']:.0f} s) + "
            f"{counts['spatial_ops']} spatial_ops ({parts['spatial_ops']:.0f} s) + "
            f"{counts['flash_ops']} FA3 at {gen['flash_ops']} gencodes ({parts['flash_ops']:.0f} s) + "
            f"{counts['flashmla_ops']} FlashMLA at {gen['flashmla_ops']} gencodes ({parts['flashmla_ops']:.0f} s) "
            f"= {upstream:.0f} s ({upstream / 3600:.1f} h)"
        )
        print(
            f"  SM120-only: {counts['common_ops_sm100_build']} common_ops + {counts['spatial_ops']} spatial_ops "
            f"at sm_120a = {sm120:.0f} s ({sm120 / 3600:.1f} h)"
        )
        print(
            f"  FA3/FlashMLA unit model: t = {parts['base']:.1f} s + {parts['per_gencode']:.1f} s x gencodes "
            f"(fitted from the measured units' sm100 and sm_120a-only {key[:-2]} times)"
        )
        ratio = upstream / sm120
        print(
            f"  ratio {ratio:.1f}x; goal >= {GOAL:.0f}x less compile work: {'met' if ratio >= GOAL else 'NOT met'}"
        )
        result[key] = {"upstream": upstream, "sm120": sm120, "ratio": ratio, **parts}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
