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
        import nvidia  # type: ignore[import-not-found,import-untyped,unused-ignore]
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


UPSTREAM_ONLY = ("flash_ops", "flashmla_ops")


def stratum(entry: dict[str, str]) -> str | None:
    """The cost class of an FA3/FlashMLA unit: its target plus the architecture its file is
    written for (FA3's 60 `*_sm90.cu` Hopper units are far heavier than its 120 `*_sm80.cu`
    Ampere ones), e.g. "flash_ops/sm90"; "flash_ops/other" for other .cu files; None for
    host-only files (.cc/.cpp)."""
    target = target_of(entry)
    if target not in UPSTREAM_ONLY or not entry["file"].endswith(".cu"):
        return None
    m = re.search(r"_(sm\d+)\.cu$", entry["file"])
    return f"{target}/{m.group(1) if m else 'other'}"


def strata_of(entries: list[dict[str, str]]) -> dict[str, dict[str, int]]:
    """target -> stratum -> number of units, for the upstream-only targets."""
    out: dict[str, dict[str, int]] = {t: {} for t in UPSTREAM_ONLY}
    for e in entries:
        target = target_of(e)
        if target in UPSTREAM_ONLY:
            name = stratum(e) or f"{target}/host"
            out[target][name] = out[target].get(name, 0) + 1
    return out


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
    runs: list[Run],
    counts: dict[str, int],
    gen: dict[str, int],
    key: str,
    strata: dict[str, dict[str, int]] | None = None,
) -> tuple[float, float, dict[str, float]]:
    """Whole-build compile work (seconds of `key`: wall_s or cpu_s) for upstream and SM120-only.

    common_ops and spatial_ops use the measured means directly. FA3 (flash_ops) and FlashMLA
    units are split into strata (`strata`: target -> stratum -> unit count; see `stratum`);
    a stratum with a measured unit (--upstream-only-units) is costed at its measured mean.
    Host-only files (the "host" strata: .cc/.cpp, no device code) cost the model's base.
    The rest are costed by a model: each common_ops unit's sm100 (n gencodes) and
    sm_120a-only times fit t = base + per_gencode * gencodes, and a modelled unit costs the
    mean base plus its target's gencode count times the mean per-gencode cost. Units that both builds compile
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
    }
    modelled = 0
    for target in ("flash_ops", "flashmla_ops"):
        parts[target] = 0.0
        for name, n in (strata or {}).get(target, {target: counts[target]}).items():
            measured = [getattr(r, key) for r in runs if r.build == name]
            if measured:
                parts[target] += n * statistics.mean(measured)
            elif name.endswith("/host"):
                parts[target] += n * base
                modelled += n
            else:
                parts[target] += n * (base + per_gen * gen[target])
                modelled += n
    upstream = sum(parts.values())
    sm120 = (counts["common_ops_sm100_build"] + counts["spatial_ops"]) * mean("sm120")
    parts["base"], parts["per_gencode"], parts["modelled_units"] = base, per_gen, modelled
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
        "--upstream-only-units",
        default="",
        help="comma-separated FA3/FlashMLA files (a path suffix, e.g. "
        "flash_fwd_hdim128_bf16_sm90.cu) compiled with upstream's command: their stratum is "
        "then costed as measured instead of by the model",
    )
    parser.add_argument(
        "--replay", help="report from the runs in an earlier --json file; compile nothing"
    )
    parser.add_argument(
        "--resume",
        help="take the runs of an earlier --json file and compile only what it lacks",
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
    strata = strata_of(entries)
    sgl = (src / "sgl-kernel").resolve()
    runs: list[Run] = []
    if args.replay or args.resume:
        runs = [Run(**r) for r in json.loads(Path(args.replay or args.resume).read_text())["runs"]]
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
    for unit in (
        [] if args.replay else [u.strip() for u in args.upstream_only_units.split(",") if u.strip()]
    ):
        found = [e for e in entries if stratum(e) and e["file"].endswith("/" + unit.lstrip("/"))]
        if len(found) != 1:
            raise BenchError(
                f"{unit}: {len(found)} FA3/FlashMLA .cu units in {db} end with it (need one)"
            )
        e = found[0]
        jobs.append((unit, str(stratum(e)), shlex.split(e["command"]), e["directory"]))
    done = {(r.unit, r.build) for r in runs}
    skipped = [j for j in jobs if (j[0], j[1]) in done]
    if skipped:
        print(
            f"already measured in {args.resume}: " + ", ".join(f"{u} {b}" for u, b, *_ in skipped)
        )
    jobs = [j for j in jobs if (j[0], j[1]) not in done]
    lock = threading.Lock()

    def one(job: tuple[str, str, list[str], str]) -> Run:
        unit, name, argv, cwd = job
        obj = build / "sgl-units" / name.replace("/", "_") / (unit.replace("/", "_") + ".o")
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
        if "/" not in r.build:  # common_ops units: all three compiles or none
            builds.setdefault(r.unit, set()).add(r.build)
    partial = sorted(u for u, b in builds.items() if b != {"sm90", "sm100", "sm120"})
    if partial:
        print(f"left out (not all three compiles measured): {', '.join(partial)}")
    runs = [r for r in runs if r.unit not in partial]
    if not builds.keys() - set(partial):
        raise BenchError("no unit has all three compiles measured")
    print()
    print(
        f"{'unit':42s} {'upstream 2 variants':>22s} {'SM120-only':>12s} {'ratio':>7s}  peak RSS up/120 (MiB)"
    )
    for unit in dict.fromkeys(r.unit for r in runs if "/" not in r.build):
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
    upstream_only = [r for r in runs if "/" in r.build]
    if upstream_only:
        print()
        print("upstream-only units (no SM120-only counterpart), upstream's command:")
        for r in upstream_only:
            n = strata[r.build.split("/")[0]].get(r.build, 0)
            print(
                f"  {r.unit:44s} {r.build:18s} ({n} units) {r.gencodes} gencodes  wall "
                f"{r.wall_s:7.1f} s  cpu {r.cpu_s:7.1f} s  peak RSS {r.max_rss_kb / 1024:7.0f} MiB"
            )
    print()
    result: dict[str, object] = {
        "strata": strata,
        "runs": [asdict(r) for r in runs],
        "counts": counts,
        "gencodes": gen,
    }
    total_upstream_only = sum(sum(v.values()) for v in strata.values())
    for key in ("cpu_s", "wall_s"):
        upstream, sm120, parts = project(runs, counts, gen, key, strata)
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
            f"  FA3/FlashMLA: {total_upstream_only - int(parts['modelled_units'])} "
            f"units costed from measured strata, {int(parts['modelled_units'])} by the model "
            f"t = {parts['base']:.1f} s + {parts['per_gencode']:.1f} s x gencodes "
            f"(fitted from the measured units' sm100 and sm_120a-only {key[:-2]} times; "
            "host-only files at the base)"
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
