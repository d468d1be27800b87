"""The wheel cache's runs on fleet hosts (real sshd on loopback, real SFTP) with a real tiny
build: `WheelCache.obtain` driven through `Runner.run`, whose build closure writes a minimal
setuptools project into the host's work_root and runs ``python -m pip wheel`` there, counting
builds; real tinypkg wheels built with pip; stores filled with them. Shared by the wheel-cache
tests of tests/real and tests/fleet. Nothing is simulated but the GPUs, which these builds do
not use."""

from __future__ import annotations

import json
import secrets
import shlex
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sm120kit.cache.config import CacheConfig, check_store_specs
from sm120kit.cache.key import KeyInputs, compute_key
from sm120kit.cache.request import BuiltWheel
from sm120kit.cache.store import LocalStore, Store, entry_dir
from sm120kit.cache.wheels import WheelCache, cache_for
from sm120kit.inventory.host import Host
from sm120kit.runner.connection import ConnectOptions
from sm120kit.runner.pool import HostContext, Runner, RunOptions
from sm120kit.runner.results import RunResult
from tests.conftest import invoke_env

TINY_BUILD = r"""
import hashlib, json, os, subprocess, sys, time
a = json.loads(sys.argv[1])
src, out = a["src"], a["out"]
os.makedirs(os.path.join(src, "tinypkg"), exist_ok=True)
os.makedirs(out, exist_ok=True)
with open(os.path.join(src, "pyproject.toml"), "w") as fh:
    fh.write('[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
             '[project]\nname = "tinypkg"\nversion = "%s"\n' % a["version"])
with open(os.path.join(src, "tinypkg", "__init__.py"), "w") as fh:
    fh.write("VALUE = %r\n" % a["marker"])
log = os.path.join(out, "build.log")
start = time.time()
with open(log, "w") as fh:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", out, src], check=True, stdout=fh, stderr=fh)
[name] = [n for n in os.listdir(out) if n.endswith(".whl")]
path = os.path.join(out, name)
digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
print(json.dumps({"path": path, "sha256": digest, "seconds": time.time() - start, "log": log}))
"""


def tiny_inputs(**change: Any) -> KeyInputs:
    fields: dict[str, Any] = dict(
        package="tinypkg",
        version="0.1",
        source_digest="tree:" + "ab" * 32,
        arch_list=("12.0",),
        cuda_version="13.0",
        torch_version="2.13.0",
        python_abi="cp311",
        platform="linux_x86_64",
        cc_version="gcc 12",
        build_env={"TORCH_CUDA_ARCH_LIST": "12.0", "MAX_JOBS": "1"},
    )
    fields.update(change)
    return KeyInputs(**fields)


class Builds:
    """Build closures that really build on the host, counting who built what."""

    def __init__(self, delay: float = 0.0, fail: BaseException | None = None) -> None:
        self.hosts: list[str] = []
        self.delay = delay
        self.fail = fail
        self._lock = threading.Lock()

    def closure(self, ctx: HostContext, inputs: KeyInputs) -> Callable[[], BuiltWheel]:
        def build() -> BuiltWheel:
            with self._lock:
                self.hosts.append(ctx.host.name)
            if self.delay:
                time.sleep(self.delay)
            if self.fail is not None:
                raise self.fail
            root = ctx.host.work_root
            args = {
                "src": f"{root}/src/tinypkg",
                "out": f"{root}/build/tiny-{secrets.token_hex(4)}",
                "version": inputs.version,
                "marker": compute_key(inputs)[:12],
            }
            res = ctx.run(
                f"{ctx.host.python} - {shlex.quote(json.dumps(args))}",
                stdin=TINY_BUILD,
                what="tiny build",
            )
            return BuiltWheel(**json.loads(res.stdout.strip().splitlines()[-1]))

        return build


def hosts_of(fleet: Any, names: list[str], tag: str, **extra: Any) -> list[Host]:
    """Fleet hosts with a fresh work_root each (``<fleet work_root>/<tag>``)."""
    out = []
    for name in names:
        sim = fleet.by_name(name)
        vars_ = {**fleet.all_vars(sim), "work_root": str(sim.work_root / tag)}
        vars_.update(extra.get(name, {}))
        out.append(Host(name, vars=vars_))
    return out


def make_runner(fleet: Any, tmp: Path, check_mode: bool = False) -> Runner:
    return Runner(
        RunOptions(
            check_mode=check_mode,
            run_root=str(tmp / "runs"),
            connect=ConnectOptions(known_hosts=str(fleet.known_hosts), connect_retries=2),
        )
    )


def config(controller: Path | bool, **kw: Any) -> CacheConfig:
    kw.setdefault("poll_interval", 0.1)
    # A host that waits for the cache in a test fails within a minute, not two hours.
    kw.setdefault("wait_timeout", 60.0)
    return CacheConfig(
        controller=str(controller) if isinstance(controller, Path) else controller,
        stores=check_store_specs(kw.pop("stores", []), "test"),
        **kw,
    )


def obtain_run(
    fleet: Any,
    tmp: Path,
    hosts: list[Host],
    cache_conf: CacheConfig,
    inputs: KeyInputs,
    builds: Builds,
    *,
    check_mode: bool = False,
    install: bool = False,
    barrier: threading.Barrier | None = None,
    controller: LocalStore | None = None,
) -> tuple[RunResult, WheelCache]:
    """One Runner.run of `obtain` over `hosts` with its own WheelCache (one per runner);
    ``controller`` replaces the controller store built from the config."""
    runner = make_runner(fleet, tmp, check_mode)
    runner.settings = {"cache": {}}  # type: ignore[attr-defined]
    cache = WheelCache(cache_conf, connect=runner.options.connect)
    if controller is not None:
        cache.controller = controller
    runner.wheel_cache = cache  # type: ignore[attr-defined]

    def task(ctx: HostContext) -> None:
        got = cache_for(ctx.runner).obtain(
            ctx, inputs, builds.closure(ctx, inputs), f"{ctx.host.work_root}/wheels"
        )
        ctx.set(
            wheel_from=got.wheel_from,
            path=got.path,
            sha256=got.sha256,
            key=got.key,
            bytes_moved=got.bytes_moved,
        )
        if install and got.path:
            site = f"{ctx.host.work_root}/site"
            ctx.run(
                f"{ctx.host.python} -m pip install -q --no-deps --no-index --target {site} "
                f"{got.path}"
            )
            res = ctx.run(
                f"PYTHONPATH={site} {ctx.host.python} -c 'import tinypkg; print(tinypkg.VALUE)'"
            )
            ctx.set(installed_value=res.stdout.strip())

    if barrier is not None:
        # Every host looks the key up before any of them may finish a build.
        inner = task

        def task(ctx: HostContext) -> None:  # noqa: F811
            barrier.wait(timeout=60)
            inner(ctx)

    try:
        return runner.run("cache-test", hosts, task), cache
    finally:
        cache.close()


def wheel_from(result: RunResult) -> dict[str, str]:
    return {name: h.data.get("wheel_from", h.error or h.status) for name, h in result.hosts.items()}


def all_ok(result: RunResult) -> None:
    bad = {n: h.error for n, h in result.hosts.items() if h.status not in ("ok", "changed")}
    assert not bad, bad


def flip_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def wheel_in(store_root: Path, key: str) -> Path:
    [wheel] = (store_root / entry_dir(key)).glob("*.whl")
    return wheel


# ---- fleet: one build, many installs ----------------------------------------------------------


def fill_store(store: Store, wheels: dict[str, Path]) -> dict[str, str]:
    """Four entries: tinypkg 0.1 built 3 days ago, 0.2 now, and two arch variants of 0.2."""
    keys = {}
    now = time.time()
    for label, version, arch, age in (
        ("old", "0.1", "12.0", 3 * 86400),
        ("new", "0.2", "12.0", 0),
        ("a80", "0.2", "8.0", 3600),
        ("a90", "0.2", "9.0", 7200),
    ):
        inputs = tiny_inputs(version=version, arch_list=(arch,))
        key = compute_key(inputs)
        store.put(
            key,
            wheels[version],
            {
                "inputs": inputs.to_dict(),
                "builder_host": "gpu1",
                "build_seconds": 1.0,
                "log_path": "/l",
                "created": now - age,
            },
        )
        keys[label] = key
    return keys


def cli_env(tmp: Path) -> dict[str, str]:
    return invoke_env(None, tmp, XDG_CACHE_HOME=str(tmp / "xdg"))
