"""`invoke serve-check` over the SSH fleet and locally, against real servers on loopback.

The servers are tests/fixtures/servers/fake_llm_server.py processes bound to 127.0.0.1. The
fleet hosts share this machine's network namespace and /proc, so the probe that gpu1's sshd
runs sees the same 127.0.0.1:<port> and the same processes as the `local` host does: one
invocation checks both. Servers are killed with their process group when a test ends.
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sm120kit.serve import HUNG, NOT_LISTENING, READY, WARMING_UP
from tests.conftest import invoke_env, json_of, run_invoke
from tests.support.fake_servers import Spawn, free_port, spawner
from tests.support.fleet import Fleet

# In the command line once the interpreter has exec'd (before that it is pytest's).
LAUNCHED = re.compile(rb"fake_llm_server|sglang\.launch_server")
HOSTS = ("gpu1", "local")

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start fake servers; each (with its children) is killed at teardown."""
    yield from spawner(90)


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    for _ in range(300):
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} never happened")


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def started(proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, "fake server exited early"
    return LAUNCHED.search(Path(f"/proc/{proc.pid}/cmdline").read_bytes()) is not None


def serve_check(
    fleet: Fleet, tmp: Path, url: str, *, json: bool = True, timeout: str = "5"
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    argv = ["serve-check", "-H", ",".join(HOSTS), "--url", url, "--timeout", timeout]
    proc = run_invoke(argv + (["--json"] if json else []), invoke_env(fleet, tmp))
    return proc, (json_of(proc) if json else {})


def test_ready_after_warmup(fleet: Fleet, spawn: Spawn, tmp_path: Path) -> None:
    port = free_port()
    spawn("--mode", "ready", "--port", str(port), "--delay", "2", "--model", "org/m-7b")
    proc, doc = serve_check(fleet, tmp_path, f"http://127.0.0.1:{port}")
    assert proc.returncode == 0, proc.stderr
    for name in HOSTS:
        host = doc["hosts"][name]
        assert host["status"] == "ok" and host["error"] is None
        serve = host["serve"]
        assert serve["verdict"] == READY and serve["ready"] is True
        assert serve["models"] == ["org/m-7b"] and serve["health"] == 200
        assert serve["evidence"] is None
        [step] = host["steps"]
        assert step["name"] == "serve-check" and step["message"].startswith("ready: ready after")


def test_never_answers_is_hung(fleet: Fleet, spawn: Spawn, tmp_path: Path) -> None:
    """Accepts connections, never answers: each host fails with the verdict and the reason."""
    port = free_port()
    server = spawn("--mode", "silent", "--port", str(port))
    wait_until(lambda: listening(port), f"port {port} opening")
    proc, doc = serve_check(fleet, tmp_path, f"http://127.0.0.1:{port}")
    assert proc.returncode == 2
    for name in HOSTS:
        host = doc["hosts"][name]
        serve = host["serve"]
        assert host["status"] == "failed"
        assert serve["verdict"] == HUNG, serve["reason"]
        assert host["error"] == f"{HUNG}: {serve['reason']}"
        assert "GET /health times out" in serve["reason"]
        assert "--disable-custom-all-reduce" in serve["hint"]
        [found] = serve["evidence"]["processes"]
        assert found["pid"] == server.pid and found["listening"] == [port]


def test_not_listening(fleet: Fleet, tmp_path: Path) -> None:
    """Nothing on the port and no server process: the table says so, exit 2."""
    port = free_port()
    proc, _ = serve_check(fleet, tmp_path, f"http://127.0.0.1:{port}", json=False)
    assert proc.returncode == 2
    assert "NOT LISTENING" in proc.stdout
    assert f"nothing listens on port {port}" in proc.stdout
    assert proc.stdout.count(f"http://127.0.0.1:{port}: NOT LISTENING") == len(HOSTS)
    for name in HOSTS:  # the recap line per host
        assert re.search(rf"^{name} +: ok=0 .*failed=1", proc.stderr, re.M), proc.stderr
    proc, doc = serve_check(fleet, tmp_path, f"http://127.0.0.1:{port}", timeout="2")
    for name in HOSTS:
        host = doc["hosts"][name]
        assert host["serve"]["verdict"] == NOT_LISTENING, host["serve"]["reason"]
        assert host["error"].startswith(f"{NOT_LISTENING}: nothing listens on port {port}")


@pytest.mark.parametrize(("mode", "verdict"), [("busy", WARMING_UP), ("sleep", HUNG)])
def test_busy_loop_is_warming_up_blocked_is_hung(
    fleet: Fleet, spawn: Spawn, tmp_path: Path, mode: str, verdict: str
) -> None:
    """No port in either; found as `python -m sglang.launch_server`, told apart by CPU time."""
    server = spawn("--mode", mode, as_sglang=True)
    wait_until(lambda: started(server), "server start")
    time.sleep(0.3)  # past its imports, into the loop or the sleep
    proc, doc = serve_check(fleet, tmp_path, f"http://127.0.0.1:{free_port()}", timeout="3")
    assert proc.returncode == 2  # warming up is not ready either
    for name in HOSTS:
        serve = doc["hosts"][name]["serve"]
        assert serve["verdict"] == verdict, serve["reason"]
        assert server.pid in [p["pid"] for p in serve["evidence"]["processes"]]
        assert doc["hosts"][name]["error"].startswith(f"{verdict}: pid ")


def test_bad_url_is_bad_input(fleet: Fleet, tmp_path: Path) -> None:
    """Refused before any host is touched: exit 1 and one JSON document with the error."""
    proc, doc = serve_check(fleet, tmp_path, "ftp://127.0.0.1:1")
    assert proc.returncode == 1
    assert doc["hosts"] == {} and "--url 'ftp://127.0.0.1:1'" in doc["error"]


@pytest.mark.parametrize("how", ["pid", "process-match"])
def test_server_named_by_pid_or_command_line(
    fleet: Fleet, spawn: Spawn, tmp_path: Path, how: str
) -> None:
    """A server whose command line looks like nothing known is found through --pid or
    --process-match, and judged by its CPU time (how busy it still is right after its start
    depends on the machine's load, so either judgement counts)."""
    tag = f"my-own-server-{uuid.uuid4().hex[:8]}"
    server = spawn("--mode", "sleep", "--tag", tag)
    wait_until(lambda: started(server), "server start")
    extra = ["--pid", str(server.pid)] if how == "pid" else ["--process-match", tag]
    url = f"http://127.0.0.1:{free_port()}"
    proc = run_invoke(
        ["serve-check", "-H", ",".join(HOSTS), "--url", url, "--timeout", "2", "--json", *extra],
        invoke_env(fleet, tmp_path),
    )
    assert proc.returncode == 2
    for name in HOSTS:
        serve = json_of(proc)["hosts"][name]["serve"]
        assert serve["verdict"] in (HUNG, WARMING_UP), serve["reason"]
        assert server.pid in [p["pid"] for p in serve["evidence"]["processes"]]
