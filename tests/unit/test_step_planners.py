"""Planners as tables: the env Step planner (sm120kit/ops/pyenv.env_steps, torch_sources), the
stack Step planner (sm120kit/ops/stack_steps.plan_stack: a probe of the host in, Steps out), the
source and dependency uploads (ops/build_source.source_steps, ops/deps.deps_steps), a build's
Steps (ops/compile.build_steps), the libnuma install (ops/cmake_check.numa_steps), the wheel
install and its record (ops/install.install_steps) and
build parallelism (packages/base.plan_parallelism). The env planner: what a
host's env needs in, the ops in order out. No host: the steps are what remote/make_env.py
would be sent, and what `plan` would show (sm120kit.steps.commands)."""

from __future__ import annotations

import json

import pytest

from sm120kit.ops import build_source, compile, deps, pyenv
from sm120kit.packages.base import plan_parallelism
from sm120kit.stack import stack_steps
from sm120kit.steps import commands

CU130 = "https://download.pytorch.org/whl/cu130"


def spec(torch_cuda: str = "13.0", index: str = CU130) -> pyenv.EnvSpec:
    return pyenv.EnvSpec("r580", "3.11", "2.9.1", index, torch_cuda, "/w/envs/x", ("ninja",))


#: (case, rebuild, exists, tools, the ops in order)
ENV_ROWS = [
    ("fresh env", True, False, ["ninja"], ["run", "select", "run", "install_torch", "inspect", "marker"]),
    ("env rebuilt over an old one", True, True, ["ninja"], ["remove", "run", "select", "run", "install_torch", "inspect", "marker"]),
    ("fresh env, no tools", True, False, [], ["run", "select", "install_torch", "inspect", "marker"]),
    ("only a missing tool", False, True, ["cmake"], ["run", "inspect", "marker"]),
    ("nothing to add: inspect and mark", False, True, [], ["inspect", "marker"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rebuild", "exists", "tools", "ops"), [r[1:] for r in ENV_ROWS], ids=[r[0] for r in ENV_ROWS]
)
def test_env_steps(rebuild: bool, exists: bool, tools: list[str], ops: list[str]) -> None:
    steps = pyenv.env_steps(spec(), "python3", {}, rebuild=rebuild, exists=exists, tools=tools)
    assert [s.op for s in steps] == ops
    # torch's file is chosen (or refused) before any tool goes in.
    if "select" in ops:
        assert ops.index("select") < ops.index("install_torch")
    assert len(commands(steps)) >= len(steps) - 1  # every step renders for `plan`


#: (case, torch cuda, index, extra pip args, the index arguments tried in order)
SOURCE_ROWS = [
    ("CUDA torch from its index", "13.0", CU130, [], [["--index-url", CU130]]),
    ("CUDA torch from PyPI", "13.0", "pypi", [], [[]]),
    ("CPU torch from PyPI, then the CPU index", "cpu", "pypi", [], [[], ["--extra-index-url", pyenv.CPU_INDEX]]),
    ("CPU torch from a given index", "cpu", "https://idx/cpu", [], [["--extra-index-url", "https://idx/cpu"]]),
    ("offline: the host's own arguments only", "13.0", CU130, ["--no-index"], [[]]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("cuda", "index", "extra", "want"),
    [r[1:] for r in SOURCE_ROWS],
    ids=[r[0] for r in SOURCE_ROWS],
)
def test_torch_sources(cuda: str, index: str, extra: list[str], want: list[list[str]]) -> None:
    assert pyenv.torch_sources(spec(cuda, index), extra) == want


GIB = 1024**3

#: (case, cpus, memory, nvcc threads by default, GB per thread, overrides, (jobs, threads))
PARALLEL_ROWS = [
    ("2 cores, 24 GiB, single-threaded nvcc", 2, 24 * GIB, 1, 4.0, {}, (2, 1)),
    ("64 cores, memory-bound", 64, 24 * GIB, 1, 4.0, {}, (6, 1)),
    ("flash-attn's formula: cpus // 2 and budget // 4", 64, 256 * GIB, 4, 2.25, {}, (28, 4)),
    ("threads shrink before jobs reach zero", 2, 1 * GIB, 4, 4.0, {}, (1, 1)),
    ("cpu-bound, 4 threads each", 16, 64 * GIB, 4, 4.0, {}, (4, 4)),
    ("overrides win", 16, 64 * GIB, 4, 4.0, {"jobs_override": 3, "threads_override": 2}, (3, 2)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("cpus", "mem", "threads", "gb", "over", "want"),
    [r[1:] for r in PARALLEL_ROWS],
    ids=[r[0] for r in PARALLEL_ROWS],
)
def test_plan_parallelism(
    cpus: int, mem: int, threads: int, gb: float, over: dict[str, int], want: tuple[int, int]
) -> None:
    got = plan_parallelism(cpus, mem, threads_default=threads, gb_per_thread=gb, **over)
    assert (got.jobs, got.threads) == want
    assert f"{cpus} CPUs" in got.reason


# ------------------------------------------------------------------------------ the stack

STACK_FILES = tuple(
    stack_steps.StackFile(n, v, f"{n}-{v}-py3-none-any.whl", f"https://idx/{n}.whl", s * 64,
                          n == "b", f"/w/releases/{s * 64}/{n}-{v}-py3-none-any.whl", 1000)
    for n, v, s in (("a", "1.0", "1"), ("b", "2.0", "2"))
)  # fmt: skip
UV_FILE = stack_steps.StackFile("uv", "0.13.9", "uv.whl", "https://idx/uv.whl", "9" * 64, False,
                                "/w/releases/uv/uv.whl")  # fmt: skip
STACK_FACTS = stack_steps.StackFacts(
    top="a==1.0", lock="/r/locks/a.toml", env="/w/envs/stack-a", python="/usr/bin/python3.11",
    files=STACK_FILES, uv=UV_FILE, uv_version="0.13.9", tools="/w/tools", cache="/w/cache/uv",
    cuda_home="/w/cuda-13.0", driver="580.95.05", arch="12.0", install_timeout=60,
)  # fmt: skip
ALL = [f.dest for f in STACK_FILES] + [UV_FILE.dest]
AS_LOCKED = {
    "exists": True, "works": True, "installed": {"a": "1.0", "b": "2.0"},
    "record": {"packages": {"a": {"sha256": "1" * 64}, "b": {"sha256": "2" * 64}}},
    "present": ALL, "cuda_home": "/w/cuda-13.0",
}  # fmt: skip
SYNC = ["check", "unpack", "remove", "mkdir", "requirements", "uv", "remove", "record", "pth"]
# A new env is filled as the files arrive (stage), then synced (an audit) and moved in whole.
NEW_ENV = ["unpack", "remove", "uv", "remove", "mkdir", "stage", "requirements", "uv", "rename"]
NEW_ENV += ["remove", "record", "pth"]

#: (case, probe, the ops in order, the drift)
STACK_ROWS = [
    ("fresh host: fetch all and uv, make the env beside, move it in", {"exists": False},
     ["fetch"] * 3 + NEW_ENV, ["no env yet"]),
    ("installed and matching: nothing", AS_LOCKED, [], []),
    ("installed, files gone from releases/: the env is what counts", {**AS_LOCKED, "present": []},
     [], []),
    ("drifted env: synced in place, nothing fetched",
     {**AS_LOCKED, "installed": {"b": "2.0", "x": "9"}}, SYNC,
     ["missing: a", "not in the lock: x==9"]),
    ("another file of the same version: synced",
     {**AS_LOCKED, "record": {"packages": {"a": {"sha256": "0" * 64}}}}, SYNC,
     ["another version or file: a, b"]),
    ("drifted env, one file missing in the store: that file is fetched",
     {**AS_LOCKED, "installed": {}, "present": ALL[1:]}, ["fetch", *SYNC], ["missing: a, b"]),
    ("half-made env: removed, made again", {**AS_LOCKED, "works": False},
     ["unpack", "remove", *NEW_ENV[1:]], ["the env does not work (half-made?): made again"]),
    ("only the CUDA_HOME .pth differs", {**AS_LOCKED, "cuda_home": None}, ["pth"], []),
]  # fmt: skip


@pytest.mark.parametrize(
    ("probe", "want", "drift"), [r[1:] for r in STACK_ROWS], ids=[r[0] for r in STACK_ROWS]
)
def test_stack_steps(probe: dict[str, object], want: list[str], drift: list[str]) -> None:
    plan = stack_steps.plan_stack(STACK_FACTS, probe)
    assert [s.op for s in plan.steps] == want
    assert plan.drift == drift
    assert plan.fetches + plan.host_steps == plan.steps  # the controller's first, then the host's
    if drift:
        assert plan.what.startswith("install exactly the 2 locked distributions"), plan.what
    if not want:
        assert plan.what == (
            "a==1.0: 2 distributions installed in /w/envs/stack-a as locked, CUDA_HOME /w/cuda-13.0"
        )
    assert len(commands(plan.steps)) == len(plan.steps)  # each step one line for `plan`


def test_stack_steps_render_the_exact_uv_command_lines() -> None:
    """What `plan` prints for a fresh host: the uv argv the host's install_lock runs as given
    (remote/lib/uv_sync.run_uv: its environment spelled with env -u / VAR=)."""
    plan = stack_steps.plan_stack(STACK_FACTS, {"exists": False})
    lines = commands(plan.steps)
    uv = "env -u VIRTUAL_ENV UV_CACHE_DIR=/w/cache/uv UV_NO_CONFIG=1 UV_NO_PROGRESS=1 "
    uv += "/w/tools/uv-0.13.9/uv"
    assert lines[0] == f"fetch https://idx/a.whl -> {STACK_FILES[0].dest} (sha256 {'1' * 64})"
    assert lines[2] == f"fetch https://idx/uv.whl -> /w/releases/uv/uv.whl (sha256 {'9' * 64})"
    new = "/w/envs/stack-a.sm120kit-new"
    assert lines[8] == (
        "as each of the 2 files arrives: check its sha256 against the lock (and verify each of "
        f"the 1 compiled ones for driver 580.95.05, arch 12.0), then {uv} pip install --offline "
        "--no-index --require-hashes --no-deps --no-compile-bytecode --python "
        f"{new}/bin/python -r /w/envs/stack-a.sm120kit-scratch/stage-N.txt and byte-compile its "
        "modules (then every other .py under site-packages)"
    )
    assert plan.streams
    assert not stack_steps.plan_stack(STACK_FACTS, {**AS_LOCKED, "installed": {}}).streams
    assert (
        f"{uv} venv --relocatable --python /usr/bin/python3.11 /w/envs/stack-a.sm120kit-new"
        in lines
    )
    # The stage compiled the new env: its sync audits without uv's compile pass.
    assert (
        f"{uv} pip sync --offline --no-index --require-hashes --python "
        "/w/envs/stack-a.sm120kit-new/bin/python /w/envs/stack-a.sm120kit-scratch/requirements.txt"
        " (then byte-compile what it added or replaced)" in lines
    )
    # An env synced in place (no stage) gets uv's own compile pass.
    again = commands(stack_steps.plan_stack(STACK_FACTS, {**AS_LOCKED, "installed": {}}).steps)
    assert (
        f"{uv} pip sync --offline --no-index --require-hashes --compile-bytecode --python "
        "/w/envs/stack-a/bin/python /w/envs/stack-a.sm120kit-scratch/requirements.txt" in again
    )
    assert "rm -rf /w/envs/stack-a && mv -T /w/envs/stack-a.sm120kit-new /w/envs/stack-a" in lines
    assert lines[-1] == (
        "printf '%s\\n' 'import os; os.environ.setdefault('\"'\"'CUDA_HOME'\"'\"', "
        "'\"'\"'/w/cuda-13.0'\"'\"')' > /w/envs/stack-a/lib/python*/site-packages/"
        "sm120kit_cuda_home.pth"
    )
    assert plan.cleanup == ["/w/envs/stack-a.sm120kit-scratch", "/w/envs/stack-a.sm120kit-new"]
    [record] = [s for s in plan.steps if s.op == "record"]
    assert record["packages"] == {
        "a": {"version": "1.0", "sha256": "1" * 64},
        "b": {"version": "2.0", "sha256": "2" * 64},
    }
    [req] = [s for s in plan.steps if s.op == "requirements"]
    assert req["files"] == [[f.name, f.dest, f.sha256] for f in STACK_FILES]


# ------------------------------------------------------------------------------ source and deps

SDIST = {"kind": "sdist", "package": "p", "version": "1", "sha256": "ab" * 32, "dest": "/w/src/p"}
TREE = {"kind": "path", "tree_sha256": "cd" * 32, "dest": "/w/src/t", "tarball": "/w/dl/t.tar"}

#: (case, fetch_source args, controller tarball, the ops in order)
SOURCE_ROWS = [
    ("an sdist the host fetches itself", SDIST, None, ["script"]),
    ("a tree of the controller's: uploaded, then unpacked", TREE, "/c/t.tar",
     ["mkdir", "upload", "script"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "tarball", "want"), [r[1:] for r in SOURCE_ROWS], ids=[r[0] for r in SOURCE_ROWS]
)
def test_source_steps(args: dict[str, str], tarball: str | None, want: list[str]) -> None:
    steps = build_source.source_steps(args, "/usr/bin/python3", tarball, "/w/dl", "/w/dl/t.tar")
    assert [s.op for s in steps] == want
    lines = commands(steps)
    # The script's whole argument document is shown, as the host gets it on stdin.
    assert lines[-1].startswith("/usr/bin/python3 - '{")
    assert lines[-1].endswith("# remote/fetch_source.py, program and arguments on stdin")
    assert json.loads(lines[-1].split(" - ", 1)[1].split("'  #")[0].strip("'")) == args
    if tarball:
        assert lines[:2] == ["mkdir -p /w/dl", "upload /c/t.tar -> /w/dl/t.tar"]


#: (case, [(dir, tarball, digest, dest)], the ops in order)
DEPS_ROWS = [
    ("every tree present: nothing", [], []),
    ("two trees: each uploaded, unpacked, its tarball removed",
     [("cutlass", "/c/cutlass.tar", "1" * 64, "/w/src/cutlass"),
      ("dlpack", "/c/dlpack.tar", "2" * 64, "/w/src/dlpack")],
     ["mkdir"] + ["upload", "script", "remove"] * 2),
]  # fmt: skip


@pytest.mark.parametrize(
    ("uploads", "want"), [r[1:] for r in DEPS_ROWS], ids=[r[0] for r in DEPS_ROWS]
)
def test_deps_steps(uploads: list[tuple[str, str, str, str]], want: list[str]) -> None:
    steps = deps.deps_steps(uploads, "/w/dl", "python3")
    assert [s.op for s in steps] == want
    for (directory, tarball, digest, dest), i in zip(uploads, range(1, len(steps), 3), strict=True):
        remote = f"/w/dl/{directory}-{digest[:12]}.tar"
        assert commands([steps[i]]) == [f"upload {tarball} -> {remote}"]
        assert steps[i + 1]["args"] == {
            "kind": "path", "tarball": remote, "tree_sha256": digest, "dest": dest,
            "cache_dir": "/w/dl",
        }  # fmt: skip
        assert commands([steps[i + 2]]) == [f"rm -rf {remote}"]


# ------------------------------------------------------------------------------ the build

WHERE = {"bdir": "/w/build/p", "work": "/w/build/p/work", "out": "/w/build/p/out",
         "progress": "/w/build/p/progress.json", "log": "/w/logs/build-p-k.log"}  # fmt: skip
BUILD_ARGS = {"src": "/w/build/p/work", "python": "/w/env/bin/python", "env": {"MAX_JOBS": "2"},
              "out_dir": "/w/build/p/out", "front_end": "pip"}  # fmt: skip
FC = "-Ccmake.define.FETCHCONTENT_SOURCE_DIR_CUTLASS"
COPY = ["remove", "remove", "remove", "mkdir", "copy"]

#: (case, pip args, the libcuda link, the ops in order, the pip args build_wheel gets)
BUILD_ROWS = [
    ("a plain build: fresh copy, then the front end", ["-v"], None, [*COPY, "build"], ["-v"]),
    ("the libcuda.so link after the copy", [], ("/w/build/p/work/.drv", "/usr/lib/libcuda.so.1"),
     [*COPY, "mkdir", "link", "build"], []),
    ("a dependency tree: a private copy, the define pointed at it", [f"{FC}=/w/src/cutlass-1"],
     None, [*COPY, "copy", "build"],
     [f"{FC}=/w/build/p/work/.sm120kit-deps/cutlass-1"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("pip_args", "link", "want", "given"),
    [r[1:] for r in BUILD_ROWS],
    ids=[r[0] for r in BUILD_ROWS],
)
def test_build_steps(
    pip_args: list[str], link: tuple[str, str] | None, want: list[str], given: list[str]
) -> None:
    steps = compile.build_steps(WHERE, "/w/src/p-patched", pip_args, link, BUILD_ARGS)
    assert [s.op for s in steps] == want
    assert steps[-1]["args"] == {**BUILD_ARGS, "pip_args": given}
    lines = commands(steps)
    assert lines[:3] == ["rm -rf /w/build/p/work", "rm -rf /w/build/p/out",
                         "rm -rf /w/build/p/progress.json"]  # fmt: skip
    assert (
        lines[4]
        == "rm -rf /w/build/p/work && mkdir -p /w/build/p && cp -a /w/src/p-patched /w/build/p/work"
    )
    # The front end exactly as build_wheel.py runs it (its temp out dir named by pattern).
    assert lines[-1].startswith("cd /w/build/p/work && MAX_JOBS=2 /w/env/bin/python -m pip wheel ")
    assert lines[-1].endswith("  # remote/build_wheel.py") and " ".join(given) in lines[-1]


#: (case, os id, host vars, sudo prefix, the package and the shell lines; None: no install)
NUMA_ROWS = [
    ("Ubuntu as root", "ubuntu", {}, "", ("libnuma-dev", [
        "env DEBIAN_FRONTEND=noninteractive apt-get update -qq",
        "env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libnuma-dev",
    ])),
    ("Debian through sudo -S", "debian", {}, "sudo -S -p '' ", ("libnuma-dev", [
        "sudo -S -p '' env DEBIAN_FRONTEND=noninteractive apt-get update -qq",
        "sudo -S -p '' env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libnuma-dev",
    ])),
    ("Rocky through sudo -n", "rocky", {}, "sudo -n ", ("numactl-devel", ["sudo -n dnf install -y numactl-devel"])),
    ("install_prerequisites: false", "ubuntu", {"install_prerequisites": False}, "", None),
    ("an unknown package manager", "arch", {}, "", None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("os_id", "host_vars", "sudo", "want"),
    [r[1:] for r in NUMA_ROWS],
    ids=[r[0] for r in NUMA_ROWS],
)
def test_numa_steps(
    os_id: str, host_vars: dict[str, object], sudo: str, want: tuple[str, list[str]] | None
) -> None:
    from sm120kit.builds import cmake_config as cmake_check

    planned = cmake_check.numa_steps({"os": {"id": os_id}}, host_vars, sudo)
    if want is None:
        assert planned is None
        return
    assert planned is not None
    package, steps = planned
    assert {s.op for s in steps} == {"run"}
    # The lines plan shows are the lines provision runs, one per command.
    assert (package, commands(steps)) == want


#: (case, wheel, the installed distribution the record is written for)
INSTALL_ROWS = [
    ("a built wheel", "/w/b/minikernel-0.1-cp311-cp311-linux_x86_64.whl", "minikernel"),
    ("a dashed distribution", "/w/b/flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl", "flash-attn"),
    ("no wheel yet (plan)", "<minikernel wheel>", "minikernel"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("wheel", "dist"), [r[1:] for r in INSTALL_ROWS], ids=[r[0] for r in INSTALL_ROWS]
)
def test_install_steps(wheel: str, dist: str) -> None:
    from sm120kit.ops.install import install_steps

    doc = {"package": "minikernel", "key": "k" * 64}
    steps = install_steps(
        "/w/env/bin/python",
        "/w/env",
        wheel,
        "/w/env/.sm120kit/installed/minikernel.json",
        doc,
        "python3",
    )
    assert [s.op for s in steps] == ["run", "script"]
    lines = commands(steps)
    assert lines[0].startswith(
        "/w/env/bin/python -m pip install --no-deps --force-reinstall --no-index "
    )
    # The install record is written on the host, by the script plan names, right after pip.
    assert steps[1]["name"] == "installed_dist" and steps[1]["args"]["name"] == dist
    assert steps[1]["args"]["record"].endswith("/installed/minikernel.json")
    assert "remote/installed_dist.py" in lines[1]


#: (case, toolkit and env there, torch CUDA: the configure Steps' ops)
CONFIGURE_ROWS = [
    ("a new host in plan: no toolkit or env yet", False, "13.0", []),
    ("a CUDA torch env", True, "13.0", ["script"]),
    ("a CPU torch env (a cross-build host)", True, None, ["script"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("ready", "torch_cuda", "ops"),
    [r[1:] for r in CONFIGURE_ROWS],
    ids=[r[0] for r in CONFIGURE_ROWS],
)
def test_configure_steps(ready: bool, torch_cuda: str | None, ops: list[str]) -> None:
    from sm120kit.builds import cmake_config as cmake_check
    from sm120kit.inventory.host import Host
    from sm120kit.packages.base import Knobs
    from sm120kit.state import ProvisionState, PyEnv, Toolkit

    state = ProvisionState(Host("h", vars={}), {}, None)  # type: ignore[arg-type]
    if ready:
        state.toolkit = Toolkit("13.0.2", "13.0", "13.0.88", "/cuda", "/cuda/bin/nvcc", "system")
        state.env = PyEnv("/w/env", "/w/env/bin/python", "3.11.9", "cp311", "linux_x86_64",
                          "2.9.1", torch_cuda, True)  # fmt: skip
    steps = cmake_check.configure_steps(state, Knobs({}), "/w/src/sgl-kernel")
    assert [s.op for s in steps] == ops
    if not steps:
        return
    [probe] = steps
    args = probe["args"]
    # No scratch directory and no Torch_DIR from the controller: the script makes (and
    # removes) its own and asks the env's torch, so plan shows exactly what runs.
    assert "build_dir" not in args and "Torch_DIR" not in args["defines"]
    assert args["torch_of"] == "/w/env/bin/python" and args["src"] == "/w/src/sgl-kernel"
    assert args["defines"]["CMAKE_CUDA_COMPILER"] == "/cuda/bin/nvcc"
    [line] = commands(steps)
    assert line.startswith('PATH=/cuda/bin:/w/env/bin:"$PATH" ') and "remote/cmake_probe.py" in line
