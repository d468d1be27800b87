"""`invoke preflight --stop-warm` (issue 44 item 5): the hosts' warm resolution servers
(sm120kit/remote/lib/warm.py) are stopped on request, idempotently.

Real parts: a real warm server (in_target/resolve_server.py run by this machine's python,
which has no sglang: it still listens until asked), real unix sockets, the real task over a
real OpenSSH sshd on loopback whose sessions get their own TMPDIR (so that no other test's or
person's warm server under /tmp is touched). Nothing simulated but the GPU (nvidia-smi stub).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sm120kit.remote.lib import warm
from tests.conftest import REPO, invoke_env, json_of, run_invoke
from tests.support.fleet import Fleet


@pytest.fixture
def short_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A TMPDIR short enough for a unix socket path (108 bytes), this process's too."""
    path = tempfile.mkdtemp(prefix="sw-", dir="/tmp")
    monkeypatch.setenv("TMPDIR", path)
    monkeypatch.setattr(tempfile, "tempdir", None)
    yield path
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            os.unlink(os.path.join(root, name))
        for name in dirs:
            os.rmdir(os.path.join(root, name))
    os.rmdir(path)


def _server(key: str) -> str:
    """A real warm server listening on this user's socket `key` (120 s idle)."""
    where = warm.socket_dir()
    assert where is not None
    path = os.path.join(where, key)
    assert warm.start(sys.executable, path, {"cc": [12, 0]}, None, None, "x", 120, 60), path
    return path


def _stale(key: str) -> str:
    """A socket name nobody listens on (a server killed: its name left behind)."""
    where = warm.socket_dir()
    assert where is not None
    path = os.path.join(where, key)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.close()
    return path


def _alive(path: str) -> bool:
    """Whether a process's command line names `path` (the server is given it as JSON)."""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if path.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return True
            except OSError:
                pass
    return False


def _gone(path: str) -> bool:
    deadline = time.monotonic() + 30
    while _alive(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_stop_all_stops_servers_removes_stale_names_and_then_finds_none(short_tmp: str) -> None:
    live, stale = _server("a" * 32), _stale("b" * 32)
    got = warm.stop_all(timeout=30)
    assert got == {"stopped": ["a" * 32], "stale": ["b" * 32], "error": None}
    assert not os.path.exists(live) and not os.path.exists(stale)
    assert not os.path.exists(live + ".log") and _gone(live)
    assert warm.stop_all() == {"stopped": [], "stale": [], "error": None}


def test_invoke_preflight_stop_warm_over_ssh(tmp_path: Path, short_tmp: str) -> None:
    """`invoke preflight -H gpu1 --stop-warm` over a real sshd: the host's server is stopped
    (changed); the second run, by the `sm120kit` command, says "no warm server" (nothing
    done); a launch with it is one line, exit 1."""
    host_tmp = tempfile.mkdtemp(prefix="h-", dir=short_tmp)
    fleet = Fleet(
        tmp_path / "fleet",
        [("gpu1", "127.0.0.2", "pro6000x2")],
        host_env={"gpu1": {"TMPDIR": host_tmp}},
    ).start()
    try:
        os.environ["TMPDIR"] = host_tmp  # the server lives where the host's sessions look
        tempfile.tempdir = None
        path = _server("c" * 32)
        env = invoke_env(fleet, tmp_path)
        first = run_invoke(["preflight", "-H", "gpu1", "--stop-warm", "--json"], env, timeout=120)
        assert first.returncode == 0, first.stdout + first.stderr
        host = json_of(first)["hosts"]["gpu1"]
        assert host["stop_warm"] == {"stopped": ["c" * 32], "stale": []}
        assert host["status"] == "changed"
        assert not os.path.exists(path) and _gone(path)
        # The `sm120kit` command (python -m sm120kit.cli) runs the same task.
        second = subprocess.run(
            [sys.executable, "-m", "sm120kit.cli", "--search-root", str(REPO), "preflight", "-H",
             "gpu1", "--stop-warm"],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert second.returncode == 0, second.stdout + second.stderr
        assert "no warm server" in second.stdout + second.stderr
        both = run_invoke(
            ["preflight", "-H", "gpu1", "--stop-warm", "--", "sglang", "serve", "--model", "m"],
            env,
            timeout=60,
        )
        assert both.returncode == 1 and "Traceback" not in both.stdout + both.stderr
        assert "--stop-warm stops the warm servers: give no launch" in both.stderr
    finally:
        fleet.stop()
