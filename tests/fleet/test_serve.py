"""serve-check against real servers on loopback: ready, silent, absent, busy and idle ones.

The servers are `tests/fixtures/servers/fake_llm_server.py` subprocesses bound to 127.0.0.1
on free ports; each is killed (with its process group) when its test ends and exits by
itself after a minute regardless. Tests take a `conn` fixture so SSH variants can reuse them.
"""

from __future__ import annotations

import glob
import io
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sm120kit.errors import Sm120Error
from sm120kit.inventory.host import Host
from sm120kit.output.checks import render_serve_result
from sm120kit.runner.host_context import HostContext
from sm120kit.runner.pool import outside_run
from sm120kit.serve import (
    HANG_HINT,
    HUNG,
    NOT_LISTENING,
    READY,
    UNKNOWN,
    WARMING_UP,
    diagnose,
    judge,
    serve_check,
)
from tests.support.fake_servers import Spawn, free_port, spawner

# In the command line once the interpreter has exec'd (before that it is pytest's).
LAUNCHED = re.compile(rb"fake_llm_server|sglang\.launch_server")
# Short but not flaky: a poll that hits a silent server costs one request timeout.
FAST: dict[str, Any] = {"interval": 0.5, "request_timeout": 1.0}

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["local"])
def conn(request: pytest.FixtureRequest) -> Iterator[HostContext]:
    """The host context the probes run through, outside a run (the lead adds SSH-fleet params)."""
    ctx = outside_run(Host("local", vars={"ansible_connection": "local"}))
    yield ctx
    ctx.close()


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start fake servers; every one (and its children) is killed at teardown."""
    yield from spawner(60)


def wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    """Block until the port accepts a connection (bounded), so deadlines measure the server."""
    for _ in range(200):
        assert proc.poll() is None, "fake server exited early"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"port {port} never opened")


def wait_started(proc: subprocess.Popen[bytes], children: int = 0) -> None:
    """Block until the interpreter has finished starting (and spawned its children)."""
    for _ in range(200):
        assert proc.poll() is None, "fake server exited early"
        kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        if (
            len(kids) >= children
            and LAUNCHED.search(Path(f"/proc/{proc.pid}/cmdline").read_bytes()) is not None
        ):
            time.sleep(0.3)  # past imports, into the loop / sleep
            return
        time.sleep(0.05)
    raise AssertionError("fake server did not start")


def tag() -> str:
    return "t" + uuid.uuid4().hex[:12]


@pytest.mark.parametrize("listen_early", [False, True], ids=["port-closed", "answers-503"])
def test_ready_after_warmup(conn: HostContext, spawn: Spawn, listen_early: bool) -> None:
    port = free_port()
    extra = ["--listen-early"] if listen_early else []
    spawn("--mode", "ready", "--port", str(port), "--delay", "2", "--model", "org/m-7b", *extra)
    result = serve_check(conn, f"http://127.0.0.1:{port}", timeout=30, **FAST)
    assert result["ready"] is True
    assert result["verdict"] == READY
    assert result["health"] == 200
    assert result["models"] == ["org/m-7b"]
    assert result["attempts"] >= 2  # it was not ready on the first poll
    assert result["last_error"] is None
    assert result["evidence"] is None


def test_silent_server_is_hung(conn: HostContext, spawn: Spawn) -> None:
    """Accepts connections, never answers, blocked in accept(): hung, not warming up."""
    port = free_port()
    proc = spawn("--mode", "silent", "--port", str(port))
    wait_listening(port, proc)
    result = serve_check(conn, f"http://127.0.0.1:{port}", timeout=2, **FAST)
    assert result["ready"] is False
    assert result["verdict"] == HUNG, result["reason"]
    assert "times out" in result["reason"]
    assert "timed out" in result["last_error"]
    assert result["hint"].startswith(HANG_HINT)
    assert "--disable-custom-all-reduce" in result["hint"]
    assert "NCCL_P2P_DISABLE=1" in result["hint"]
    evidence = result["evidence"]
    assert evidence["port_open"] is True
    assert evidence["found_by"] == f"listening on port {port}"
    [server] = evidence["processes"]
    assert server["pid"] == proc.pid
    assert server["listening"] == [port]
    assert server["cpu_advancing"] is False
    assert server["state"] == "S"
    assert port in {s["port"] for s in evidence["listening_ports"]}
    assert evidence["gpu"] is None or isinstance(evidence["gpu"], list)

    out = io.StringIO()
    from rich.console import Console

    Console(file=out, width=200, color_system=None).print(render_serve_result(result))
    text = out.getvalue()
    assert "HUNG" in text and str(proc.pid) in text and "NCCL_P2P_DISABLE=1" in text


def test_nothing_running_is_not_listening(conn: HostContext) -> None:
    port = free_port()
    marker = f"no-such-server-{tag()}"  # also appears in the probe's own argv: must be skipped
    result = serve_check(
        conn, f"http://127.0.0.1:{port}", timeout=1.5, process_match=marker, **FAST
    )
    assert result["ready"] is False
    assert result["verdict"] == NOT_LISTENING
    assert "connection refused" in result["last_error"]
    assert result["evidence"]["processes"] == []
    assert result["evidence"]["port_open"] is False
    assert f"nothing listens on port {port}" in result["reason"]


def test_exited_pid_is_not_listening(conn: HostContext) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    diag = diagnose(conn, f"http://127.0.0.1:{free_port()}", pid=proc.pid, sample_s=0.2)
    assert diag["missing_pids"] == [proc.pid]
    verdict, reason, _ = judge(diag)
    assert verdict == NOT_LISTENING
    assert f"{proc.pid} has exited" in reason


@pytest.mark.parametrize(
    ("mode", "verdict", "advancing"),
    [("busy", WARMING_UP, True), ("sleep", HUNG, False)],
)
def test_busy_is_warming_up_idle_is_hung(
    conn: HostContext, spawn: Spawn, mode: str, verdict: str, advancing: bool
) -> None:
    """No port in either; CPU time advancing is what separates loading from a hang."""
    port = free_port()
    mark = tag()
    proc = spawn("--mode", mode, "--child", "--tag", mark)
    wait_started(proc, children=1 if mode == "sleep" else 0)
    result = serve_check(
        conn, f"http://127.0.0.1:{port}", timeout=1.5, process_match=f"--tag {mark}", **FAST
    )
    assert result["verdict"] == verdict, result["reason"]
    [server] = result["evidence"]["processes"]
    assert server["pid"] == proc.pid
    assert server["listening"] == []
    assert server["cpu_advancing"] is advancing
    assert server["threads"] >= 1 and server["rss_mib"] > 0
    if mode == "sleep":
        # The child matches the pattern too, but is reported under its parent, once.
        assert [c["ppid"] for c in server["children"]] == [proc.pid]
        assert all(c["cpu_advancing"] is False for c in server["children"])
        assert f"nothing listens on port {port}" in result["reason"]
        assert "idle" in result["reason"]
    else:
        assert "working" in result["reason"]
        assert result["hint"] is None


def test_default_patterns_find_launch_server(conn: HostContext, spawn: Spawn) -> None:
    """Without pid or pattern, `python -m sglang.launch_server` is a candidate server."""
    proc = spawn("--mode", "sleep", as_sglang=True)
    wait_started(proc)
    diag = diagnose(conn, f"http://127.0.0.1:{free_port()}", sample_s=0.2, py_spy=False)
    assert proc.pid in [p["pid"] for p in diag["processes"]]
    assert diag["found_by"].startswith("launches a program or module matching")


def test_a_command_that_only_mentions_sglang_is_no_server(conn: HostContext, spawn: Spawn) -> None:
    """The default search judges what a command launches, not every word of it: a process
    whose arguments merely name sglang (as a running sgl-kernel build's JSON argument names
    sglang's repository) is not taken for a server, while `--process-match` still sees the
    whole command line."""
    mark = f"sglang.launch_server-{tag()}"
    proc = spawn("--mode", "sleep", "--tag", mark)
    wait_started(proc)
    url = f"http://127.0.0.1:{free_port()}"
    diag = diagnose(conn, url, sample_s=0.2, py_spy=False)
    assert proc.pid not in [p["pid"] for p in diag["processes"]]
    diag = diagnose(conn, url, process_match=re.escape(mark), sample_s=0.2, py_spy=False)
    assert [p["pid"] for p in diag["processes"]] == [proc.pid]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            ["/usr/bin/python3", "-m", "sglang.launch_server", "--model-path", "m"],
            "python3 sglang.launch_server",
        ),
        (
            ["python3.11", "-u", "-X", "dev", "-msglang.launch_server"],
            "python3.11 sglang.launch_server",
        ),
        (
            ["/opt/venv/bin/python", "/srv/sglang/launch.py", "--port", "30000"],
            "python /srv/sglang/launch.py",
        ),
        (["python3", "-", '{"url": "https://github.com/sgl-project/sglang"}'], "python3"),
        (["python3", "-c", "import sglang"], "python3"),
        (["python3", "-uc", "import sglang"], "python3"),
        (["python3", "-Bum", "sglang.launch_server"], "python3 sglang.launch_server"),
        (
            ["python3", "-Wignore", "-uX", "dev", "-um", "vllm.entrypoints"],
            "python3 vllm.entrypoints",
        ),
        (
            ["python3", "--check-hash-based-pycs", "always", "/srv/serve.py"],
            "python3 /srv/serve.py",
        ),
        (["python3", "-I"], "python3"),
        (["/usr/local/bin/vllm", "serve", "org/m"], "vllm"),
        (["grep", "-r", "sglang", "."], "grep"),
        ([], ""),
    ],
)
def test_launch_words(argv: list[str], words: str) -> None:
    """What the default server search looks at: the program, and a Python's module or script."""
    from sm120kit.remote.serve_probe import launch_words

    assert launch_words(argv) == words


def test_server_on_another_port_is_named(conn: HostContext, spawn: Spawn) -> None:
    """A server up on port A while the URL says B: the reason names A."""
    port_a, port_b = free_port(), free_port()
    mark = tag()
    proc = spawn("--mode", "ready", "--port", str(port_a), "--delay", "0", "--tag", mark)
    wait_listening(port_a, proc)
    diag = diagnose(conn, f"http://127.0.0.1:{port_b}", process_match=f"--tag {mark}", sample_s=0.3)
    [server] = diag["processes"]
    assert server["listening"] == [port_a]
    verdict, reason, _ = judge(diag)
    assert verdict in (HUNG, WARMING_UP)
    assert f"listens on {port_a}, not {port_b}" in reason


def test_py_spy_dumps_server_and_children(conn: HostContext, spawn: Spawn) -> None:
    proc = spawn("--mode", "sleep", "--child", "--tag", (mark := tag()))
    wait_started(proc, children=1)
    diag = diagnose(
        conn, f"http://127.0.0.1:{free_port()}", process_match=f"--tag {mark}", sample_s=0.2
    )
    if not diag["py_spy_available"]:
        pytest.skip("py-spy is not installed on the host (pip install py-spy)")
    [server] = diag["processes"]
    dumps = [server["py_spy"]] + [c["py_spy"] for c in server["children"]]
    if any(d.startswith("py-spy failed") for d in dumps):
        pytest.skip(f"py-spy cannot attach here (ptrace permissions?): {dumps[0][:200]}")
    assert len(dumps) == 2
    for dump in dumps:
        assert "Thread" in dump and "fake_llm_server.py" in dump


def test_gpu_evidence_from_nvidia_smi(conn: HostContext, spawn: Spawn, tmp_path: Path) -> None:
    """SIMULATED: no GPU here, so a stand-in nvidia-smi prints what a 2-GPU host at 0% shows."""
    if not conn.host.is_local:
        pytest.skip("the stand-in nvidia-smi lives on the controller")
    proc = spawn("--mode", "sleep", "--tag", (mark := tag()))
    wait_started(proc)
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  --query-compute-apps=*) echo '{proc.pid}, 15000'; echo '{proc.pid}, 15000' ;;\n"
        "  *) echo '0, 0, 15500'; echo '1, 0, 15400' ;;\n"
        "esac\n"
    )
    fake.chmod(0o755)
    diag = diagnose(
        conn,
        f"http://127.0.0.1:{free_port()}",
        process_match=f"--tag {mark}",
        nvidia_smi=str(fake),
        sample_s=0.2,
        py_spy=False,
    )
    assert diag["gpu"] == [
        {"index": 0, "utilization_pct": 0, "memory_used_mib": 15500},
        {"index": 1, "utilization_pct": 0, "memory_used_mib": 15400},
    ]
    assert diag["processes"][0]["gpu_memory_mib"] == 30000
    verdict, reason, hint = judge(diag)
    assert verdict == HUNG
    assert "GPU 0% on all 2" in reason and "30000 MiB of GPU memory held" in reason
    assert hint is not None and hint.startswith("2 GPUs here: ")
    assert "py-spy not found" in hint  # diagnosed with py_spy=False


def test_unknown_when_port_owner_invisible() -> None:
    """A diagnosis as a non-root user sees it when the port's owner is someone else's."""
    diag = {
        "port": 8000,
        "port_open": True,
        "port_owner_visible": False,
        "processes": [],
        "missing_pids": [],
        "poll": {"ready": False, "health": {"error": "timeout", "status": None}},
    }
    verdict, reason, _ = judge(diag)
    assert verdict == UNKNOWN
    assert "not visible" in reason


@pytest.mark.parametrize(
    ("url", "timeout"),
    [("127.0.0.1:8000", 5), ("ftp://127.0.0.1:8000", 5), ("http://h:port", 5), ("http://h:1", 0)],
)
def test_bad_arguments_are_one_line_errors(conn: HostContext, url: str, timeout: float) -> None:
    with pytest.raises(Sm120Error) as info:
        serve_check(conn, url, timeout=timeout)
    assert "\n" not in str(info.value)


def _python38() -> str | None:
    candidates = glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8"))
    candidates += ["/usr/bin/python3.8", "/usr/local/bin/python3.8"]
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


def test_probe_runs_on_python38(conn: HostContext, spawn: Spawn) -> None:
    """Hosts may only have an old system Python: the probe must stay 3.8-compatible."""
    py38 = _python38()
    if py38 is None or not conn.host.is_local:
        pytest.skip("no python3.8 here")
    port = free_port()
    proc = spawn("--mode", "ready", "--port", str(port), "--delay", "0")
    wait_listening(port, proc)
    url = f"http://127.0.0.1:{port}"
    ready = conn.script("serve_probe", {"mode": "poll", "url": url}, python=py38)
    assert ready["ready"] is True and ready["models"]["ids"] == ["fake/model-1"]
    diag = conn.script(
        "serve_probe", {"mode": "diagnose", "url": url, "sample_s": 0.2}, python=py38
    )
    assert [p["pid"] for p in diag["processes"]] == [proc.pid]
