"""`invoke preflight --stop-warm` (and the `sm120kit` command's same task): stop a host's warm
resolution servers (sm120kit/remote/lib/warm.py ``stop_all``) over a real OpenSSH sshd on
loopback; idempotent ("no warm server" the second time).

The server is the real one (remote/lib/in_target/resolve_server.py, started by
``warm.start`` as preflight starts it) in this machine's python, with its real torch (cpu).
Only sglang is a stand-in: a three-module package that defines the names the server imports
(``sglang.srt.server_args.prepare_server_args``, ``sglang.srt.arg_groups.pipeline``), since
CI has no sglang 0.5.23 env and a server whose import fails exits by itself. The host gets its
own TMPDIR (sshd SetEnv), so no other warm server of this user is touched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from sm120kit.remote.lib import warm
from tests.conftest import REPO, invoke_env, json_of, run_invoke
from tests.support.fleet import Fleet

STANDIN = {
    "sglang/__init__.py": "__version__ = '0.0.0+standin'\n",
    "sglang/srt/__init__.py": "",
    "sglang/srt/server_args.py": "def prepare_server_args(argv):\n    raise SystemExit(2)\n",
    "sglang/srt/arg_groups/__init__.py": "",
    "sglang/srt/arg_groups/pipeline.py": "",
}


@pytest.fixture
def short_tmp() -> object:
    # A unix socket path has 108 bytes: pytest's tmp_path is too long for one.
    path = tempfile.mkdtemp(prefix="pfsw-", dir="/tmp")
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


def _start_server(tmp: Path, standin: Path) -> tuple[str, int]:
    """A real warm server listening in `tmp`'s socket directory; (socket path, its pid)."""
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=str(standin))
    code = (
        "import json, os, sys, tempfile; tempfile.tempdir = None\n"
        "from sm120kit.remote.lib import warm\n"
        "where = warm.socket_dir(); path = os.path.join(where, 'a' * 32)\n"
        "ok = warm.start(sys.executable, path, {'cc': [12, 0], 'memory_mib': 1024},"
        " dict(os.environ), None, 'test', 300, 120)\n"
        "print(json.dumps([ok, path]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True
    )
    ok, path = json.loads(out.stdout)
    assert ok, Path(path + ".log").read_text() if Path(path + ".log").exists() else out.stderr
    # The server answers only once sglang's stand-in is imported: ask it for nothing.
    doc = warm.ask(path, {"cases": [], "fields": []}, 120)
    assert doc is not None and doc["ran"] is True, doc
    return path, _pid(path)


def _pid(path: str) -> int:
    """The pid of the server of `path`: the process whose command line (its JSON args) names
    that socket."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(f'"socket": "{path}"'.encode() in w for w in words):
            return int(entry.name)
    raise AssertionError(f"no process serves {path}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_stop_warm_over_ssh_is_idempotent(tmp_path: Path, short_tmp: Path) -> None:
    standin = tmp_path / "standin"
    for rel, text in STANDIN.items():
        (standin / rel).parent.mkdir(parents=True, exist_ok=True)
        (standin / rel).write_text(text)
    fleet = Fleet(
        tmp_path / "fleet",
        [("pfsw", "127.0.0.2", "nogpu")],
        host_env={"pfsw": {"TMPDIR": str(short_tmp)}},
    ).start()
    try:
        path, pid = _start_server(short_tmp, standin)
        assert _alive(pid)
        env = invoke_env(fleet, tmp_path)
        first = run_invoke(["preflight", "--stop-warm", "-H", "pfsw", "--json"], env, timeout=120)
        assert first.returncode == 0, first.stderr
        host = json_of(first)["hosts"]["pfsw"]
        assert host["warm"] == {"stopped": [pid], "stale": 0}
        assert host["steps"][0]["message"] == f"stopped 1 warm server(s) (pid {pid})"
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid) and not os.path.exists(path)
        # Again, through the `sm120kit` command's same task: nothing left to stop.
        second = subprocess.run(
            [sys.executable, "-m", "sm120kit.cli", "preflight", "--stop-warm", "-H", "pfsw"],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=120,
        )
        assert second.returncode == 0, second.stderr
        assert "no warm server" in second.stdout + second.stderr
    finally:
        fleet.stop()


def test_a_stale_socket_name_is_removed(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A name no server answers on (a server killed, /tmp kept) is removed, and counted."""
    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))
    where = warm.socket_dir()
    assert where is not None
    stale = Path(where) / ("b" * 32)
    stale.write_text("")
    (Path(where) / "notes.txt").write_text("not a server's")
    assert warm.stop_all(5) == {"stopped": [], "stale": 1, "error": None}
    assert not stale.exists() and (Path(where) / "notes.txt").exists()
    assert warm.stop_all(5) == {"stopped": [], "stale": 0, "error": None}
