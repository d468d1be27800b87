"""The build operation (sm120kit/plays/build.py) over the sshd fleet: sources, patches, knobs,
wheel (through the wheel cache), install; and the `invoke build` task end to end.

Real parts throughout: real sshd hosts on loopback, real nvcc 13.0 compiling the sample kernel
for sm_120 (checked with NVIDIA's cuobjdump), real pip, real git repositories, a real HTTP
index on loopback. The only things simulated: the GPU (the fleet hosts cross-build with
``target_driver``/``target_arch``), and flash-attn / sgl-kernel themselves, stood in for by the
small fixture trees (their real builds need a CUDA torch and take hours).

Library-level tests give the hosts a toolkit (/usr/local/cuda) and a venv that sees the
system torch 2.13.0+cpu directly in `state`, so `ensure_package` skips the toolkit/env steps;
the `invoke build` tests go through ops.toolkit / ops.pyenv like a user's run.
"""

from __future__ import annotations

import http.server
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from sm120kit.inventory.host import Host
from sm120kit.output.progress import Progress
from sm120kit.output.report import render_build
from sm120kit.plays.build import (
    ensure_package,
    ensure_patched,
    ensure_source,
    explain,
    pack_tree,
    package_knobs,
)
from sm120kit.plays.plan import PlanOptions, prepare
from sm120kit.remote import fetch_source
from sm120kit.runner.connection import ConnectOptions
from sm120kit.runner.pool import HostContext, Runner, RunOptions
from sm120kit.runner.results import RunResult
from sm120kit.state import PyEnv, Toolkit
from tests.conftest import invoke_env, json_of, run_invoke
from tests.support.fleet import Fleet
from tests.support.sample_wheel import nvcc_available
from tests.support.venvs import make_venv

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent.parent / "fixtures"
FAKE_FA = FIXTURES / "fake_flash_attn"
SGL_TREE = FIXTURES / "sglkernel_tree"
NVCC = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"

#: A CPU-only build box that cross-builds for an R580 SM120 host (as inventory/hosts.yaml's
#: `local` host does): torch 2.13.0+cpu from PyPI (here: /opt/wheels).
CROSS = {
    "target_driver": "580.95.05",
    "target_arch": "12.0",
    "recipe.torch.index": "pypi",
    "recipe.torch.version": "2.13.0",
    "recipe.torch.cuda": "cpu",
    # The fleet's sshd sessions do not inherit this machine's pip settings: torch 2.13.0+cpu
    # is in /opt/wheels (PyPI's own 2.13.0 is the CUDA 13 build).
    "pip_args": ["--find-links", "/opt/wheels"],
}

#: The fleet host every test here talks to (its sshd; each test has its own work_root).
SSH_HOST = "gpu3"


# ------------------------------------------------------------------------------- helpers


def host(fleet: Fleet, tmp: Path, name: str, **extra: Any) -> Host:
    """A fleet sshd reached as host `name` with its own work_root under `tmp`."""
    vars_ = {
        **fleet.all_vars(fleet.by_name(SSH_HOST)),
        "work_root": str(tmp / name / "work"),
        **CROSS,
        **extra,
    }
    return Host(name, vars=vars_)


def fake_flash_attn(**knobs: str) -> dict[str, Any]:
    """Host vars that make flash-attn the fake package (a path source that compiles nothing),
    with `knobs` as its recipe knobs (FAKE_FLASH_ATTN_FAIL, FAKE_FLASH_ATTN_SLEEP)."""
    base = "recipe.packages.flash-attn."
    return {
        base + "source.kind": "path",
        base + "source.path": "tests/fixtures/fake_flash_attn",
        base + "needs_cuda_torch": False,
        **{f"{base}knobs.{name}": value for name, value in knobs.items()},
    }


def run_op(
    fleet: Fleet,
    tmp: Path,
    hosts: list[Host],
    fn: Callable[[HostContext], None],
    *,
    check_mode: bool = False,
    progress: Progress | None = None,
) -> RunResult:
    """Run `fn` on `hosts` with a fresh Runner; the controller store lives under `tmp`."""
    runner = Runner(
        RunOptions(
            run_root=str(tmp / "runs"),
            check_mode=check_mode,
            connect=ConnectOptions(known_hosts=str(fleet.known_hosts)),
        ),
        progress,
    )
    runner.settings = {"cache": {"controller": str(tmp / "controller-store")}}  # type: ignore[attr-defined]
    return runner.run("build-test", hosts, fn)


def package_task(
    name: str,
    toolkit: Toolkit,
    env: PyEnv,
    options: dict[str, Any] | None = None,
    recipes_dir: Path | None = None,
) -> Callable[[HostContext], None]:
    """ensure_package with a ready toolkit and env (the toolkit/env steps are other tests')."""
    opts = PlanOptions(
        packages=[name],
        extra=dict(options or {}),
        recipes_dir=str(recipes_dir) if recipes_dir else None,
    )

    def run(ctx: HostContext) -> None:
        state = prepare(ctx, opts)
        state.toolkit, state.env = toolkit, env
        try:
            ensure_package(ctx, state, name)
        finally:
            ctx.set(packages=state.packages)

    return run


def steps(result: RunResult, host_name: str) -> dict[str, tuple[str, str]]:
    return {s.name: (s.status, s.message) for s in result.hosts[host_name].steps}


def assert_ok(result: RunResult) -> None:
    for name, res in result.hosts.items():
        assert res.status in ("ok", "changed"), f"{name}: {res.status}: {res.error}"


@pytest.fixture(scope="session")
def toolkit() -> Toolkit:
    if not nvcc_available():
        pytest.skip("nvcc not installed")
    return system_toolkit()


def system_toolkit() -> Toolkit:
    """The system nvcc as a Toolkit, from its own `--version`."""
    out = subprocess.run([str(NVCC), "--version"], capture_output=True, text=True).stdout
    match = re.search(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)", out)
    assert match, out
    return Toolkit(
        version=match[2],
        release=match[1],
        nvcc_version=match[2],
        cuda_home=str(NVCC.parent.parent),
        nvcc=str(NVCC),
        source="system",
    )


def make_env(path: Path) -> PyEnv:
    """A venv that sees the system torch (no pip of its own: `python -m pip` finds the system's)."""
    make_venv(path)
    import torch

    return PyEnv(
        path=str(path),
        python=str(path / "bin" / "python"),
        python_version=".".join(map(str, sys.version_info[:3])),
        python_abi=f"cp{sys.version_info[0]}{sys.version_info[1]}",
        platform="linux_x86_64",
        torch_version=torch.__version__,
        torch_cuda=None,
        cxx11_abi=bool(torch._C._GLIBCXX_USE_CXX11_ABI),
    )


def git_repo(root: Path, mutate: Callable[[Path], None] | None = None) -> tuple[Path, str]:
    """A git repository shaped like sglang's: the fixture tree under sgl-kernel/, one commit."""
    shutil.copytree(SGL_TREE, root / "sgl-kernel")
    (root / "README.md").write_text("sglang stand-in (sm120kit test)\n")
    if mutate is not None:
        mutate(root / "sgl-kernel")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "fixture"], check=True)
    sha = subprocess.run(
        [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return root, sha


def sgl_vars(repo: Path, sha: str) -> dict[str, Any]:
    """Point the recipe's sgl-kernel at a local repository and let it build against torch 2.13.

    The fixture tree is a stand-in, not upstream's CMake build: no FetchContent dependencies
    (so the source is fetched by git on the host, the pre-store path) and the loader patch,
    whose context the stand-in's load_utils.py shares with upstream's, instead of the
    recipe's CMake patch (tests/real/test_sgl_kernel_real.py covers that on the real tree)."""
    base = "recipe.packages.sgl-kernel."
    return {
        base + "source.url": str(repo),
        base + "source.ref": sha,
        base + "dependencies": [],
        base + "patches": ["sgl-kernel/0001-load-utils-sm120.patch"],
        base + "torch": ">=2.0",
        base + "needs_cuda_torch": False,
    }


def sgl_recipes(tmp: Path) -> Path:
    """The repo's recipes with r570's sgl-kernel 0.3.21 entry added to r580 without its torch
    pin: the shipped r580 has one torch, its lock's 2.14.1, which 0.3.21 cannot build on, but
    this machine's CUDA 13.0 serves only r580 (tests here build a stand-in tree)."""
    root = tmp / "cfg"
    recipes = root / "recipes"
    if recipes.exists():
        return recipes
    recipes.mkdir(parents=True)
    (root / "patches").symlink_to(REPO / "patches")
    for f in (REPO / "recipes").glob("*.toml"):
        (recipes / f.name).write_text(f.read_text())
    shared = (REPO / "recipes" / "shared" / "packages.toml").read_text()
    end = "# The serving stack:"
    start = shared.index('[[packages]]\nname = "sgl-kernel"\nversion = "0.3.21"')
    stop = shared.find("\n[[packages]]", start + 1)  # the 0.3.21 entry alone
    sgl = shared[start : stop if stop != -1 else len(shared)] + "\n"
    r580 = recipes / "r580.toml"
    text = r580.read_text()
    at = text.index(end)
    r580.write_text(text[:at] + sgl.replace('torch = "==2.9.1"\n', "") + text[at:])
    return recipes


def write_inventory(tmp: Path, fleet: Fleet, hosts: dict[str, dict[str, Any]]) -> Path:
    """An inventory of fleet-backed hosts, each with its own work_root under `tmp`."""
    ssh = fleet.host_vars(fleet.by_name(SSH_HOST))
    doc = {
        "all": {
            "vars": fleet.common_vars(),
            "hosts": {
                name: {**ssh, "work_root": str(tmp / name / "work"), **CROSS, **extra}
                for name, extra in hosts.items()
            },
        }
    }
    path = tmp / "inventory" / "hosts.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def invoke(
    tmp: Path, fleet: Fleet, inventory: Path, *args: str, **extra: str
) -> subprocess.CompletedProcess[str]:
    env = invoke_env(fleet, tmp, XDG_CACHE_HOME=str(tmp / "xdg"), **extra)
    return run_invoke([*args, "-i", str(inventory), "--json"], env, timeout=1200)


@contextmanager
def http_index(files: dict[str, bytes]) -> Iterator[str]:
    """A PEP 503 simple index (and its files) served on 127.0.0.1; yields the base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = files.get(self.path.split("?")[0])
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            html = self.path.endswith("/")
            self.send_header("Content-Type", "text/html" if html else "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def sdist_of(tree: Path, top: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(str(tree), arcname=top)
    return buf.getvalue()


# ------------------------------------------------------------------------------ flash-attn


def test_fake_flash_attn_gets_its_knobs_and_is_shared_by_the_cache(
    fleet: Fleet, tmp_path: Path, toolkit: Toolkit
) -> None:
    """flash-attn from a `path` source (the fake package records the env its setup.py saw):
    FLASH_ATTN_CUDA_ARCHS=120 from the arch list, FLASH_ATTENTION_FORCE_BUILD=TRUE, MAX_JOBS and
    NVCC_THREADS from the run flags. A rerun is all "ok"; a second host takes the wheel from
    the controller store instead of building it again."""
    fa = fake_flash_attn()
    env = make_env(tmp_path / "env-a")
    options = {"max_jobs": 3, "nvcc_threads": 2, "explain": True}
    a = host(fleet, tmp_path, "fa-a", **fa)
    first = run_op(fleet, tmp_path, [a], package_task("flash-attn", toolkit, env, options))
    assert_ok(first)
    data = first.hosts["fa-a"].data
    rec = data["packages"]["flash-attn"]
    assert rec["wheel_from"] == "build"
    with zipfile.ZipFile(rec["wheel"]) as zf:
        seen = json.loads(zf.read("fake_flash_attn/_build_seen.json"))
    assert seen["FLASH_ATTN_CUDA_ARCHS"] == "120"
    assert seen["FLASH_ATTENTION_FORCE_BUILD"] == "TRUE"
    assert seen["would_download_prebuilt"] is False
    assert seen["MAX_JOBS"] == "3" and seen["NVCC_THREADS"] == "2"
    assert seen["gencode"] == ["-gencode", "arch=compute_120,code=sm_120"]
    assert seen["TORCH_CUDA_ARCH_LIST"] is None  # flash-attn ignores it: not set
    explained = {r["name"]: r for r in data["explain"]}
    assert explained["MAX_JOBS"]["reason"] == "override from --max-jobs"
    assert explained["NVCC_THREADS"]["reason"] == "override from --nvcc-threads"
    assert explained["CUDA_HOME"]["value"] == toolkit.cuda_home
    # Installed: the env imports it.
    out = subprocess.run(
        [env.python, "-c", "import fake_flash_attn, os; print(fake_flash_attn.__file__)"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and str(tmp_path / "env-a") in out.stdout, out.stderr

    rerun = run_op(fleet, tmp_path, [a], package_task("flash-attn", toolkit, env, options))
    assert rerun.hosts["fa-a"].status == "ok", steps(rerun, "fa-a")
    assert all(s == "ok" for s, _ in steps(rerun, "fa-a").values())

    # Another host, another env, parallelism changed: the same key (MAX_JOBS is not part of
    # it), so the wheel comes from the controller store.
    b = host(fleet, tmp_path, "fa-b", **fa)
    other = run_op(
        fleet,
        tmp_path,
        [b],
        package_task("flash-attn", toolkit, make_env(tmp_path / "env-b"), {"max_jobs": 1}),
    )
    assert_ok(other)
    rec_b = other.hosts["fa-b"].data["packages"]["flash-attn"]
    assert rec_b["key"] == rec["key"]
    assert rec_b["wheel_from"] == "cache:local"
    assert rec_b["sha256"] == rec["sha256"]


class Recorded(Progress):
    """Progress events as the live display would get them."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def step(self, host: str, name: str, detail: str = "") -> None:
        self.events.append((host, name, detail))


def test_failed_build_names_the_cause_and_shows_progress(
    fleet: Fleet, tmp_path: Path, toolkit: Toolkit
) -> None:
    """A build the OOM killer stops (the fake prints what ninja and nvcc print then): one line
    naming the settings to lower and the log's last line; the full log is copied into the run
    directory; nothing is installed or cached. While it ran, the progress file was polled."""
    fa = fake_flash_attn(FAKE_FLASH_ATTN_FAIL="oom", FAKE_FLASH_ATTN_SLEEP="5")
    env = make_env(tmp_path / "env")
    progress = Recorded()
    h = host(fleet, tmp_path, "oom", oom_retries=0, **fa)
    result = run_op(
        fleet,
        tmp_path,
        [h],
        package_task("flash-attn", toolkit, env, {"max_jobs": 4, "nvcc_threads": 4}),
        progress=progress,
    )
    res = result.hosts["oom"]
    assert res.status == "failed"
    assert res.error is not None and "\n" not in res.error
    assert res.error.startswith("flash-attn: build failed (oom): the build was killed by the OOM")
    assert "lower MAX_JOBS=4, NVCC_THREADS=4" in res.error
    assert "last line: RuntimeError: Error compiling objects for extension" in res.error
    assert steps(result, "oom")["wheel:flash-attn"][0] == "failed"
    assert (Path(str(result.run_dir)) / "oom-build-flash-attn.log").is_file()
    assert not (Path(env.path) / ".sm120kit").exists()
    work = tmp_path / "oom" / "work"
    assert not [p for p in (work / "build" / "flash-attn").rglob("*.whl")]
    assert not list((tmp_path / "controller-store").rglob("*.whl"))
    details = [d for h_, n, d in progress.events if n == "wheel:flash-attn" and d]
    assert any(d.startswith("[1/3] ") for d in details), progress.events


def test_oom_kill_is_retried_with_fewer_jobs(
    fleet: Fleet, tmp_path: Path, toolkit: Toolkit
) -> None:
    """A build the OOM killer stops is built again with half the jobs, as often as the host
    var oom_retries allows; the key stays the same (parallelism is not a key input), the
    retries are in the package record and the build table, and the failed run's log is kept
    as <log>.1. The fake flash-attn prints what an OOM-killed ninja build prints while
    MAX_JOBS is above 1 (no real OOM here: this machine's memory must stay usable)."""
    fa = fake_flash_attn(FAKE_FLASH_ATTN_FAIL="oom-above-1-job")
    options = {"max_jobs": 4, "nvcc_threads": 2}
    env = make_env(tmp_path / "env")
    # One retry (the default): 4 -> 2 jobs is still too many; one line says both.
    h = host(fleet, tmp_path, "oom-once", **fa)
    result = run_op(fleet, tmp_path, [h], package_task("flash-attn", toolkit, env, options))
    res = result.hosts["oom-once"]
    assert res.status == "failed"
    assert res.error is not None and "\n" not in res.error
    assert "lower MAX_JOBS=2, NVCC_THREADS=2" in res.error
    assert "(after an OOM retry with MAX_JOBS 4 -> 2)" in res.error
    # Two retries: 4 -> 2 -> 1 builds; the wheel saw MAX_JOBS=1.
    h = host(fleet, tmp_path, "oom-twice", oom_retries=2, **fa)
    progress = Recorded()
    result = run_op(
        fleet,
        tmp_path,
        [h],
        package_task("flash-attn", toolkit, env, options),
        progress=progress,
    )
    assert_ok(result)
    rec = result.hosts["oom-twice"].data["packages"]["flash-attn"]
    assert rec["wheel_from"] == "build"
    assert rec["oom_retries"] == ["MAX_JOBS 4 -> 2", "MAX_JOBS 2 -> 1"]
    with zipfile.ZipFile(rec["wheel"]) as zf:
        assert json.loads(zf.read("fake_flash_attn/_build_seen.json"))["MAX_JOBS"] == "1"
    log = Path(rec["log"])
    assert "Killed" not in log.read_text()
    assert "died due to signal 9" in Path(f"{log}.1").read_text()
    details = [d for h_, n, d in progress.events if n == "wheel:flash-attn"]
    assert "OOM; retrying: MAX_JOBS 2 -> 1" in details
    buf = io.StringIO()
    render_build(Console(file=buf, width=600), result)
    assert "OOM, retried: MAX_JOBS 4 -> 2; OOM, retried: MAX_JOBS 2 -> 1" in buf.getvalue()


def test_rebuild_replaces_the_cached_wheel_once_per_key(
    fleet: Fleet, tmp_path: Path, toolkit: Toolkit
) -> None:
    """--rebuild: a wheel installed and cached under the key is neither kept nor taken. Host
    B builds first; then, with --rebuild and B's build_host set to A, A builds and B waits
    for that wheel, dropping the one its own host store still holds; the stored entry is
    replaced, and the next run without the flag changes nothing. MAX_JOBS (not a key input,
    but recorded in the fake's wheel) tells the two wheels apart."""
    fa = fake_flash_attn()
    envs = {n: make_env(tmp_path / f"env-{n}") for n in ("rb-a", "rb-b")}
    a = host(fleet, tmp_path, "rb-a", **fa)
    b = host(fleet, tmp_path, "rb-b", **fa)

    def run(hosts: list[Host], **options: Any) -> dict[str, dict[str, Any]]:
        def op(ctx: HostContext) -> None:
            package_task("flash-attn", toolkit, envs[ctx.host.name], options)(ctx)

        result = run_op(fleet, tmp_path, hosts, op)
        assert_ok(result)
        return {
            n: {**r.data["packages"]["flash-attn"], "events": r.data.get("cache_events", [])}
            for n, r in result.hosts.items()
        }

    def stored_meta() -> dict[str, Any]:
        [meta] = (tmp_path / "controller-store").rglob("meta.json")
        return json.loads(meta.read_text())

    first = run([b], max_jobs=1)
    assert first["rb-b"]["wheel_from"] == "build"
    before = stored_meta()
    b.vars["build_host"] = "rb-a"
    again = run([a, b], max_jobs=2, rebuild=True)
    assert again["rb-a"]["wheel_from"] == "build"
    assert again["rb-b"]["wheel_from"] == "cache:local"
    assert {r["key"] for r in again.values()} == {first["rb-b"]["key"]}
    after = stored_meta()
    assert after["run_id"] != before["run_id"] and after["builder_host"] == "rb-a"
    assert after["sha256"] != before["sha256"]
    assert {r["sha256"] for r in again.values()} == {after["sha256"]}
    assert any("replaced wheel dropped from host" in e for e in again["rb-b"]["events"])
    for rec in again.values():
        with zipfile.ZipFile(rec["wheel"]) as zf:
            assert json.loads(zf.read("fake_flash_attn/_build_seen.json"))["MAX_JOBS"] == "2"
    settled = run([a, b], max_jobs=2)
    assert {r["installed"] for r in settled.values()} == {"already"}


def test_flash_attn_explain_of_the_real_recipe(fleet: Fleet, tmp_path: Path) -> None:
    """`invoke build --package flash-attn --explain` with the real recipe: the settings and
    why, in the JSON; a CPU torch cannot build it, so the host fails with that one line
    before any toolkit or env is touched."""
    inventory = write_inventory(tmp_path, fleet, {"fa": {"max_jobs": 2}})
    proc = invoke(
        tmp_path, fleet, inventory, "build", "--package", "flash-attn", "-H", "fa", "--explain"
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    fa = json_of(proc)["hosts"]["fa"]
    assert fa["status"] == "failed"
    assert "a CPU torch cannot build CUDAExtension code" in fa["error"]
    assert "\n" not in fa["error"]
    rows = {r["name"]: r for r in fa["explain"]}
    assert rows["FLASH_ATTN_CUDA_ARCHS"]["value"] == "120"
    assert rows["FLASH_ATTENTION_FORCE_BUILD"]["value"] == "TRUE"
    assert rows["TORCH_CUDA_ARCH_LIST"]["value"] == "(not used)"
    assert rows["MAX_JOBS"]["value"] == "2" and "host" in rows["MAX_JOBS"]["reason"]
    assert int(rows["NVCC_THREADS"]["value"]) >= 1
    assert "FLASH_ATTN_CUDA_ARCHS" in proc.stderr  # the table, for people
    assert not (tmp_path / "fa" / "work" / "toolkits").exists()


# ------------------------------------------------------------------------------ sgl-kernel


def test_sgl_kernel_from_git_with_the_loader_patch(
    fleet: Fleet, tmp_path: Path, toolkit: Toolkit
) -> None:
    """sgl-kernel from a git commit (a local repository shaped like sglang's): the SM120 loader
    patch "applies" to a copy of the pristine source (fetched by the very commands a check-mode
    run listed), then is "already applied" on a rerun;
    the CMake defines come from the arch list (explain), and a plan shows the exact build."""
    repo, sha = git_repo(tmp_path / "sglang")
    sk = host(fleet, tmp_path, "sk", **sgl_vars(repo, sha))
    opts = PlanOptions(packages=["sgl-kernel"], recipes_dir=str(sgl_recipes(tmp_path)))

    def source_and_patch(ctx: HostContext) -> None:
        state = prepare(ctx, opts)
        src = ensure_source(ctx, state, "sgl-kernel")
        patched = ensure_patched(ctx, state, "sgl-kernel", src)
        explain(ctx, state, "sgl-kernel", package_knobs(state, "sgl-kernel"))
        ctx.set(source=src.path, digest=src.digest, tree=patched.tree, patches=patched.patches)

    shown = run_op(fleet, tmp_path, [sk], source_and_patch, check_mode=True)
    first = run_op(fleet, tmp_path, [sk], source_and_patch)
    assert_ok(first)
    data = first.hosts["sk"].data
    assert data["digest"] == f"git:{sha}"
    # The source's Steps (ops/build_source.source_steps): plan listed what provision ran.
    [planned] = [s.commands for s in shown.hosts["sk"].steps if s.name == "source:sgl-kernel"]
    [ran] = [s.commands for s in first.hosts["sk"].steps if s.name == "source:sgl-kernel"]
    assert (
        planned == ran and "# remote/fetch_source.py" in ran[-1] and f'"commit": "{sha}"' in ran[-1]
    )
    assert steps(first, "sk")["source:sgl-kernel"][0] == "changed"
    assert steps(first, "sk")["patch:sgl-kernel"][0] == "changed"
    assert [(p["name"], p["state"]) for p in data["patches"]] == [
        ("0001-load-utils-sm120.patch", "applies")
    ]
    loader = "python/sgl_kernel/load_utils.py"
    patched = (Path(data["tree"]) / loader).read_text()
    assert "compute_capability // 10 == 12" in patched
    # The fetched source stays pristine: identical to the commit's file.
    assert (Path(data["source"]) / loader).read_text() == (SGL_TREE / loader).read_text()
    defines = {r["name"]: r["value"] for r in data["explain"]}
    assert defines["-Ccmake.define.ENABLE_BELOW_SM90=OFF"] == "OFF"
    # This recipe copy lists only the loader patch: no patch adds SGL_KERNEL_ONLY_ARCHS, so it
    # is not passed and the settings say the build is upstream's (packages/sgl_kernel.py).
    assert defines["-Ccmake.define.SGL_KERNEL_ONLY_ARCHS"] == "(not set)"
    assert not any("SGL_KERNEL_ENABLE_FA3=" in n for n in defines)
    assert any(n.startswith("-Ccmake.define.SGL_KERNEL_COMPILE_THREADS=") for n in defines)
    assert "CMAKE_BUILD_PARALLEL_LEVEL" in defines

    second = run_op(fleet, tmp_path, [sk], source_and_patch)
    assert second.hosts["sk"].status == "ok", steps(second, "sk")
    assert [p["state"] for p in second.hosts["sk"].data["patches"]] == ["already applied"]
    assert steps(second, "sk")["patch:sgl-kernel"] == (
        "ok",
        "already applied: 0001-load-utils-sm120.patch",
    )

    # Check mode: the whole operation, nothing changed, the exact build command shown.
    env = make_env(tmp_path / "env")
    task = package_task("sgl-kernel", toolkit, env, recipes_dir=sgl_recipes(tmp_path))
    plan = run_op(fleet, tmp_path, [sk], task, check_mode=True)
    assert_ok(plan)
    by_name = {s.name: s for s in plan.hosts["sk"].steps}
    assert by_name["source:sgl-kernel"].status == "ok"
    assert by_name["patch:sgl-kernel"].status == "ok"
    wheel = by_name["wheel:sgl-kernel"]
    assert wheel.status == "changed" and wheel.message.startswith("would build sgl-kernel")
    # The build's Steps (ops/compile.plan_build): a fresh copy of the tree, then the front end.
    assert wheel.commands[0].startswith("rm -rf ") and wheel.commands[0].endswith("/work")
    assert "pip wheel --no-build-isolation" in wheel.commands[-1]
    assert "SGL_KERNEL_ONLY_ARCHS" not in wheel.commands[-1]
    assert by_name["install:sgl-kernel"].message.startswith("would install")
    assert not (Path(env.path) / ".sm120kit").exists()


def test_patch_that_does_not_apply_stops_the_build(fleet: Fleet, tmp_path: Path) -> None:
    """A tree whose load_utils.py differs where the patch expects its context: `invoke build`
    fails (exit 2) with the rejected hunk, and neither the source nor a patched copy changes."""

    def fork(tree: Path) -> None:
        path = tree / "python/sgl_kernel/load_utils.py"
        text = path.read_text()
        assert "    if compute_capability == 90:\n" in text
        path.write_text(
            text.replace("if compute_capability == 90:", "if compute_capability in (90,):")
        )

    repo, sha = git_repo(tmp_path / "fork", fork)
    inventory = write_inventory(tmp_path, fleet, {"sk2": sgl_vars(repo, sha)})
    proc = invoke(
        tmp_path,
        fleet,
        inventory,
        *("build", "--package", "sgl-kernel", "-H", "sk2"),
        INVOKE_SM120KIT_RECIPES_DIR=str(sgl_recipes(tmp_path)),
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    sk2 = json_of(proc)["hosts"]["sk2"]
    assert sk2["status"] == "failed"
    assert (
        "patch 0001-load-utils-sm120.patch does not apply to python/sgl_kernel/load_utils.py"
        in (sk2["error"])
    )
    assert "rejected hunk:" in sk2["error"] and "tree left unchanged" in sk2["error"]
    status = {s["name"]: s["status"] for s in sk2["steps"]}
    assert status["source:sgl-kernel"] == "changed" and status["patch:sgl-kernel"] == "failed"
    work = tmp_path / "sk2" / "work"
    [src] = list((work / "src").iterdir())
    loader = (src / "python/sgl_kernel/load_utils.py").read_text()
    assert loader == (repo / "sgl-kernel/python/sgl_kernel/load_utils.py").read_text()
    assert not list((work / "build").glob("sgl-kernel/tree*"))


# ------------------------------------------------------------------------- pypi sources


def test_sdist_hash_mismatch_leaves_nothing(fleet: Fleet, tmp_path: Path, toolkit: Toolkit) -> None:
    """flash-attn's sdist from an index on loopback whose listed sha256 is not the file's: the
    host fails with the mismatch and keeps nothing (no archive, no source tree). With the
    right hash the sdist is fetched, verified and unpacked; a rerun does nothing."""
    sdist = sdist_of(FAKE_FA, "flash_attn-2.8.3")
    wrong = "0" * 64
    files = {"/files/flash_attn-2.8.3.tar.gz": sdist}

    def page(sha: str) -> bytes:
        return (
            f'<a href="/files/flash_attn-2.8.3.tar.gz#sha256={sha}">flash_attn-2.8.3.tar.gz</a>'
        ).encode()

    base = "recipe.packages.flash-attn."
    with http_index(files) as url:
        files["/simple/flash-attn/"] = page(wrong)
        # The recipes pin the real PyPI sdist's sha256; "" hands the hash back to the index.
        fa = {
            base + "source.index": f"{url}/simple",
            base + "source.sha256": "",
            base + "needs_cuda_torch": False,
        }
        inventory = write_inventory(tmp_path, fleet, {"fa3": fa})
        proc = invoke(tmp_path, fleet, inventory, "build", "--package", "flash-attn", "-H", "fa3")
        assert proc.returncode == 2, proc.stderr[-2000:]
        fa3 = json_of(proc)["hosts"]["fa3"]
        assert fa3["status"] == "failed"
        assert (
            f"sha256 mismatch for {url}/files/flash_attn-2.8.3.tar.gz: expected {wrong}"
            in (fa3["error"])
        )
        work = tmp_path / "fa3" / "work"
        assert not list((work / "src").glob("*")) if (work / "src").exists() else True
        leftovers = [p for p in (work / "downloads").rglob("*") if p.is_file()]
        assert leftovers == []

        import hashlib

        right = hashlib.sha256(sdist).hexdigest()
        files["/simple/flash-attn/"] = page(right)
        h = host(fleet, tmp_path, "fa4", **fa)
        opts = PlanOptions(packages=["flash-attn"])

        def source(ctx: HostContext) -> None:
            state = prepare(ctx, opts)
            src = ensure_source(ctx, state, "flash-attn")
            ctx.set(source=src.path, digest=src.digest)

        got = run_op(fleet, tmp_path, [h], source)
        assert_ok(got)
        assert got.hosts["fa4"].data["digest"] == f"sha256:{right}"
        assert (Path(got.hosts["fa4"].data["source"]) / "setup.py").is_file()
        assert steps(got, "fa4")["source:flash-attn"][0] == "changed"
        again = run_op(fleet, tmp_path, [h], source)
        assert steps(again, "fa4")["source:flash-attn"][0] == "ok"


def test_local_tree_hash_matches_the_hosts(tmp_path: Path) -> None:
    """A `path` source is packed deterministically without build outputs, and the hash the
    controller computes is the one fetch_source computes on the host after unpacking."""
    tree = tmp_path / "pkg"
    shutil.copytree(FAKE_FA, tree)
    (tree / "build" / "lib").mkdir(parents=True)
    (tree / "build" / "lib" / "junk.o").write_bytes(b"\0")
    (tree / "fake_flash_attn.egg-info").mkdir()
    (tree / "fake_flash_attn.egg-info" / "PKG-INFO").write_text("x")
    (tree / "tool.sh").write_text("#!/bin/sh\n")
    (tree / "tool.sh").chmod(0o755)
    tar1, digest1 = pack_tree(tree, tmp_path / "out1", "pkg")
    time.sleep(1.1)
    (tree / "setup.py").touch()  # a newer mtime changes nothing
    tar2, digest2 = pack_tree(tree, tmp_path / "out2", "pkg")
    assert digest1 == digest2 and tar1.read_bytes() == tar2.read_bytes()
    with tarfile.open(tar1) as tar:
        names = tar.getnames()
    assert "setup.py" in names and "tool.sh" in names
    assert not any(n.startswith(("build/", "fake_flash_attn.egg-info")) for n in names)
    doc = fetch_source.fetch(
        {
            "kind": "path",
            "tarball": str(tar1),
            "tree_sha256": digest1,
            "dest": str(tmp_path / "dest"),
            "cache_dir": str(tmp_path / "cache"),
        }
    )
    assert doc["ok"] and doc["tree_sha256"] == digest1
    assert (tmp_path / "dest" / "tool.sh").stat().st_mode & 0o111
