"""A new stack env filled while its files still arrive (`install_lock` ``stage``,
remote/lib/stream_install.py), run on this machine as a host runs it: the script bundle fed to
``python3 -``, real uv 0.13.9 and real tiny wheels with modules to compile. A thread stands in
for the controller: it places the files one after another (atomically, as the stores do) and
then writes the fetch marker.

Shown: every file installed, every module's pyc written by the stage is one uv's own compile
pass takes as fresh (the final sync leaves its bytes and mtime alone), the sync reports the
files as added; a controller whose fetches failed stops the host with its reason and leaves no
env; a stale marker of another run is not taken for this one's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from sm120kit.ops.stack_files import UV
from sm120kit.remote import script_program
from sm120kit.remote.lib import stream_install
from sm120kit.stack.stack_steps import StackFacts, StackFile, plan_stack
from tests.support.tiny_index import make_wheel, sha256_of

PY311 = "/root/.pyenv/versions/3.11.7/bin/python3.11"


def _python() -> str:
    return PY311 if os.path.exists(PY311) else sys.executable


def test_fetch_marker_reads_only_this_runs_word(tmp_path: Path) -> None:
    path = tmp_path / "m"
    marker = stream_install.FetchMarker({"path": str(path), "token": "t1"})
    assert marker.state() is None  # not written yet: still fetching
    path.write_text("t0 ok\n")
    assert marker.state() is None  # an earlier run's marker
    path.write_text("t1 failed: gpu1: demo 1.0: sha256 differs\n")
    assert marker.state() == "failed: gpu1: demo 1.0: sha256 differs"
    path.write_text("t1 ok\n")
    assert marker.state() == "ok"
    assert stream_install.FetchMarker(None).state() == "ok"  # no controller to wait for


def test_a_silent_controller_is_given_up_on(tmp_path: Path) -> None:
    """A controller killed outright writes no last word: its heartbeat (``<token> fetching``,
    rewritten every minute) stops, and after `silence` seconds the host stops waiting."""
    path = tmp_path / "m"
    marker = stream_install.FetchMarker({"path": str(path), "token": "t1"}, silence=0.5)
    path.write_text("t1 fetching\n")
    assert marker.state() is None
    time.sleep(0.7)
    os.utime(path)  # a beat: still fetching
    assert marker.state() is None
    path.write_text("t0 fetching\n")  # another run's beat does not count
    time.sleep(0.7)
    assert str(marker.state()).startswith("failed: no word from the controller for ")


def test_modules_of_reads_record_inside_site_packages(tmp_path: Path) -> None:
    info = tmp_path / "a-1.dist-info"
    info.mkdir()
    (info / "RECORD").write_text(
        "a/__init__.py,sha256=x,1\na/b.py,,\na/c.so,,\n../../bin/tool.py,,\n"
        '"a/with,comma.py",,\na-1.dist-info/RECORD,,\n'
    )
    got = stream_install.modules_of(str(tmp_path), "a-1.dist-info")
    assert got == [str(tmp_path / p) for p in ("a/__init__.py", "a/b.py", "a/with,comma.py")]
    assert stream_install.modules_of(str(tmp_path), "missing.dist-info") == []


def _setup(tmp_path: Path, uv: Path, n: int) -> tuple[StackFacts, list[Path]]:
    wheels = [
        make_wheel(
            tmp_path / "index",
            f"pkg{i}",
            "1.0",
            extra={f"pkg{i}/mod{j}.py": f"X = {i * 100 + j}\n".encode() for j in range(5)},
        )
        for i in range(n)
    ]
    work = tmp_path / "work"
    files = tuple(
        StackFile(
            f"pkg{i}",
            "1.0",
            w.name,
            f"file://{w}",
            sha256_of(w),
            False,
            str(work / "releases" / sha256_of(w) / w.name),
        )  # fmt: skip
        for i, w in enumerate(wheels)
    )
    uv_dest = work / "releases" / UV.sha256 / UV.filename
    uv_dest.parent.mkdir(parents=True)
    shutil.copyfile(uv, uv_dest)
    facts = StackFacts(
        top="pkg0==1.0", lock=str(tmp_path / "lock.toml"), env=str(work / "envs" / "stack-t"),
        python=_python(), files=files,
        uv=StackFile("uv", UV.version, UV.filename, UV.url, UV.sha256, False, str(uv_dest)),
        uv_version=UV.version, tools=str(work / "tools"), cache=str(work / "cache" / "uv"),
        cuda_home=None, driver="580.95.05", arch="12.0", install_timeout=600,
    )  # fmt: skip
    return facts, wheels


def _apply(facts: StackFacts, marker: Path, token: str) -> subprocess.Popen[str]:
    plan = plan_stack(facts, {"exists": False})
    assert plan.streams
    entries = [{**f.row(), "checked": True} for f in facts.files]
    args = {
        "action": "apply", "env": facts.env, "entries": entries, "verify": None,
        "indexes": [], "steps": plan.host_steps, "cleanup": plan.cleanup,
        "progress": facts.env + ".progress", "timeout": 600,
        "fetched": {"path": str(marker), "token": token},
    }  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None
    proc.stdin.write(script_program("install_lock", args))
    proc.stdin.close()
    return proc


def _start(
    tmp_path: Path, uv_whl: Path, n: int, stale: str = ""
) -> tuple[StackFacts, list[Path], Path, subprocess.Popen[str]]:
    """`n` wheels and the host's install started, waiting for them under this run's token
    ("tok"); `stale`: a marker left by another run, there before it starts."""
    facts, wheels = _setup(tmp_path, uv_whl, n)
    marker = tmp_path / "work" / "envs" / ".stack-t.fetched"
    marker.parent.mkdir(parents=True)
    if stale:
        marker.write_text(stale)
    return facts, wheels, marker, _apply(facts, marker, "tok")


def _place(facts: StackFacts, wheels: list[Path], upto: int) -> None:
    for f, w in list(zip(facts.files, wheels, strict=True))[:upto]:
        Path(f.dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(w, f.dest + ".part")
        os.replace(f.dest + ".part", f.dest)
        time.sleep(0.05)


def test_stage_installs_and_compiles_as_files_arrive(
    tmp_path: Path,
    uv_wheel: Path,
) -> None:
    # Another run's marker is there: it must not end the wait.
    facts, wheels, marker, proc = _start(tmp_path, uv_wheel, 12, stale="old ok\n")

    def controller() -> None:
        time.sleep(1.0)
        _place(facts, wheels, len(wheels))
        marker.write_text("tok ok\n")

    thread = threading.Thread(target=controller)
    thread.start()
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.wait(timeout=600)
    thread.join()
    doc = json.loads(out)
    assert doc["ok"], doc
    assert sorted(doc["sync"]["added"]) == sorted(f"pkg{i}==1.0" for i in range(12))
    timings = doc["timings"]
    assert timings["compiled"] >= 12 * 6
    assert timings["stage_batches"] >= 1
    # The progress the controller shows: every file checked and installed, every module queued
    # for the compile compiled.
    shown = json.loads(Path(facts.env + ".progress").read_text())
    assert shown["phase"] == "done" and shown["checked"] == shown["installed"] == 12
    assert shown["compiled"] == shown["modules"] == timings["compiled"]
    env = Path(facts.env)
    site = next(env.glob("lib/python*/site-packages"))
    assert len(sorted(site.glob("pkg*/__pycache__/*.pyc"))) == 12 * 6
    # The stage was the env's one compile pass: uv's own pass over the whole site-packages
    # finds nothing to write, and takes every pyc the stage wrote as fresh: none is rewritten,
    # none added.
    pycs = sorted(site.rglob("*.pyc"))
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in pycs}
    req = tmp_path / "req.txt"
    req.write_text("".join(f"{f.name} @ file://{f.dest} --hash=sha256:{f.sha256}\n"
                           for f in facts.files))  # fmt: skip
    uv = Path(facts.uv_bin)
    again = subprocess.run(
        [str(uv), "pip", "sync", "--offline", "--no-index", "--require-hashes",
         "--compile-bytecode", "--python", str(env / "bin" / "python"), str(req)],
        capture_output=True, text=True,
        env=dict(os.environ, UV_CACHE_DIR=facts.cache, UV_NO_CONFIG="1"),
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert sorted(site.rglob("*.pyc")) == pycs
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in pycs} == before
    assert not Path(facts.env + ".sm120kit-new").exists()


def test_a_failed_fetch_stops_the_host_and_leaves_no_env(
    tmp_path: Path,
    uv_wheel: Path,
) -> None:
    facts, wheels, marker, proc = _start(tmp_path, uv_wheel, 4)
    _place(facts, wheels, 2)
    marker.write_text("tok failed: gpu1: pkg2 1.0: sha256 abc differs from the lock's def\n")
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.wait(timeout=600)
    doc = json.loads(out)
    assert doc["ok"] is False
    assert doc["error"] == (
        "the controller's fetches failed: gpu1: pkg2 1.0: sha256 abc differs from the lock's def"
    )
    assert not Path(facts.env).exists()
    assert not Path(facts.env + ".sm120kit-new").exists()
    assert not Path(facts.env + ".sm120kit-scratch").exists()


def test_take_batch_caps_files_and_bytes(tmp_path: Path) -> None:
    def entry(name: str, size: int) -> dict[str, str]:
        path = tmp_path / name
        with path.open("wb") as fh:
            fh.truncate(size)
        return {"dest": str(path)}

    mb = 1 << 20
    small = [entry(f"s{i}", 10) for i in range(20)]
    assert stream_install.take_batch(small) == small[: stream_install.BATCH_FILES]
    big = entry("big", 900 * mb)  # torch-sized: alone
    assert stream_install.take_batch([big, *small])[0] == big  # no module counts: arrival order
    assert stream_install.take_batch([big, *small]) == [big]
    mid = [entry(f"m{i}", 100 * mb) for i in range(3)]
    assert stream_install.take_batch(mid) == mid[:2]  # the third would pass 256 MB
    assert stream_install.take_batch([]) == []
    gone = {"dest": str(tmp_path / "absent")}
    assert stream_install.take_batch([gone]) == [gone]


MB = 1 << 20


@pytest.mark.parametrize(
    ("pending", "backlog", "want"),
    [
        # The densest first (modules per byte), whatever the order of arrival.
        ([("torch", 555, 2438), ("anthropic", 3, 3349), ("cublas", 500, 0)], 0,
         ["anthropic"]),
        ([("cublas", 500, 0), ("torch", 555, 2438)], 0, ["torch"]),
        # 16 files at most while the workers are short of work...
        ([(f"p{i}", 1, 10) for i in range(20)], 0, [f"p{i}" for i in range(16)]),
        # ...any number once they have a backlog, the densest first.
        ([(f"p{i}", 1, i) for i in range(20)], 2000, [f"p{i}" for i in reversed(range(20))]),
        # A backlog buys bytes, up to 768 MB, however long the backlog: a batch's modules wait
        # for its end.
        ([("torch", 555, 2438), ("triton", 248, 140), ("cublas", 500, 0)], 2000,
         ["torch"]),
        ([("sglang", 39, 4719), ("triton", 248, 140), ("cublas", 500, 0)], 2000,
         ["sglang", "triton"]),
        ([("torch", 555, 2438), ("triton", 248, 140), ("cublas", 500, 0)], 80000,
         ["torch"]),
        ([("sglang", 39, 4719), ("triton", 248, 140), ("cublas", 470, 0)], 2000,
         ["sglang", "triton", "cublas"]),
        # Light files (under 1 module per MB) pending alone: all at once, any size (uv
        # unpacks them in parallel; nothing waits for their modules)...
        ([("cublas", 500, 0), ("cudnn", 700, 3), ("nccl", 300, 0)], 0,
         ["cublas", "cudnn", "nccl"]),
        ([("cublas", 500, 0), ("cudnn", 700, 3), ("nccl", 300, 0)], 2000,
         ["cublas", "cudnn", "nccl"]),
        # ...but never beside a dense one, which goes first, within its budget.
        ([("cublas", 500, 0), ("torch", 555, 2438), ("nccl", 300, 0)], 2000, ["torch"]),
        ([("cublas", 500, 0), ("tiny", 1, 2), ("nccl", 300, 0)], 0, ["tiny"]),
        # Ties keep the order of arrival; one file always goes, however big.
        ([("a", 10, 0), ("b", 10, 0)], 0, ["a", "b"]),
        ([("huge", 5000, 0)], 0, ["huge"]),
    ],
)  # fmt: skip
def test_take_batch_densest_first_within_the_backlog_budget(
    pending: list[tuple[str, int, int]], backlog: int, want: list[str]
) -> None:
    """A batch keeps the compile workers busy soonest and never outlasts their backlog by much
    (remote/lib/stream_install.take_batch): sizes in MB, modules as `Installer.add` counts."""
    entries = [
        {"name": n, "dest": "/nowhere", "size": mb * MB, "modules": m} for n, mb, m in pending
    ]
    got = [e["name"] for e in stream_install.take_batch(entries, backlog)]
    assert got == want


def test_installer_counts_each_wheels_modules(tmp_path: Path) -> None:
    """`Installer.add` counts a wheel's .py files from its zip directory (0 for a file that is
    not a zip: uv says why when it installs it)."""
    whl = tmp_path / "p-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        for name in ("p/__init__.py", "p/a.py", "p/data.json", "p-1.0.dist-info/RECORD"):
            zf.writestr(name, "")
    assert stream_install.py_files(str(whl)) == 2
    bad = tmp_path / "bad.whl"
    bad.write_bytes(b"not a zip")
    assert stream_install.py_files(str(bad)) == 0
    assert stream_install.py_files(str(tmp_path / "absent.whl")) == 0


def test_compile_all_takes_leftovers_and_a_dead_workers_modules(tmp_path: Path) -> None:
    """The stage's compile pass is the env's only one: the .py files no RECORD named are
    compiled, and the modules of a worker that died are compiled again by a new one; what no
    worker can compile is returned, not dropped."""
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    for name in ("a", "b", "c"):
        (site / "pkg" / f"{name}.py").write_text(f"X = {name!r}\n")
    (site / "_virtualenv.py").write_text("Y = 1\n")
    compiler = stream_install.Compiler(sys.executable, workers=1)
    for proc in compiler.procs:
        proc.kill()  # the worker dies before it answers
    compiler.submit([str(site / "pkg" / "a.py"), str(site / "pkg" / "b.py")])
    compiled, lost = stream_install.compile_all(compiler, sys.executable, str(site))
    assert lost == []
    assert compiled == 4
    tag = sys.implementation.cache_tag
    for path in ("pkg/__pycache__/a", "pkg/__pycache__/b", "pkg/__pycache__/c",
                 "__pycache__/_virtualenv"):  # fmt: skip
        assert (site / f"{path}.{tag}.pyc").is_file(), path
    # No interpreter to compile with: every module it was to cover is reported lost.
    broken = stream_install.Compiler(str(tmp_path / "no-python"), workers=1)
    compiled, lost = stream_install.compile_all(broken, str(tmp_path / "no-python"), str(site))
    assert compiled == 0
    assert sorted(lost) == sorted(str(p) for p in site.rglob("*.py"))


@pytest.mark.parametrize(
    ("doc", "extra", "want"),
    [
        (
            {"phase": "fetch", "done": 3, "total": 207, "bytes": 2e9, "checked": 120,
             "installed": 80, "compiled": 12000, "modules": 20000},
            "150/207 files, 3.10 GB/4.36 GB, 77.5 MB/s, ETA 16s",
            "fetch 150/207 files, 3.10 GB/4.36 GB, 77.5 MB/s, ETA 16s; host: 120/207 checked, "
            "80 installed, 12,000/20,000 modules compiled, 2.00 GB downloaded by the host; 40s",
        ),
        (  # the compile's tail: the phase word says what is left
            {"phase": "compile", "done": 0, "total": 207, "bytes": 0, "checked": 207,
             "installed": 207, "compiled": 30112, "modules": 34562},
            "",
            "compile 207/207 checked, 207 installed, 30,112/34,562 modules compiled; 40s",
        ),
        ({"phase": "install", "done": 3, "total": 207, "bytes": 0}, "", "install 3/207 files; 40s"),
        ({"phase": "fetch", "done": 3, "total": 9, "bytes": 5e8}, "",
         "fetch 3/9 files, 0.50 GB downloaded by the host; 40s"),  # fmt: skip
    ],
)  # fmt: skip
def test_the_stack_steps_progress_line(doc: dict[str, object], extra: str, want: str) -> None:
    from sm120kit.runner.build_progress import _progress_detail

    assert _progress_detail(json.dumps(doc), 40.2, extra) == want


@pytest.mark.parametrize(
    ("queued", "workers", "size"),
    [(0, 2, 1), (3, 2, 1), (4, 2, 1), (40, 2, 10), (2000, 2, 64), (10, 0, 5), (7, 8, 1)],
)
def test_a_worker_takes_a_share_of_the_queued_modules(queued: int, workers: int, size: int) -> None:
    """Compile workers take modules in chunks (one round trip a chunk), never more than
    CHUNK_MAX, and less near the end so that none is left with a long chunk alone."""
    from sm120kit.remote.lib.stream_install import CHUNK_MAX, chunk_size

    assert chunk_size(queued, workers) == size <= CHUNK_MAX
