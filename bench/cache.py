"""Build+install of the sample kernel on a fresh host: cold (cache miss) vs warm (cache hit).

Starts its own two sshd hosts on 127.0.0.40-41 (tests/support/fleet.py, never the test
fleet's addresses). Both runs do the same thing through `WheelCache.obtain` and the same
controller store: upload the minikernel source tree, obtain the wheel, pip-install it into a
target dir on the host. Cold: an empty store, so the host builds the wheel with real nvcc
(sm_120, MAX_JOBS=1, through sm120kit/remote/build_wheel.py). Warm: a second fresh host, so
the wheel comes from the controller store (put, sha256 check, rename). Printed: wall time of
each, the ratio (goal: warm >= 10x faster) and the wheel bytes moved between controller and
host.

    python bench/cache.py [--json] [--keep DIR]
"""

from __future__ import annotations

import argparse
import io
import json
import posixpath
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sm120kit.cache.config import CacheConfig  # noqa: E402
from sm120kit.cache.key import KeyInputs, tree_digest  # noqa: E402
from sm120kit.cache.wheels import BuiltWheel, WheelCache  # noqa: E402
from sm120kit.inventory.host import Host  # noqa: E402
from sm120kit.runner.connection import ConnectOptions  # noqa: E402
from sm120kit.runner.pool import HostContext, Runner, RunOptions  # noqa: E402
from tests.support.fleet import fleet_of  # noqa: E402

SAMPLE = REPO / "examples" / "minikernel"
CUDA_HOME = "/usr/local/cuda"


def source_tarball() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in sorted(SAMPLE.rglob("*")):
            rel = path.relative_to(SAMPLE).as_posix()
            if rel.startswith(("build", "dist")) or ".egg-info" in rel or "__pycache__" in rel:
                continue
            if path.is_file():
                tar.add(str(path), arcname=f"minikernel/{rel}")
    return buf.getvalue()


def key_inputs() -> KeyInputs:
    nvcc = subprocess.run([f"{CUDA_HOME}/bin/nvcc", "--version"], capture_output=True, text=True)
    release = re.search(r"release (\d+\.\d+)", nvcc.stdout)
    import torch

    return KeyInputs(
        package="minikernel",
        version="0.1.0",
        source_digest=tree_digest(SAMPLE),
        arch_list=("12.0",),
        cuda_version=release[1] if release else "?",
        torch_version=torch.__version__,
        torch_cxx11_abi=bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        python_abi=f"cp{sys.version_info[0]}{sys.version_info[1]}",
        platform="linux_x86_64",
        build_env={"TORCH_CUDA_ARCH_LIST": "12.0", "MAX_JOBS": "1"},
    )


def provision_op(cache: WheelCache, inputs: KeyInputs, tarball: Path) -> Any:
    """Upload source, obtain the wheel (cache or build), pip install it: one host's run."""

    def run(ctx: HostContext) -> None:
        root = ctx.host.work_root
        src = posixpath.join(root, "src")
        with ctx.step("source"):
            ctx.run(f"mkdir -p {shlex.quote(src)}")
            ctx.put(tarball, posixpath.join(src, "minikernel.tar.gz"))
            ctx.run(f"cd {shlex.quote(src)} && tar xzf minikernel.tar.gz")

        def build() -> BuiltWheel:
            args = {
                "src": posixpath.join(src, "minikernel"),
                "python": sys.executable,
                "env": {**inputs.build_env, "CUDA_HOME": CUDA_HOME},
                "pip_args": [],
                "out_dir": posixpath.join(root, "build", "out"),
                "log": posixpath.join(root, "logs", "build-minikernel.log"),
                "front_end": "pip",
            }
            # Arguments and program travel on stdin (sm120kit.remote.run_script).
            doc = ctx.script("build_wheel", args, path=[f"{CUDA_HOME}/bin"], timeout=1800)
            if not doc.get("ok"):
                raise RuntimeError(f"build failed: {doc.get('failure')} {doc.get('log_tail')}")
            return BuiltWheel(doc["wheel"], doc["sha256"], float(doc["seconds"]), doc["log"])

        with ctx.step("wheel") as step:
            got = cache.obtain(ctx, inputs, build, posixpath.join(root, "wheels"))
            step.message = got.wheel_from
        with ctx.step("install"):
            site = posixpath.join(root, "site")
            ctx.run(
                f"{shlex.quote(ctx.host.python)} -m pip install -q --no-deps --no-index "
                f"--target {shlex.quote(site)} {shlex.quote(got.path)}"
            )
        ctx.set(wheel_from=got.wheel_from, bytes_moved=got.bytes_moved, key=got.key)

    return run


def one_run(
    fleet: Any, root: Path, host_name: str, store: Path, inputs: KeyInputs, tarball: Path
) -> dict[str, Any]:
    sim = fleet.by_name(host_name)
    host = Host(host_name, vars=fleet.all_vars(sim))
    runner = Runner(
        RunOptions(
            run_root=str(root / "runs"), connect=ConnectOptions(known_hosts=str(fleet.known_hosts))
        )
    )
    cache = WheelCache(CacheConfig(controller=str(store)), connect=runner.options.connect)
    start = time.perf_counter()
    result = runner.run("bench-cache", [host], provision_op(cache, inputs, tarball))
    wall = time.perf_counter() - start
    cache.close()
    res = result.hosts[host_name]
    if res.status not in ("ok", "changed"):
        raise SystemExit(f"{host_name}: {res.status}: {res.error} (log {res.log})")
    moved = cache.stats.get("bytes_to_hosts", 0) + cache.stats.get("bytes_from_hosts", 0)
    return {
        "host": host_name,
        "wheel_from": res.data["wheel_from"],
        "seconds": round(wall, 3),
        "steps": {s.name: round(s.seconds, 3) for s in res.steps},
        "bytes_moved": moved,
        "commands": res.data.get("commands"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--keep", help="work under this directory and keep it")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sm120kit-bench-cache-") as tmp:
        root = Path(args.keep or tmp)
        root.mkdir(parents=True, exist_ok=True)
        fleet = fleet_of(2, root / "fleet", first=40).start()
        try:
            tarball = root / "minikernel.tar.gz"
            tarball.write_bytes(source_tarball())
            inputs = key_inputs()
            store = root / "controller-store"
            cold = one_run(fleet, root, "h00", store, inputs, tarball)
            warm = one_run(fleet, root, "h01", store, inputs, tarball)
        finally:
            fleet.stop()
    doc = {"cold": cold, "warm": warm, "ratio": round(cold["seconds"] / warm["seconds"], 1)}
    if args.json:
        print(json.dumps(doc))
        return 0
    print("minikernel build+install on a fresh host (one sshd host each, loopback)")
    for name in ("cold", "warm"):
        r = doc[name]
        steps = ", ".join(f"{k} {v:.2f}s" for k, v in r["steps"].items())
        print(
            f"  {name:<5} {r['seconds']:7.2f}s  wheel_from={r['wheel_from']:<12} "
            f"bytes moved {r['bytes_moved']:>8}  ({steps})"
        )
    print(f"  warm is {doc['ratio']}x faster (goal: >= 10x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
