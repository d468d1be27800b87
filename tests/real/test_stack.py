"""The serving stack end to end on small real closures: drafting a lock from a loopback
index with pip's resolver, and `invoke provision --stack` installing it over real SSH and
locally, verified, idempotent, and refused before anything is installed when a file's
sha256 differs from the lock's.

Real parts: pip (resolver and installer), a PEP 503 index over http.server on 127.0.0.1
(tests/support/tiny_index.py), wheels pip installs, one of them carrying a real shared
object of this machine, the sshd fleet. Simulated: the target GPU and driver (host vars
``target_driver`` / ``target_arch``, as a GPU-less build box names them).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from sm120kit.stack.draft import Target, draft_lock
from sm120kit.stack.lock import load_lock
from sm120kit.stack.resolve import platform_tags
from tests.conftest import invoke_env, json_of, run_invoke
from tests.support.fleet import Fleet
from tests.support.stack_hosts import (
    release_cache_with_uv,
    stack_inventory,
    tiny_recipes,
)
from tests.support.tiny_index import (
    SYSTEM_SO,
    make_wheel,
    serve,
    sha256_of,
)

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(1200)


# The recipe's own [torch]: this [stack] is not a shared stack line, so it has no torch.


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """demo-app 1.0 -> demo-lib 2.0 (pure) and demo-native 0.1 (a cp311 manylinux wheel
    with a real .so), served on loopback."""
    files = tmp_path_factory.mktemp("index")
    assert SYSTEM_SO is not None
    make_wheel(files, "demo-app", "1.0", requires=("demo-lib==2.0", "demo-native>=0.1"))
    make_wheel(files, "demo-lib", "2.0")
    make_wheel(
        files,
        "demo-native",
        "0.1",
        tag="cp311-cp311-manylinux_2_17_x86_64",
        shared_object=SYSTEM_SO,
    )
    with serve(files) as url:
        yield files, url


def test_platform_tags_cover_every_older_manylinux() -> None:
    tags = platform_tags("manylinux_2_34_x86_64")
    assert tags[0] == "manylinux_2_34_x86_64" and "manylinux_2_5_x86_64" in tags
    assert {"manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"} <= set(tags)
    assert "manylinux_2_35_x86_64" not in tags


@pytest.mark.parametrize(
    ("filename", "glibc", "machine", "python", "why"),
    [
        ("a-1-cp311-cp311-manylinux_2_34_x86_64.whl", "2.31", "x86_64", "3.11",
         "needs glibc 2.34, host has 2.31"),
        ("a-1-cp311-cp311-manylinux2014_x86_64.whl", "2.12", "x86_64", "3.11",
         "needs glibc 2.17, host has 2.12"),
        ("a-1-cp311-cp311-manylinux_2_17_x86_64.manylinux_2_39_x86_64.whl", "2.31", "x86_64",
         "3.11", None),  # one tag that fits is enough
        ("a-1-cp312-cp312-manylinux_2_17_x86_64.whl", "2.39", "x86_64", "3.11",
         "Python cp312, host's is 3.11"),
        ("a-1-cp38-abi3-manylinux_2_17_x86_64.whl", "2.39", "x86_64", "3.13", None),
        ("a-1-cp311-cp311-manylinux_2_17_aarch64.whl", "2.39", "x86_64", "3.11",
         "machine aarch64, host is x86_64"),
        ("a-1-py3-none-any.whl", "2.5", "riscv64", "3.10", None),
        ("a-1-py2-none-any.whl", "2.39", "x86_64", "3.11", "Python py2, host's is 3.11"),
        ("a-1-cp311-cp311-manylinux_2_34_x86_64.whl", None, "", "3.11", None),  # unknown
    ],
)  # fmt: skip
def test_each_wheel_is_checked_against_the_host_before_anything_changes(
    filename: str, glibc: str | None, machine: str, python: str, why: str | None
) -> None:
    from sm120kit.ops.stack_files import tag_problems
    from sm120kit.stack.lock import LockEntry

    entry = LockEntry("a", "1", filename, "https://x/" + filename, "0" * 64, "release", True)
    got = tag_problems([entry], glibc, machine, python)
    assert got == ([f"cannot install a 1 ({filename}): {why}"] if why else [])


@pytest.mark.parametrize(
    ("url", "indexes", "refused"),
    [
        ("https://files.pythonhosted.org/packages/a.whl", ["https://files.pythonhosted.org"], False),
        ("https://files.pythonhosted.org.evil.example/a.whl", ["https://files.pythonhosted.org"], True),
        ("http://127.0.0.1:9/files/a.whl", ["http://127.0.0.1:8/"], True),
        ("https://mirror.example/a.whl", [], False),  # a lock naming no index: not judged
        ("https://pypi.nvidia.com/a/a.whl", ["https://pypi.org", "https://pypi.nvidia.com/"], False),
    ],
)  # fmt: skip
def test_a_file_is_fetched_only_from_an_index_the_lock_names(
    url: str, indexes: list[str], refused: bool
) -> None:
    from sm120kit.ops.stack_files import index_problems
    from sm120kit.remote.lib.obtain import allowed
    from sm120kit.stack.lock import LockEntry

    entry = LockEntry("a", "1", "a-1-py3-none-any.whl", url, "0" * 64, "release", False)
    assert bool(index_problems([entry], indexes)) is refused
    assert allowed(url, indexes) is not refused  # the host's own check of a download


def test_draft_locks_the_closure_with_the_index_hashes(index: Any, tmp_path: Path) -> None:
    files, url = index
    lock = draft_lock(
        "demo-app==1.0",
        python="3.11",
        platform="manylinux_2_34_x86_64",
        target=Target("580.95.05", "12.0", "3.11"),
        cache=tmp_path / "cache",
        index=url,
    )
    got = {e.name: e for e in lock.packages}
    assert sorted(got) == ["demo-app", "demo-lib", "demo-native"]
    for e in got.values():
        assert e.sha256 == sha256_of(files / e.filename)
        assert e.url.startswith(url.replace("/simple", "/files/")) and e.source == "release"
    native = got["demo-native"]
    assert native.compiled and native.size == (files / native.filename).stat().st_size
    assert native.verdict == "ok"  # a .so without device code or cudart serves any GPU
    # The tiny index lists no sizes: a pure wheel's is read from the file the wheel-owners
    # check fetched (fan-out wants every length up front).
    lib = got["demo-lib"]
    assert not lib.compiled and lib.size == (files / lib.filename).stat().st_size
    assert (tmp_path / "cache" / native.sha256 / native.filename).is_file()
    assert lock.torch == "" and lock.resolver.startswith("uv 0.13.9 pip compile")
    assert f"--default-index {url}" in lock.resolver


def test_the_draft_task_writes_a_lock_that_loads(index: Any, tmp_path: Path) -> None:
    _files, url = index
    env = invoke_env(None, tmp_path, SM120KIT_RELEASE_CACHE=str(tmp_path / "cache"))
    out = tmp_path / "locks" / "demo.toml"
    args = ["lock.draft", "--top", "demo-app==1.0", "--index", url, "--out", str(out)]
    proc = run_invoke([*args, "--driver", "580.95.05", "--arch", "12.0", "--json"], env)
    assert proc.returncode == 0, proc.stderr
    doc = json_of(proc)
    assert doc["packages"] == 3 and doc["compiled"] == 1 and doc["lock"] == str(out)
    assert doc["review"] == [] and 'top = "demo-app==1.0"' in doc["stack"]
    lock = load_lock(out)
    assert lock.target == {"driver": "580.95.05", "arch": "12.0"}
    assert out.read_text().startswith("# Lock of demo-app==1.0 for Python 3.11")
    bad = run_invoke(["lock.draft", "--top", "demo-app>=1.0", "--index", url], env)
    assert bad.returncode == 1 and "expected NAME==VERSION and nothing else" in bad.stderr


# No package vars and no provision_stack: a fleet host gets its recipe's serving stack by
# default (issue 31). Only `local` says provision_stack: true, as a user's local host would.
def test_provision_installs_the_lock_verified_and_idempotent(
    fleet: Fleet, index: Any, tmp_path: Path, uv_wheel: Path
) -> None:
    """Over SSH (gpu3) and locally: installed by uv, verified, by exactly the commands plan
    listed before, a rerun changes nothing; then drift behind the tool's back (a distribution
    added, a locked one removed, with uv itself) is repaired and reported, a half-made env is
    made again, and a corrupt file in the host's releases/ is fetched again (its copy in the
    controller store was a copy, not one linked file)."""
    recipes = tiny_recipes(tmp_path, index)
    inv = stack_inventory(fleet, tmp_path, ("gpu3", "local"))
    cache = release_cache_with_uv(tmp_path / "release-cache", uv_wheel)
    env = invoke_env(
        fleet,
        tmp_path,
        INVOKE_SM120KIT_RECIPES_DIR=str(recipes),
        SM120KIT_RELEASE_CACHE=cache,
        INVOKE_SM120KIT_CACHE_CONTROLLER=str(tmp_path / "controller-store"),
    )
    args = ["provision", "-H", "gpu3,local", "-i", str(inv), "--json"]
    planned = run_invoke(["plan", *args[1:]], env)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    first = run_invoke(args, env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "[gpu3] stack (" in first.stderr  # progress on stderr under --json too
    fetched = 0
    for name, host in json_of(first)["hosts"].items():
        steps = {s["name"]: s for s in host["steps"]}
        assert steps["stack"]["status"] == "changed", steps["stack"]
        assert "synced by uv 0.13.9 (3 added, 0 removed, 0 replaced)" in steps["stack"]["message"]
        # What plan listed is, byte for byte, what provision ran (stack/stack_steps.py).
        plan_steps = json_of(planned)["hosts"][name]["steps"]
        [shown] = [s["commands"] for s in plan_steps if s["name"] == "stack"]
        assert steps["stack"]["commands"] == shown
        # A new env: the stage compiled it, the sync audits (no uv compile pass of its own).
        assert any(" pip sync --offline --no-index --require-hashes --python " in c
                   and c.endswith(" (then byte-compile what it added or replaced)")
                   for c in shown)  # fmt: skip
        assert "env" not in steps  # nothing is built: no build env
        why = "by default" if name == "gpu3" else "host var provision_stack: true"
        assert why in steps["parts"]["message"] and "builds: none" in steps["parts"]["message"]
        stack = host["stack"]
        native = stack["packages"]["demo-native"]
        assert native["wheel_from"] == "release" and native["verdict"] == "ok"
        assert native["index"].endswith("/files") and native["checked"].startswith("sha256")
        py = Path(stack["env"]) / "bin" / "python"
        assert py.exists() and (tmp_path / "work" / name).as_posix() in stack["env"]
        # Nothing of the install is left beside the env: no marker, no progress file.
        assert sorted(p.name for p in Path(stack["env"]).parent.glob(".*")) == []
        # Byte-compiled as uv --compile-bytecode would: every module under site-packages.
        [site] = Path(stack["env"]).glob("lib/python*/site-packages")
        modules = [m for m in site.rglob("*.py") if "__pycache__" not in m.parts]
        assert modules and all(Path(importlib.util.cache_from_source(str(m))).is_file()
                               for m in modules)  # fmt: skip
        assert (tmp_path / "work" / name / "tools" / "uv-0.13.9" / "uv").is_file()
        fetched += stack["downloaded_bytes"]
        # The JIT packages' CUDA_HOME: the toolkit step's, set by a .pth file of the env.
        [pth] = Path(stack["env"]).glob("lib/python*/site-packages/sm120kit_cuda_home.pth")
        home = host["toolkit"]["cuda_home"]
        assert pth.read_text() == f"import os; os.environ.setdefault('CUDA_HOME', {home!r})\n"
        smoke = steps["stack smoke"]
        assert smoke["status"] == "ok" and smoke["message"].startswith("checked nothing")
    assert fetched > 0  # one of the two downloaded, the other took the wheel stores' copies
    again = run_invoke(args, env)
    assert again.returncode == 0, again.stdout + again.stderr
    for host in json_of(again)["hosts"].values():
        assert host["changed"] == 0
        step = next(s for s in host["steps"] if s["name"] == "stack")
        assert step["status"] == "ok" and "3 distributions installed" in step["message"]
        smoke = next(s for s in host["steps"] if s["name"] == "stack smoke")
        assert smoke["status"] == "ok" and smoke["message"].startswith("reused the verdict of")
        assert "downloaded_bytes" not in host["stack"]  # nothing fetched

    # Drift on gpu3, made with uv itself: one distribution added, one locked one removed.
    work = tmp_path / "work" / "gpu3"
    stack_env = Path(json_of(again)["hosts"]["gpu3"]["stack"]["env"])
    extra = make_wheel(tmp_path / "extra", "demo-extra", "9.0")
    uv = [str(work / "tools" / "uv-0.13.9" / "uv"), "pip"]
    where = ["--python", str(stack_env / "bin" / "python"), "--offline", "-q"]
    uv_env = {"UV_CACHE_DIR": str(tmp_path / "uv-cache"), "PATH": "/usr/bin:/bin"}
    subprocess.run([*uv, "install", *where, "--no-deps", str(extra)], check=True, env=uv_env)
    subprocess.run([*uv, "uninstall", *where, "demo-lib"], check=True, env=uv_env)
    # On local: an env cut off while it was made, and a corrupt file in releases/.
    local = tmp_path / "work" / "local"
    local_env = Path(json_of(again)["hosts"]["local"]["stack"]["env"])
    shutil.rmtree(local_env)
    (local_env / "bin").mkdir(parents=True)  # no pyvenv.cfg, no python: half-made
    [native_file] = local.glob("releases/*/demo_native-*.whl")
    native_file.write_bytes(b"not the lock's file")
    repaired = run_invoke(args, env)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    hosts = json_of(repaired)["hosts"]
    msg = next(s for s in hosts["gpu3"]["steps"] if s["name"] == "stack")["message"]
    assert "not in the lock: demo-extra==9.0" in msg and "missing: demo-lib" in msg
    assert hosts["gpu3"]["stack"]["sync"]["removed"] == ["demo-extra==9.0"]
    assert hosts["gpu3"]["stack"]["sync"]["added"] == ["demo-lib==2.0"]
    msg = next(s for s in hosts["local"]["steps"] if s["name"] == "stack")["message"]
    assert "half-made" in msg and "fetched again: demo-native" in msg, msg
    assert sha256_of(native_file) == sha256_of(next(index[0].glob("demo_native-*.whl")))
    assert native_file.stat().st_nlink == 1  # the host's copy, not the store's file
    assert not list(local_env.parent.glob("*.sm120kit-new"))
    last = run_invoke(args, env)
    assert last.returncode == 0, last.stdout + last.stderr
    assert all(h["changed"] == 0 for h in json_of(last)["hosts"].values())

    # An installed shared object changed in place (one byte; same size, same mtime): the
    # fast path cannot see it; --recheck hashes the catalogued ones, names it and reinstalls
    # its distribution; a second --recheck is a no-op.
    [so] = [p for p in stack_env.glob("lib/python*/site-packages/**/*.so*") if p.is_file()]
    before, st = so.read_bytes(), so.stat()
    # uv linked it from its cache: the edit below changes uv's cache entry too (the cause the
    # repair must undo).
    assert st.st_nlink >= 2
    data = bytearray(before)
    data[len(data) // 2] ^= 0xFF
    with so.open("r+b") as fh:  # in place: the same inode (a hard link to uv's cache, if any)
        fh.write(data)
    os.utime(so, ns=(st.st_atime_ns, st.st_mtime_ns))
    gpu3 = ["provision", "-H", "gpu3", "-i", str(inv), "--json"]
    fast = run_invoke(gpu3, env)
    assert fast.returncode == 0 and json_of(fast)["hosts"]["gpu3"]["changed"] == 0
    rechecked = run_invoke([*gpu3, "--recheck"], env)
    assert rechecked.returncode == 0, rechecked.stdout + rechecked.stderr
    step = next(s for s in json_of(rechecked)["hosts"]["gpu3"]["steps"] if s["name"] == "stack")
    rel = so.relative_to(next(stack_env.glob("lib/python*/site-packages"))).as_posix()
    assert (
        step["status"] == "changed" and f"changed in place: {rel} (demo-native)" in step["message"]
    )
    assert any("--reinstall-package demo-native" in c for c in step["commands"])
    assert so.read_bytes() == before
    assert so.stat().st_nlink == 1  # the repaired copy no longer shares its inode with the cache
    assert any(re.search(r"uv cache clean demo-native\b", c) for c in step["commands"])
    still = run_invoke([*gpu3, "--recheck"], env)
    assert still.returncode == 0 and json_of(still)["hosts"]["gpu3"]["changed"] == 0


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda t: t.replace("manylinux_2_17_x86_64.whl", "manylinux_2_99_x86_64.whl"),
         "cannot install demo-native 0.1 (demo_native-0.1-cp311-cp311-manylinux_2_99_x86_64.whl):"
         " needs glibc 2.99, host has "),
    ],
)  # fmt: skip
def test_plan_and_provision_refuse_a_file_the_host_cannot_take_before_any_change(
    fleet: Fleet, index: Any, tmp_path: Path, edit: Callable[[str], str], says: str
) -> None:
    """A locked wheel whose tag needs a newer glibc than the host's (the host's real glibc,
    named in the lock file by a changed file name), and a URL outside the lock's indexes: plan
    says so and provision stops before it fetches or makes anything."""
    recipes = tiny_recipes(tmp_path, index, edit=edit)
    inv = stack_inventory(fleet, tmp_path, ("gpu7",))
    env = invoke_env(fleet, tmp_path, INVOKE_SM120KIT_RECIPES_DIR=str(recipes))
    for task in ("plan", "provision"):
        proc = run_invoke([task, "-H", "gpu7", "-i", str(inv), "--json"], env)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        host = json_of(proc)["hosts"]["gpu7"]
        assert host["status"] == "failed" and says in host["error"], host["error"]
        work = tmp_path / "work" / "gpu7"
        assert not (work / "envs").exists() and not (work / "releases").exists()


@pytest.mark.parametrize(
    "hostile",
    ["file:///etc/passwd", "http://127.0.0.10:{port}/files/x.whl", "http://127.0.0.1:{port}@127.0.0.10/x.whl",
     "HTTP://127.0.0.1:{port}/../../etc/x.whl", "ftp://127.0.0.1/x.whl",
     "http://user:s3cret-pw@127.0.0.10:{port}/files/x.whl"],
)  # fmt: skip
def test_plan_and_provision_refuse_a_lock_with_a_url_outside_its_indexes(
    fleet: Fleet, index: Any, tmp_path: Path, hostile: str
) -> None:
    """A lock whose file URL is not under its indexes (the controller's own files by file://,
    another host, a userinfo trick, a climbing path, another scheme): one error line naming
    the lock file, the entry and the URL, exit 1, and nothing at all on the host."""
    port = index[1].split(":")[2].split("/")[0]
    url = hostile.format(port=port)
    edit = lambda t: re.sub(r'url = "http://127\.0\.0\.1:[^"]*"', f'url = "{url}"', t, count=1)  # noqa: E731
    recipes = tiny_recipes(tmp_path, index, edit=edit)
    inv = stack_inventory(fleet, tmp_path, ("gpu7",))
    env = invoke_env(fleet, tmp_path, INVOKE_SM120KIT_RECIPES_DIR=str(recipes))
    for task in ("plan", "provision"):
        proc = run_invoke([task, "-H", "gpu7", "-i", str(inv), "--json"], env)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1, out
        assert "Traceback" not in out and "pylock" in out and "packages.wheels.url" in out, out
        assert "s3cret-pw" not in out  # a password in a URL is shown as ****
        assert not (tmp_path / "work" / "gpu7").exists() or not any(
            (tmp_path / "work" / "gpu7").rglob("*.whl")
        )


def test_a_lock_of_207_tiny_files_installs_over_ssh(
    fleet: Fleet, tmp_path: Path, uv_wheel: Path
) -> None:
    """A lock the size of sglang 0.5.23's (207 files, its distribution names with a suffix,
    tiny wheels from a loopback index) installs end to end over real SSH, then a rerun changes
    nothing: every file through the stores, the script arguments on stdin."""
    from sm120kit.stack.lock import Lock, LockEntry, dump_lock, load_lock

    real = load_lock(REPO / "locks" / "sglang-0.5.23" / "pylock.cp311-manylinux_2_34_x86_64.toml")
    assert len(real.packages) == 207
    files = tmp_path / "index207"
    wheels = [make_wheel(files, f"{e.name}-tiny", e.version) for e in real.packages]
    with serve(files) as url:
        base = url.replace("/simple", "")
        entries = tuple(
            LockEntry(
                e.name + "-tiny",
                e.version,
                w.name,
                f"{base}/files/{w.name}",
                sha256_of(w),
                "release",
                False,
            )  # fmt: skip
            for e, w in zip(real.packages, wheels, strict=True)
        )
        lock = Lock(
            tmp_path / "big.toml", "aiohappyeyeballs-tiny==2.7.1", "3.11",
            "manylinux_2_34_x86_64", "", "", "by hand", "2026-12-03", entries, {}, (base,),
        )  # fmt: skip
        text = dump_lock(lock, ["207 tiny files"])
        recipes = tiny_recipes(tmp_path, (files, url), text=text, top=lock.top)
        inv = stack_inventory(fleet, tmp_path, ("gpu2",))
        cache = release_cache_with_uv(tmp_path / "release-cache", uv_wheel)
        env = invoke_env(
            fleet, tmp_path, INVOKE_SM120KIT_RECIPES_DIR=str(recipes),
            SM120KIT_RELEASE_CACHE=cache,
            INVOKE_SM120KIT_CACHE_CONTROLLER=str(tmp_path / "controller-store"),
        )  # fmt: skip
        args = ["provision", "-H", "gpu2", "-i", str(inv), "--json"]
        host = _read_like_a_person(args[:-1], env)["hosts"]["gpu2"]
        assert host["stack"]["sync"]["added"] and len(host["stack"]["sync"]["added"]) == 207
        again = run_invoke(args, env)
        assert again.returncode == 0 and json_of(again)["hosts"]["gpu2"]["changed"] == 0


def _read_like_a_person(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """`plan` and `provision` of the 207 files as a person (or a CI log) reads them, stdout and
    stderr not terminals: plan sums the fetches up in one line (``--verbose`` lists each),
    provision prints its steps, the recap and no command, and the progress lines are one per
    step start (and a heartbeat at most every 30 s of a step), never one per file."""
    plan = run_invoke(["plan", *args[1:]], env)
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    words = " ".join(plan.stdout.split())  # rich wraps long cells
    assert plan.stdout.count("$ fetch ") == 1 and "$ fetch 208 files, 0.02 GB known" in words
    verbose = run_invoke(["plan", *args[1:], "--verbose"], env)
    assert verbose.stdout.count("$ fetch ") == 208  # the lock's files and uv
    # What the wider plan prints besides the recipe's values table: a bounded page.
    assert len(plan.stdout.splitlines()) < len(verbose.stdout.splitlines()) - 400
    run = run_invoke(args, env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout + run.stderr
    assert "$ " not in run.stdout and "wheel " not in run.stderr
    assert "synced by uv 0.13.9 (207 added, 0 removed, 0 replaced)" in " ".join(run.stdout.split())
    assert "RECAP provision" in run.stderr and len(out.splitlines()) < 60, out
    doc = json.loads(Path(run.stderr.split("logs in ", 1)[1].split()[0], "result.json").read_text())
    steps = doc["hosts"]["gpu2"]["steps"]
    lines = [line for line in run.stderr.splitlines() if "[gpu2]" in line]
    beats = sum(int(st["seconds"] // 30) for st in steps)  # heartbeats the steps' time allows
    # One per step start (and the run's lock), the host's end, and the heartbeats.
    assert len(lines) <= len(steps) + 2 + beats, lines
    return dict(doc)


def test_a_lock_whose_sha256_differs_is_refused_before_install(
    fleet: Fleet, index: Any, tmp_path: Path, uv_wheel: Path
) -> None:
    recipes = tiny_recipes(tmp_path, index, bad="demo-native")
    inv = stack_inventory(fleet, tmp_path, ("gpu3",))
    cache = release_cache_with_uv(tmp_path / "release-cache", uv_wheel)
    env = invoke_env(
        fleet, tmp_path, INVOKE_SM120KIT_RECIPES_DIR=str(recipes), SM120KIT_RELEASE_CACHE=cache
    )
    proc = run_invoke(["provision", "-H", "gpu3", "-i", str(inv), "--json"], env)
    assert proc.returncode == 2
    host = json_of(proc)["hosts"]["gpu3"]
    files, _url = index
    real = sha256_of(next(files.glob("demo_native-*.whl")))
    assert host["status"] == "failed"
    assert f"demo-native 0.1: sha256 {real} differs from the lock's {'f' * 64}" in host["error"]
    work = tmp_path / "work" / "gpu3"
    # Nothing installed, no env left: the new env, made beside its final place and filled as
    # the files arrived, is removed with its scratch dir when the fetch fails.
    assert not list((work / "envs").glob("stack-*"))
    assert not list((work / "releases").rglob("demo_native-*.whl"))  # the bad file is gone


def test_three_hosts_download_each_locked_file_from_the_index_once(
    fleet: Fleet, index: Any, tmp_path: Path, uv_wheel: Path
) -> None:
    """A fleet of three provisioning one lock: every file leaves the index once (counted by
    the index server), one host per file downloads it and the others take it from a peer host
    that holds it (host to host, not through the controller store); the stores are filled
    after the step; a fourth host provisioned with the index gone installs from the
    earlier hosts (the holder record); a rerun of the three changes nothing and asks the index for nothing."""
    files, _url = index
    served: list[str] = []
    store = tmp_path / "controller-store"
    trio = ("gpu1", "gpu6", "gpu8")
    with serve(files, log=served) as url:
        recipes = tiny_recipes(tmp_path, (files, url))
        inv = stack_inventory(fleet, tmp_path, (*trio, "gpu3"))
        env = invoke_env(
            fleet,
            tmp_path,
            INVOKE_SM120KIT_RECIPES_DIR=str(recipes),
            INVOKE_SM120KIT_CACHE_CONTROLLER=str(store),
            # uv alone: the controller sends it (the lock's files come from the index)
            SM120KIT_RELEASE_CACHE=release_cache_with_uv(tmp_path / "no-release-cache", uv_wheel),
        )
        served.clear()  # what drafting the lock read
        args = ["provision", "-H", ",".join(trio), "-i", str(inv), "--json"]
        first = run_invoke(args, env)
        assert first.returncode == 0, first.stdout + first.stderr
        wheels = sorted(w.name for w in files.glob("*.whl"))
        hosts = json_of(first)["hosts"]
        # each file from the index once, for three hosts (else: what each host's peers said)
        assert sorted(served) == wheels, {n: h.get("cache_events") for n, h in hosts.items()}
        origins: dict[str, int] = {}
        for name in trio:
            stack = hosts[name]["stack"]
            assert Path(stack["env"], "bin", "python").exists()
            for where, n in stack["files_from"].items():
                origins[where] = origins.get(where, 0) + n
            assert sum(stack["files_from"].values()) == 4
        # Host to host: each file from the index once, then from a peer that holds it; never
        # through the controller store (filled after the step, for later runs).
        peer = sum(n for where, n in origins.items() if where.startswith("peer:"))
        assert {k: v for k, v in origins.items() if not k.startswith("peer:")} == {
            "index": 3,
            "controller": 3,
        }
        assert peer == 6, origins
        served.clear()
        again = run_invoke(args, env)
        assert again.returncode == 0, again.stdout + again.stderr
        assert all(h["changed"] == 0 for h in json_of(again)["hosts"].values())
        assert served == []
    # The index is gone: a new host installs the lock from the earlier run's hosts, which
    # hold the files (the holder record, cache/holders.py), host to host; with those hosts
    # down it would be the stores (tests/fleet/test_earlier_peers.py).
    offline = run_invoke(["provision", "-H", "gpu3", "-i", str(inv), "--json"], env)
    assert offline.returncode == 0, offline.stdout + offline.stderr
    stack = json_of(offline)["hosts"]["gpu3"]["stack"]
    assert stack["files_from"].pop("controller") == 1
    assert set(stack["files_from"]) <= {"peer:gpu1", "peer:gpu6", "peer:gpu8"}
    assert sum(stack["files_from"].values()) == 3
    assert stack["downloaded_bytes"] == 0
    assert Path(stack["env"], "bin", "python").exists()


@pytest.mark.slow
def test_a_stack_part_chosen_as_build_is_built_from_the_pinned_source(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The lock holds a released minikernel 0.1.0; `stack.build` chooses the recipe's pinned
    source instead (examples/minikernel, built with real nvcc for sm_120 against the build
    env's torch 2.13.0+cpu), and the serving env gets that build, not the release. The tiny
    lock holds no torch, so the `stack smoke` step rightly fails that env (its minikernel
    cannot load): the host fails there, after the stack step did its work, and again on the
    rerun, which changes nothing."""
    from tests.support.sample_wheel import nvcc_available

    if not nvcc_available():
        pytest.skip("needs nvcc")
    files = tmp_path / "index2"
    make_wheel(files, "demo-app", "1.0", requires=("minikernel==0.1.0",))
    make_wheel(files, "minikernel", "0.1.0")
    with serve(files) as url:
        _build_stack(fleet, tmp_path, files, url)


def _build_stack(fleet: Fleet, tmp_path: Path, files: Path, url: str) -> None:
    recipes = tiny_recipes(tmp_path, (files, url))
    shutil.copytree(  # the recipe's path source, beside its recipes/ as in the repo
        REPO / "examples" / "minikernel",
        recipes.parent / "examples" / "minikernel",
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
    )
    recipe = recipes / "r580.toml"
    recipe.write_text(
        recipe.read_text().replace('reason = "tiny"\n', 'reason = "tiny"\nbuild = ["minikernel"]\n')
    )
    inv = stack_inventory(fleet, tmp_path, ("local",))
    doc = yaml.safe_load(inv.read_text())
    doc["all"]["hosts"]["local"].update(
        {
            "recipe.torch.index": "pypi",
            "recipe.torch.version": "2.13.0",
            "recipe.torch.cuda": "cpu",
            "pip_args": ["--find-links", "/opt/wheels"],
        }
    )
    inv.write_text(yaml.safe_dump(doc))
    env = invoke_env(fleet, tmp_path, INVOKE_SM120KIT_RECIPES_DIR=str(recipes))
    args = ["provision", "-H", "local", "-i", str(inv), "--json"]
    first = run_invoke(args, env, timeout=1800)
    assert first.returncode == 2, first.stdout + first.stderr
    host = json_of(first)["hosts"]["local"]
    steps = {s["name"]: s for s in host["steps"]}
    assert steps["stack"]["status"] == "changed"
    assert steps["stack smoke"]["status"] == "failed"
    # Which check says it first depends on whether the build env the wheel's RUNPATH names is
    # still there (then its symbols resolve and the import order check speaks): either way the
    # env's missing torch is named.
    message = steps["stack smoke"]["message"]
    assert "this env has no importable torch" in message or "No module named 'torch'" in message
    row = host["stack"]["packages"]["minikernel"]
    assert row["from"] == "build"
    assert row["wheel_from"] == "build" or row["wheel_from"].startswith("cache:")
    assert row["build"]["source"] == {"kind": "path", "path": "examples/minikernel"}
    env_dir = Path(host["stack"]["env"])
    infos = list(env_dir.glob("lib/python3.11/site-packages/minikernel-0.1.0*.dist-info"))
    assert len(infos) == 1 and not (infos[0] / "direct_url.json").read_text().count("releases")
    again = run_invoke(args, env)
    assert again.returncode == 2 and json_of(again)["hosts"]["local"]["changed"] == 0


#: tests only: the host's interpreter, which drops the SSH connection it runs under the first
#: time it is handed the stack's install (install_lock "apply"): it kills its own sshd session
#: process, as a network drop or a restarted sshd would end it.
DROP_PY = """#!/bin/sh
# A service (started with -c, its requests on stdin for as long as it runs): at once.
case " $* " in *" -c "*) exec {python} "$@";; esac
prog=$(mktemp)
cat > "$prog"
if grep -q '"action": "apply"' "$prog" && [ ! -e {marker} ]; then
  : > {marker}
  pid=$$
  while [ "$pid" -gt 1 ]; do
    case "$(cat /proc/$pid/comm)" in sshd*) kill -KILL "$pid"; exit 1;; esac
    pid=$(awk '{{print $4}}' /proc/$pid/stat)
  done
fi
exec {python} "$@" < "$prog"
"""


def test_a_connection_lost_under_the_install_runs_the_step_once_more(
    fleet: Fleet, index: Any, tmp_path: Path, uv_wheel: Path
) -> None:
    """Over SSH (gpu3, a fresh work_root): the connection drops while the stack's
    install runs on the host (its sshd session killed). The step runs once more on a new
    connection, keeps the files already placed, installs the lock and says so; a rerun
    changes nothing. The GPU is simulated (target vars); the drop is real."""
    recipes = tiny_recipes(tmp_path, index)
    inv = stack_inventory(fleet, tmp_path, ("gpu3",))
    marker = tmp_path / "dropped"
    wrapper = tmp_path / "droppy"
    wrapper.write_text(DROP_PY.format(marker=marker, python=sys.executable))
    wrapper.chmod(0o755)
    doc = yaml.safe_load(inv.read_text())
    doc["all"]["hosts"]["gpu3"]["ansible_python_interpreter"] = str(wrapper)
    inv.write_text(yaml.safe_dump(doc))
    env = invoke_env(
        fleet,
        tmp_path,
        INVOKE_SM120KIT_RECIPES_DIR=str(recipes),
        SM120KIT_RELEASE_CACHE=release_cache_with_uv(tmp_path / "release-cache", uv_wheel),
        INVOKE_SM120KIT_CACHE_CONTROLLER=str(tmp_path / "controller-store"),
    )
    args = ["provision", "-H", "gpu3", "-i", str(inv), "--json"]
    first = run_invoke(args, env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert marker.exists()  # the drop happened
    [step] = [s for s in json_of(first)["hosts"]["gpu3"]["steps"] if s["name"] == "stack"]
    assert step["status"] == "changed", step
    assert "synced by uv 0.13.9 (3 added, 0 removed, 0 replaced)" in step["message"]
    # Whichever noticed first: a command's channel or the downloader on the same connection.
    after = step["message"].split("(run again after: ", 1)[1]
    assert "lost while a command ran" in after or "the connection was lost" in after, after
    again = run_invoke(args, env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert json_of(again)["hosts"]["gpu3"]["changed"] == 0


def test_provision_finishes_on_a_host_whose_sshd_allows_one_session(
    index: Any, tmp_path: Path, uv_wheel: Path
) -> None:
    """A host whose sshd allows one session per connection (MaxSessions 1), the setting
    ssh_max_sessions left at its 10: provision installs the tiny lock (commands, SFTP copies,
    the download service held for the whole stack step, threads beside it) instead of hanging
    or calling the host unreachable; what sshd allows is learned from its first refusal and
    noted. The subprocess's own timeout bounds the wait."""
    fleet = Fleet(
        tmp_path / "fleet", [("tight", "127.0.0.87", "nogpu")],
        sshd_options={"tight": "MaxSessions 1"},
    ).start()  # fmt: skip
    try:
        recipes = tiny_recipes(tmp_path, index)
        inv = stack_inventory(fleet, tmp_path, ("tight",))
        cache = release_cache_with_uv(tmp_path / "release-cache", uv_wheel)
        env = invoke_env(
            fleet, tmp_path, INVOKE_SM120KIT_RECIPES_DIR=str(recipes),
            SM120KIT_RELEASE_CACHE=cache,
        )  # fmt: skip
        proc = run_invoke(["provision", "-H", "tight", "-i", str(inv), "--json"], env, timeout=300)
    finally:
        fleet.stop()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    host = json_of(proc)["hosts"]["tight"]
    steps = {s["name"]: s for s in host["steps"]}
    assert steps["stack"]["status"] == "changed", steps["stack"]
    assert "synced by uv 0.13.9 (3 added" in steps["stack"]["message"]
    log = Path(host["log"]).read_text()
    assert "sshd allows 1 session(s) per connection (MaxSessions), fewer than setting " \
        "ssh_max_sessions (10)" in log  # fmt: skip


def _leftovers(root: Path) -> list[str]:
    """The run temporaries under a host's work root (what no finished run may leave)."""
    names = ("releases/*/*.part", "envs/.*.fetched", "envs/.*.progress", "envs/.*.progress.tmp")
    return sorted(str(p.relative_to(root)) for n in names for p in root.glob(n))


def test_a_download_killed_on_the_host_leaves_no_temporary_after_the_next_run(
    fleet: Fleet, index: Any, tmp_path: Path, uv_wheel: Path
) -> None:
    """Over SSH (gpu3): the index sends demo-native's wheel half and holds the rest; the
    host's downloader (its `<dest>.<pid>-<thread>.part` names it) is killed with SIGKILL, as
    an OOM kill or a person would end it, so it cannot remove its temporary. The next run
    sweeps it under the host lock (its writer is dead), installs, and leaves no `.part`,
    `.fetched` or `.progress` file. The GPU is simulated (target vars); the kill is real."""
    files, _url = index
    go = threading.Event()
    go.set()  # the lock is drafted from the whole files first
    with serve(files, hold=("demo_native", go)) as url:
        recipes = tiny_recipes(tmp_path, (files, url))
        inv = stack_inventory(fleet, tmp_path, ("gpu3",))
        env = invoke_env(
            fleet,
            tmp_path,
            INVOKE_SM120KIT_RECIPES_DIR=str(recipes),
            SM120KIT_RELEASE_CACHE=release_cache_with_uv(tmp_path / "release-cache", uv_wheel),
            INVOKE_SM120KIT_CACHE_CONTROLLER=str(tmp_path / "controller-store"),
        )
        root = tmp_path / "work" / "gpu3"
        args = ["provision", "-H", "gpu3", "-i", str(inv), "--json"]
        go.clear()
        cmd = [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args]
        run = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            writer = re.compile(r"demo_native-[^/]*\.whl\.(\d+)-\d+(?:\.peer)?\.part$")
            pid = None
            for _ in range(1200):  # 60 s at most
                held = [m for p in root.glob("releases/*/*.part") if (m := writer.search(str(p)))]
                if held:
                    pid = int(held[0].group(1))
                    break
                time.sleep(0.05)
            assert pid is not None, "the host never started the download"
            os.kill(pid, signal.SIGKILL)
        finally:
            go.set()
            out, err = run.communicate(timeout=300)
        left = _leftovers(root)
        assert any(f".{pid}-" in p for p in left), (left, out, err)  # the dead writer's
        again = run_invoke(args, env)
        assert again.returncode == 0, again.stdout + again.stderr
        assert _leftovers(root) == []


def test_a_private_index_gets_the_netrc_credentials_and_no_file_shows_them(
    fleet: Fleet, index: Any, tmp_path: Path, uv_wheel: Path
) -> None:
    """Over SSH (gpu3): the lock's index wants HTTP basic auth (a loopback index, as a private
    one does). The controller's netrc file (``$NETRC``) has its machine: provision installs,
    and the password is in no output, no file of the run directory, the controller store,
    the host's work root, nor any file of HOME written during the runs. A wrong password:
    the host fails with one line naming the index's URL, no secret in it either."""
    files, _url = index
    auth: dict[str, str] = {}  # open while the lock is drafted
    with serve(files, auth=auth) as url:
        recipes = tiny_recipes(tmp_path, (files, url))
        password = "pw" + secrets.token_hex(12)
        netrc = tmp_path / "netrc"
        netrc.write_text(f"machine 127.0.0.1 login alice password {password}\n")
        netrc.chmod(0o600)
        inv = stack_inventory(fleet, tmp_path, ("gpu3",))
        env = invoke_env(
            fleet,
            tmp_path,
            INVOKE_SM120KIT_RECIPES_DIR=str(recipes),
            SM120KIT_RELEASE_CACHE=release_cache_with_uv(tmp_path / "release-cache", uv_wheel),
            INVOKE_SM120KIT_CACHE_CONTROLLER=str(tmp_path / "controller-store"),
            NETRC=str(netrc),
        )
        auth.update(user="alice", password=password)
        args = ["provision", "-H", "gpu3", "-i", str(inv), "--json"]
        since = time.time() - 1
        first = run_invoke(args, env)
        assert first.returncode == 0, first.stdout + first.stderr
        stack = json_of(first)["hosts"]["gpu3"]["stack"]
        assert stack["packages"]["demo-native"]["wheel_from"] == "release"
        # A wrong password, on a fresh host work root (nothing there to reuse).
        netrc.write_text("machine 127.0.0.1 login alice password wrong-one\n")
        inv2 = tmp_path / "hosts2.yaml"
        doc = yaml.safe_load(inv.read_text())
        doc["all"]["hosts"]["gpu3"]["work_root"] = str(tmp_path / "work" / "gpu3-wrong")
        inv2.write_text(yaml.safe_dump(doc))
        env2 = {**env, "INVOKE_SM120KIT_CACHE_CONTROLLER": str(tmp_path / "store-wrong")}
        wrong = run_invoke(["provision", "-H", "gpu3", "-i", str(inv2)], env2)
        assert wrong.returncode != 0
        flat = " ".join((wrong.stdout + wrong.stderr).split())  # the table wraps long lines
        assert "Traceback" not in flat
        assert re.search(r"failed: gpu3: demo-native 0\.1: download of http://alice:\*\*\*\*@127\.0\.0"
                         r"\.1:\d+/files/\S+ failed: HTTPError: HTTP Error 401", flat), flat  # fmt: skip
        outputs = first.stdout + first.stderr + wrong.stdout + wrong.stderr
        assert password not in outputs and "wrong-one" not in outputs
        trees = [tmp_path / "runs", tmp_path / "controller-store", tmp_path / "store-wrong",
                 tmp_path / "work"]  # fmt: skip
        home = Path(os.path.expanduser("~"))
        hits = []
        for tree in trees:
            for path in tree.rglob("*"):
                if path.is_file() and not path.is_symlink():
                    data = path.read_bytes()
                    if password.encode() in data or b"wrong-one" in data:
                        hits.append(str(path))
        found = subprocess.run(
            ["find", str(home), "-xdev", "-type", "f", "-newermt", f"@{since}", "-size", "-50M"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        for line in found.stdout.splitlines():
            with contextlib.suppress(OSError):
                data = Path(line).read_bytes()
                if password.encode() in data:
                    hits.append(line)
        assert hits == []
