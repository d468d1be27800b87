"""Fault injection: signals mid-run, dead lock holders, timeouts, non-SSH ports, injected
values, bad flags and settings. Each case checks what is left behind, not only the exit code.

Real parts: the loopback sshd fleet, the real `invoke` CLI in its own process (signalled like
a terminal's Ctrl-C would: the whole process group), real host locks, real process groups.
Simulated, because a real build takes far too long for a test: the slow step. The host's
`ansible_python_interpreter` is a small shell wrapper (written by `slow_python`) that, while a
gate file exists, sleeps before running the remote script it was handed (the host lock's
script excepted), as a long compile would; it records its own and the sleeper's pids so the
test can tell whether anything was left running on the host.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from sm120kit.connection import ConnectOptions, connect
from sm120kit.host import Host
from tests.conftest import REPO, invoke_env, json_of, run_invoke
from tests.support.fleet import Fleet

CUDA_130 = Path("/usr/local/cuda-13.0/bin/nvcc")
SSH_HOST = "gpu6"  # RTX PRO 6000 pair on driver 580.95.05: recipe r580, CUDA 13.0

SLOW_PY = """#!/bin/sh
# tests only: a host whose remote steps are slow while {gate} exists
case "$*" in *'"action": "'*) exec {python} "$@";; esac
if [ -e {gate} ]; then
  echo $$ > {dir}/wrapper.pid
  sleep 300 &
  echo $! > {dir}/sleeper.pid
  wait
fi
exec {python} "$@"
"""


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie has finished: it counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def slow_python(tmp: Path) -> tuple[Path, Path]:
    """The slow interpreter wrapper and its gate file (present: slow)."""
    gate = tmp / "gate"
    gate.write_text("slow\n")
    wrapper = tmp / "slowpy"
    wrapper.write_text(SLOW_PY.format(gate=gate, python=sys.executable, dir=tmp))
    wrapper.chmod(0o755)
    return wrapper, gate


def inventory(tmp: Path, fleet: Fleet, name: str, **host_vars: Any) -> Path:
    """An inventory of one host: fleet host `name`, or `local`; fresh work_root under tmp."""
    if name == "local":
        entry: dict[str, Any] = {
            "ansible_connection": "local",
            "target_driver": "580.95.05",
            "target_arch": "12.0",
        }
    else:
        entry = dict(fleet.all_vars(fleet.by_name(name)))
    entry.update({"work_root": str(tmp / "work"), **host_vars})
    inv = tmp / "hosts.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {name: entry}}}))
    return inv


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """The CLI in its own session, so a signal to its group is a terminal's Ctrl-C."""
    return subprocess.Popen(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def cli(args: list[str], env: dict[str, str]) -> tuple[int, dict[str, Any], str]:
    proc = run_invoke([*args, "--json"], env, timeout=300)
    try:
        doc = json_of(proc)
    except (AssertionError, ValueError):
        raise AssertionError(f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}") from None
    return proc.returncode, doc, proc.stderr


needs_cuda = pytest.mark.skipif(not CUDA_130.exists(), reason="needs the system CUDA 13.0")


# --------------------------------------------------------------------------- signals


@needs_cuda
@pytest.mark.parametrize(
    ("where", "sig"),
    [("ssh", signal.SIGTERM), ("local", signal.SIGINT), ("ssh", signal.SIGINT)],
)
def test_signal_mid_run_is_orderly_and_the_rerun_completes(
    fleet: Fleet, tmp_path: Path, where: str, sig: signal.Signals
) -> None:
    name = SSH_HOST if where == "ssh" else "local"
    wrapper, gate = slow_python(tmp_path)
    inv = inventory(tmp_path, fleet, name, ansible_python_interpreter=str(wrapper))
    env = invoke_env(fleet, tmp_path)
    proc = start(["install-cuda", "-H", name, "-i", str(inv), "--json"], env)
    try:
        wait_for(tmp_path / "sleeper.pid")
        assert (tmp_path / "work" / "locks" / "run.lock").is_dir()  # held mid-run
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)  # Ctrl-C: the terminal signals the whole group
        else:
            proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err
    assert "Traceback" not in err
    doc = json.loads(out)
    assert doc["interrupted"] == sig.name
    entry = doc["hosts"][name]
    assert entry["status"] == "interrupted" and sig.name in entry["error"]
    assert doc["summary"]["interrupted"] == 1
    saved = json.loads((Path(doc["run_dir"]) / "result.json").read_text())
    assert saved["hosts"][name]["status"] == "interrupted"
    assert "interrupted" in err  # the recap says so
    # Nothing left running on the host, and the lock is released.
    for pidfile in ("wrapper.pid", "sleeper.pid"):
        pid = int((tmp_path / pidfile).read_text())
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pid), f"{pidfile} {pid} still runs"
    assert not (tmp_path / "work" / "locks" / "run.lock").exists()

    gate.unlink()
    code, doc, err = cli(["install-cuda", "-H", name, "-i", str(inv)], env)
    assert code == 0, (doc, err)
    assert doc["hosts"][name]["status"] == "ok"


@needs_cuda
def test_killed_controller_lock_is_taken_over(fleet: Fleet, tmp_path: Path) -> None:
    """SIGKILL leaves the lock behind; the next run on this controller sees its holder's pid
    is gone and takes the lock over at once, saying so."""
    wrapper, gate = slow_python(tmp_path)
    inv = inventory(tmp_path, fleet, SSH_HOST, ansible_python_interpreter=str(wrapper))
    env = invoke_env(fleet, tmp_path)
    proc = start(["install-cuda", "-H", SSH_HOST, "-i", str(inv), "--json"], env)
    try:
        wait_for(tmp_path / "sleeper.pid")
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    owner = json.loads((tmp_path / "work" / "locks" / "run.lock" / "owner.json").read_text())
    assert owner["pid"] == proc.pid and owner["boot_id"] and owner["controller"]
    gate.unlink()
    code, doc, err = cli(["install-cuda", "-H", SSH_HOST, "-i", str(inv)], env)
    assert code == 0, (doc, err)
    notes = doc["hosts"][SSH_HOST]["lock_notes"]
    assert f"run pid {proc.pid}" in notes[0] and "gone" in notes[0]
    assert f"run pid {proc.pid}" in err
    # The dead run's remote command was killed with the takeover.
    sleeper = int((tmp_path / "sleeper.pid").read_text())
    assert not alive(sleeper)


def test_ssh_timeout_kills_the_remote_command(fleet: Fleet, tmp_path: Path) -> None:
    h = fleet.by_name("gpu8")
    host = Host("gpu8", fleet.all_vars(h))
    conn = connect(host, ConnectOptions(known_hosts=str(fleet.known_hosts)))
    pidfile = tmp_path / "pid"
    try:
        res = conn.run(f"sh -c 'echo $$ > {pidfile}; exec sleep 300' & wait", timeout=1.5)
    finally:
        conn.close()
    assert res.exit_code == 124
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)


def test_local_timeout_kills_the_command_group(tmp_path: Path) -> None:
    conn = connect(Host("local", {"ansible_connection": "local"}), ConnectOptions())
    pidfile = tmp_path / "pid"
    res = conn.run(f"sh -c 'echo $$ > {pidfile}; exec sleep 300' & wait", timeout=1.0)
    assert res.exit_code == 124
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)


# --------------------------------------------------------------------------- ports, disks


class GarbageServer:
    """A TCP listener on 127.0.0.x that answers every connection with HTTP-ish garbage."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\nnot ssh\r\n")
            finally:
                conn.close()

    def close(self) -> None:
        self.sock.close()


def test_port_that_does_not_speak_ssh(fleet: Fleet, tmp_path: Path) -> None:
    server = GarbageServer("127.0.0.11")
    try:
        inv = tmp_path / "hosts.yaml"
        inv.write_text(
            yaml.safe_dump(
                {
                    "all": {
                        "vars": fleet.common_vars(),
                        "hosts": {
                            "web": {"ansible_host": "127.0.0.11", "ansible_port": server.port}
                        },
                    }
                }
            )
        )
        proc = run_invoke(
            ["facts", "-H", "web", "-i", str(inv), "--json"], invoke_env(fleet, tmp_path)
        )
    finally:
        server.close()
    assert proc.returncode == 2
    doc = json_of(proc)
    entry = doc["hosts"]["web"]
    assert entry["status"] == "unreachable"
    assert "does not speak SSH" in entry["error"] and "\n" not in entry["error"]
    assert "Traceback" not in proc.stderr and "No existing session" not in proc.stderr
    assert doc["summary"]["unreachable"] == 1 and doc["summary"]["failed"] == 0
    assert "unreachable=1" in proc.stderr and "failed=0" in proc.stderr  # counted once
