"""An interrupt at any moment: exit 3, one line, the JSON document under --json, and no
traceback from any thread.

Real parts: the real `invoke` command in its own process group, signalled like a terminal's
Ctrl-C (the whole group), `kill` (SIGTERM) or a closed terminal (SIGHUP); the sshd fleet and a
real build of the fake flash-attn (it pauses after its first unit, as a long compile would)
for a signal while a build's progress is being polled.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, invoke_env
from tests.support.fleet import Fleet
from tests.support.sample_wheel import nvcc_available


def _caught(pid: int) -> int:
    """The process's caught-signals mask (/proc/PID/status SigCgt), 0 once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    m = re.search(r"^SigCgt:\s*([0-9a-f]+)$", text, re.M)
    return int(m.group(1), 16) if m else 0


def _handlers_installed(pid: int) -> bool:
    # Python alone catches SIGINT only; SIGHUP caught too means tasks.py's handlers are in.
    return bool(_caught(pid) & (1 << (signal.SIGHUP - 1)))


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )


def _check_interrupted(proc: subprocess.Popen[str], sig: signal.Signals, json_out: bool) -> None:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, (out, err)
    assert "Traceback" not in err and "Exception in thread" not in err, err
    assert f"interrupted ({sig.name})" in err or f"interrupted by {sig.name}" in err, err
    if json_out:
        assert out.count("\n") == 1, out
        assert json.loads(out)["interrupted"] == sig.name


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signal_while_the_task_loads_is_exit_3_and_one_line(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """The signal comes as soon as tasks.py is being read (the heavy imports still to come):
    before this fix, invoke turned a Ctrl-C there into a silent exit 1."""
    proc = _start(["facts", "-H", "local", "--json"], invoke_env(None, tmp_path))
    try:
        deadline = time.monotonic() + 30
        while not _handlers_installed(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.002)
        assert _handlers_installed(proc.pid), "tasks.py never installed its handlers"
        os.killpg(proc.pid, sig)
        _check_interrupted(proc, sig, json_out=True)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not list((tmp_path / "runs").glob("*/hosts")), "no host work expected"


@pytest.mark.parametrize("delay", [0.0, 0.3, 0.6, 0.8, 1.0, 1.3, 1.6])
def test_ctrl_c_in_the_first_second_never_prints_a_traceback(tmp_path: Path, delay: float) -> None:
    proc = _start(["facts", "-H", "local", "--json"], invoke_env(None, tmp_path))
    try:
        time.sleep(delay)
        installed = _handlers_installed(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    if not installed:
        # Python and invoke themselves were still starting (tasks.py not read yet): what a
        # Ctrl-C does there is theirs (docs/failure-behaviour.md, "Interrupts").
        return
    assert "Traceback" not in err and "Exception in thread" not in err, err
    if proc.returncode == 0:
        return  # the run had already finished
    assert proc.returncode == 3, (out, err)
    assert json.loads(out)["interrupted"] == "SIGINT"
    assert "interrupted" in err


CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from sm120kit.runner.connection import ConnectOptions
    from tests.real import test_build_op as t
    from tests.fleet.test_interrupts import toolkit_here

    args = json.loads(sys.argv[1])
    tmp = Path(args["tmp"])

    class Fleet:
        known_hosts = args["known_hosts"]

    host = t.Host("fa", vars=args["vars"])
    env = t.make_env(tmp / "env")
    result = t.run_op(Fleet, tmp, [host], t.package_task("flash-attn", toolkit_here(), env))
    print(json.dumps({"status": result.hosts["fa"].status, "interrupted": result.interrupted}))
    """
)


def toolkit_here() -> object:
    """The system nvcc as a Toolkit (as tests/real/test_build_op.py's fixture makes it)."""
    from tests.real.test_build_op import system_toolkit

    return system_toolkit()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_during_a_polled_build_leaves_no_thread_traceback(
    fleet: Fleet, tmp_path: Path, sig: signal.Signals
) -> None:
    if not nvcc_available():
        pytest.skip("nvcc not installed")
    from tests.real.test_build_op import CROSS, SSH_HOST, fake_flash_attn

    work = tmp_path / "fa" / "work"
    vars_ = {
        **fleet.all_vars(fleet.by_name(SSH_HOST)),
        "work_root": str(work),
        **CROSS,
        **fake_flash_attn(FAKE_FLASH_ATTN_SLEEP="120"),
    }
    args = {"tmp": str(tmp_path), "known_hosts": str(fleet.known_hosts), "vars": vars_}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, json.dumps(args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
    )
    try:
        progress = work / "build" / "flash-attn" / "progress.json"
        deadline = time.monotonic() + 300
        while not progress.exists() and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.2)
        assert progress.exists(), child.communicate(timeout=30)
        time.sleep(5)  # the progress poll has run: its thread is between two looks
        child.send_signal(sig)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert "Exception in thread" not in err and "Traceback" not in err, err
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc == {"status": "interrupted", "interrupted": sig.name}


def test_progress_poll_thread_ends_quietly_when_the_run_is_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build's progress poll (a helper thread on a real local connection) sees the run
    cancelled, as a signal mid-build does: it ends without a traceback of its own."""
    from sm120kit.inventory.host import Host
    from sm120kit.output.progress import Progress
    from sm120kit.runner import build_progress
    from sm120kit.runner.connection import cancel_all, reset_cancel
    from sm120kit.runner.pool import HostContext, Runner, RunOptions

    seen: list[str] = []
    monkeypatch.setattr(
        "threading.excepthook", lambda args: seen.append(f"{args.thread.name}: {args.exc_type}")
    )
    monkeypatch.setattr(build_progress, "PROGRESS_POLL_SECONDS", 0.05)
    progress = tmp_path / "progress.json"
    progress.write_text('{"done": 1, "total": 4}')

    def op(ctx: HostContext) -> None:
        with build_progress.poll_progress(ctx, "wheel:x", str(progress)):
            time.sleep(0.3)  # polls run
            cancel_all("SIGINT")
            time.sleep(0.5)  # the next poll finds the run cancelled

    # A display that shows the polls (a NullProgress, the default, is never polled).
    runner = Runner(RunOptions(run_root=str(tmp_path / "runs")), Progress())
    try:
        runner.run("poll", [Host("local", vars={"ansible_connection": "local"})], op)
    finally:
        reset_cancel()
    assert seen == []
