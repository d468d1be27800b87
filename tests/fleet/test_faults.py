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

from sm120kit.inventory.host import Host
from sm120kit.runner.connection import ConnectOptions, connect
from tests.conftest import REPO, invoke_env, json_of, run_invoke
from tests.support.fleet import Fleet

CUDA_130 = Path("/usr/local/cuda-13.0/bin/nvcc")
SSH_HOST = "gpu6"  # RTX PRO 6000 pair on driver 580.95.05: recipe r580, CUDA 13.0

SLOW_PY = """#!/bin/sh
# tests only: a host whose remote steps are slow while {gate} exists. A script's arguments
# travel on stdin with its program: scripts with an "action" (the run lock's) run at once.
prog=$(mktemp)
cat > "$prog"
if grep -q '"action": "' "$prog"; then exec {python} "$@" < "$prog"; fi
if [ -e {gate} ]; then
  echo $$ > {dir}/wrapper.pid
  sleep 300 &
  echo $! > {dir}/sleeper.pid
  wait
fi
exec {python} "$@" < "$prog"
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
    [
        ("ssh", signal.SIGTERM),
        ("local", signal.SIGINT),
        ("local", signal.SIGTERM),
        ("ssh", signal.SIGINT),
        ("ssh", signal.SIGHUP),
    ],
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
    # The dead run's remote command (still sleeping: nothing else ends it) was killed by the
    # takeover, with its whole process group.
    assert "killed its leftover process groups" in notes[0]
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


@pytest.fixture
def tiny_work_root(tmp_path: Path) -> Any:
    """A 3 MiB tmpfs as work_root (needs the right to mount; skipped where there is none)."""
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(work)], capture_output=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    yield work
    subprocess.run(["umount", "-l", str(work)], check=False)


def test_disk_too_small_is_said_before_the_step(
    fleet: Fleet, tmp_path: Path, tiny_work_root: Path
) -> None:
    inv = inventory(tmp_path, fleet, "gpu1")
    args = ["install-cuda", "-H", "gpu1", "--driver", "590.48.01", "--arch", "12.0", "-i", str(inv)]
    code, doc, _ = cli(args, invoke_env(fleet, tmp_path))
    entry = doc["hosts"]["gpu1"]
    assert code == 2 and entry["status"] == "failed"
    assert "not enough disk for CUDA 13.1" in entry["error"]
    assert "needs 1.0 GiB (1073741824 bytes)" in entry["error"]
    assert str(tiny_work_root) in entry["error"] and "bytes) free" in entry["error"]
    assert not any(tiny_work_root.joinpath("toolkits").glob("*"))


# --------------------------------------------------------------------------- injection


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("/tmp/x; touch {marker}", "holds characters"),
        ("$(touch {marker})", "holds characters"),
        ("relative/work", "is relative"),
        ("~nosuchuser/work", "another user's home"),
        # A non-string is a type error, caught where the inventory is read (file:line: key).
        (42, "hosts.yaml:9: all.hosts.gpu1.work_root: host gpu1: work_root must be a string"),
    ],
)
def test_bad_work_root_is_refused_before_any_host(
    fleet: Fleet, tmp_path: Path, value: Any, says: str
) -> None:
    marker = tmp_path / "pwned"
    if isinstance(value, str):
        value = value.format(marker=marker)
    inv = inventory(tmp_path, fleet, "gpu1", work_root=value)
    proc = run_invoke(
        ["provision", "-H", "gpu1", "-i", str(inv), "--json"], invoke_env(fleet, tmp_path)
    )
    assert proc.returncode == 1, proc.stderr
    doc = json_of(proc)
    assert says in doc["error"] and "work_root" in doc["error"] and "host gpu1" in doc["error"]
    assert doc["hosts"] == {}
    assert not marker.exists()
    assert not (tmp_path / "runs").exists()  # no run started: no host was touched
    assert "Traceback" not in proc.stderr


@needs_cuda
@pytest.mark.parametrize(
    ("ccbin", "says"),
    [
        ("/dir $(touch {marker})/gcc", "holds characters"),
        ("/usr/bin/gcc-12;touch {marker}", "holds characters"),
        ("gcc-12", "must be an absolute path"),
        ("/usr/bin/python3", "does not name gcc"),
    ],
)
def test_injected_nvcc_ccbin_is_refused_before_any_host(
    fleet: Fleet, tmp_path: Path, ccbin: str, says: str
) -> None:
    marker = tmp_path / "pwned"
    inv = inventory(tmp_path, fleet, "gpu1", nvcc_ccbin=ccbin.format(marker=marker))
    proc = run_invoke(
        ["install-cuda", "-H", "gpu1", "-i", str(inv), "--json"], invoke_env(fleet, tmp_path)
    )
    assert proc.returncode == 1, proc.stderr
    doc = json_of(proc)
    assert says in doc["error"] and "nvcc_ccbin" in doc["error"]
    assert not marker.exists()
    assert not (tmp_path / "runs").exists()


@needs_cuda
def test_nvcc_ccbin_is_run_for_its_real_version(fleet: Fleet, tmp_path: Path) -> None:
    """A missing compiler fails; a GCC 16 named `gcc` is over CUDA 13.0's GCC 15 ceiling
    (the fake compiler is a script answering -dumpfullversion: no GCC 16 exists here)."""
    env = invoke_env(fleet, tmp_path)
    inv = inventory(tmp_path, fleet, "gpu1", nvcc_ccbin="/nonexistent/dir/gcc")
    code, doc, _ = cli(["install-cuda", "-H", "gpu1", "-i", str(inv)], env)
    entry = doc["hosts"]["gpu1"]
    assert code == 2 and "is not a working GCC on the host" in entry["error"]
    fake = tmp_path / "gcc16" / "gcc"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\ncase "$1" in -dump*) echo 16.1.0;; esac\n')
    fake.chmod(0o755)
    inv = inventory(tmp_path, fleet, "gpu1", nvcc_ccbin=str(fake))
    code, doc, _ = cli(["install-cuda", "-H", "gpu1", "-i", str(inv)], env)
    entry = doc["hosts"]["gpu1"]
    assert code == 2
    assert f"{fake} (GCC 16.1.0) is above CUDA 13.0" in entry["error"]
    assert "ceiling GCC 15" in entry["error"]
    if Path("/usr/bin/gcc-12").exists():
        inv = inventory(tmp_path, fleet, "gpu1", nvcc_ccbin="/usr/bin/gcc-12")
        code, doc, _ = cli(["install-cuda", "-H", "gpu1", "-i", str(inv)], env)
        step = next(s for s in doc["hosts"]["gpu1"]["steps"] if s["name"] == "host-compiler")
        assert code == 0 and step["message"].startswith("/usr/bin/gcc-12 (GCC 12.")


def test_host_compiler_path_and_version_are_in_the_cache_key() -> None:
    from types import SimpleNamespace

    from sm120kit.host_facts import HostFacts
    from sm120kit.plays.build import cc_version

    facts = {"gcc": [{"path": "/usr/bin/gcc", "version": "12.2.0"}]}
    plain = SimpleNamespace(host=Host("h", {}), facts=HostFacts.from_json(facts))
    assert cc_version(plain) == "gcc 12.2.0"  # type: ignore[arg-type]
    chosen = {"gcc": [{"path": "/opt/gcc-14/bin/gcc", "version": "14.2.0"}, *facts["gcc"]]}
    other = SimpleNamespace(
        host=Host("h", {"nvcc_ccbin": "/opt/gcc-14/bin/gcc"}), facts=HostFacts.from_json(chosen)
    )
    assert cc_version(other) == "gcc 14.2.0 at /opt/gcc-14/bin/gcc"  # type: ignore[arg-type]
    # A ccbin the host never ran is no compiler: no basename match with the PATH's gcc.
    ghost = SimpleNamespace(
        host=Host("h", {"nvcc_ccbin": "/nonexistent/gcc"}), facts=HostFacts.from_json(facts)
    )
    assert cc_version(ghost) == ""  # type: ignore[arg-type]


def test_secrets_never_reach_child_commands(tmp_path: Path) -> None:
    """On `local` every command runs without the password variables (a user's interpreter
    here dumps its environment)."""
    dump = tmp_path / "env.txt"
    spy = tmp_path / "spy"
    spy.write_text(f'#!/bin/sh\nenv > {dump}\nexec {sys.executable} "$@"\n')
    spy.chmod(0o755)
    inv = tmp_path / "hosts.yaml"
    inv.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "local": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": str(spy),
                            "work_root": str(tmp_path / "work"),
                        }
                    }
                }
            }
        )
    )
    secret = "s3cret-child-env"
    env = invoke_env(None, tmp_path, SM120KIT_SSH_PASSWORD=secret, SM120KIT_SUDO_PASSWORD=secret)
    proc = run_invoke(["facts", "-H", "local", "-i", str(inv), "--json"], env)
    assert proc.returncode == 0, proc.stderr
    text = dump.read_text()
    assert "PATH=" in text and secret not in text and "SM120KIT_SSH_PASSWORD" not in text


# --------------------------------------------------------------------------- flags, settings


FLAG_ERRORS = [
    (["recipes", "--recipe", "nope"], {}, "--recipe 'nope': no such recipe"),
    (["recipes", "--recipe", "nope", "-H", "gpu1"], {}, "--recipe 'nope'"),
    (["install-cuda", "-H", "gpu1", "--recipe", "nope"], {}, "--recipe 'nope'"),
    (["install-cuda", "-H", "gpu1", "--driver", "abc"], {}, "--driver 'abc'"),
    (["install-cuda", "-H", "gpu1", "--arch", "99.9"], {}, "--arch '99.9'"),
    (["build", "--package", "minikernel", "-H", "gpu1", "--max-jobs=-3"], {}, "--max-jobs"),
    (["build", "--package", "minikernel", "-H", "gpu1", "--max-jobs", "abc"], {}, "--max-jobs"),
    (["facts", "-H", "gpu1", "--forks", "abc"], {}, "--forks: expected a whole number"),
    (["facts", "-H", "gpu1"], {"INVOKE_SM120KIT_FORKS": "abc"}, "INVOKE_SM120KIT_FORKS='abc'"),
    (["facts", "-H", "gpu1"], {"INVOKE_SM120KIT_CONNECT_RETRIES": "0"}, "connect_retries"),
    (["facts", "-H", "gpu1"], {"INVOKE_SM120KIT_RUN_ROOT": "{file}/runs"}, "setting run_root"),
    (["facts", "-H", "gpu1"], {"INVOKE_SM120KIT_KNOWN_HOSTS": "{dir}"}, "is not a file"),
]


@pytest.mark.parametrize(("args", "extra", "says"), FLAG_ERRORS)
def test_flag_and_setting_errors_are_one_json_document(
    fleet: Fleet, tmp_path: Path, args: list[str], extra: dict[str, str], says: str
) -> None:
    (tmp_path / "a-file").write_text("")
    (tmp_path / "a-dir").mkdir()
    extra = {
        k: v.format(file=tmp_path / "a-file", dir=tmp_path / "a-dir") for k, v in extra.items()
    }
    proc = run_invoke([*args, "--json"], invoke_env(fleet, tmp_path, **extra), timeout=120)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    doc = json_of(proc)
    assert says in doc["error"] and doc["hosts"] == {}
    assert "\n" not in doc["error"]
    assert "Traceback" not in proc.stderr
    assert [ln for ln in proc.stderr.splitlines() if ln.strip()] == [f"error: {doc['error']}"]
    assert not (tmp_path / "runs").exists()  # no run started: no host was touched


def test_host_lock_heartbeat_and_stale_rule(fleet: Fleet, tmp_path: Path) -> None:
    """A holder refreshes its lock while it works; a lock from another controller that was
    not refreshed for lock_stale_after is taken over, a fresh one is not."""
    from sm120kit.runner.pool import HostContext, Runner, RunOptions

    h = fleet.by_name("gpu8")
    host = Host("gpu8", {**fleet.all_vars(h), "work_root": str(tmp_path / "work")})
    owner_file = tmp_path / "work" / "locks" / "run.lock" / "owner.json"
    seen: list[dict[str, Any]] = []

    def work(ctx: HostContext) -> None:
        first = json.loads(owner_file.read_text())
        time.sleep(2.5)  # the heartbeat runs every lock_stale_after / 5 = 1 s (its minimum)
        seen.extend([first, json.loads(owner_file.read_text())])

    options = RunOptions(
        connect=ConnectOptions(known_hosts=str(fleet.known_hosts)),
        run_root=str(tmp_path / "runs"),
        lock_stale_after=5,
    )
    result = Runner(options).run("beat", [host], work, lock=True)
    assert result.hosts["gpu8"].status == "ok", result.hosts["gpu8"].error
    assert seen[1]["refreshed"] > seen[0]["refreshed"] == seen[0]["since"]
    assert not owner_file.exists()

    # Another controller's lock: refused while fresh, taken over once not refreshed.
    owner_file.parent.mkdir(parents=True)
    other = {"controller": "other-box", "boot_id": "x", "pid": 4242, "task": "t", "token": "z"}
    owner_file.write_text(json.dumps({**other, "since": time.time(), "refreshed": time.time()}))
    held = Runner(options).run("t", [host], lambda c: None, lock=True)
    assert held.hosts["gpu8"].status == "failed"
    assert "other-box pid 4242" in (held.hosts["gpu8"].error or "")
    old = time.time() - 60
    owner_file.write_text(json.dumps({**other, "since": old, "refreshed": old}))
    taken = Runner(options).run("t", [host], lambda c: None, lock=True)
    assert taken.hosts["gpu8"].status == "ok"
    assert taken.hosts["gpu8"].data["lock_notes"] == ["took over a stale lock"]


def test_cache_lock_of_a_dead_process_here_is_taken_over(tmp_path: Path) -> None:
    """The wheel-cache build lock: a holder recorded by this controller (host name and boot
    id) whose process is gone is taken over at once, however fresh its record; a live one is
    not, nor one from another boot."""
    from sm120kit.cache.store import LocalStore, LockOwner

    store = LocalStore(tmp_path / "store", name="t")
    key = "ab" * 32
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # a pid that was this controller's and is gone now
    dead = LockOwner.current()
    dead.pid, dead.pid_start = child.pid, "1"
    assert store.acquire(key, dead)
    me = LockOwner.current()
    assert store.acquire(key, me, stale_after=3600)
    assert store.holder(key)["pid"] == os.getpid()  # type: ignore[index]
    other = LockOwner.current()
    assert not store.acquire(key, other, stale_after=3600)  # live holder: this process
    assert store.release(key, me)
    elsewhere = LockOwner.current()
    elsewhere.pid, elsewhere.boot_id = child.pid, "another-boot"
    assert store.acquire(key, elsewhere)
    assert not store.acquire(key, me, stale_after=3600)


def test_the_host_lock_sweeps_dead_writers_temporaries_never_a_live_ones(tmp_path: Path) -> None:
    """Real files and processes: acquiring the host lock (remote/host_lock.py, run as the
    host runs it) removes the temporaries earlier runs left: a download whose writer is gone,
    the controller's upload, the stack's marker and progress files; never a live writer's
    (this test's own pid) nor a `.part` name this tool does not give."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    rel = tmp_path / "releases" / ("a" * 64)
    envs = tmp_path / "envs"
    tools = tmp_path / "tools" / "uv-0.13.9"
    rel.mkdir(parents=True)
    envs.mkdir()
    tools.mkdir(parents=True)
    w = "x-1.0-py3-none-any.whl"
    cases = {  # name -> swept
        rel / f"{w}.{int(dead.stdout)}-140000.part": True,
        rel / f"{w}.{int(dead.stdout)}-140000.peer.part": True,
        rel / f"{w}.0123456789ab.part": True,  # the controller's upload
        rel / f"{w}.{os.getpid()}-140000.part": False,  # a live writer
        rel / f"{w}.{os.getpid()}-1.peer.part": False,
        rel / "someone-elses.part": False,
        rel / w: False,
        envs / ".stack-x.fetched": True,
        envs / ".stack-x.progress": True,
        envs / ".stack-x.progress.tmp": True,
        envs / "stack-x.progress": False,
        tools / f"uv.{int(dead.stdout)}-140000.part": True,  # uv's binary, its unpacker gone
        tools / f"uv.{os.getpid()}-140000.part": False,
        tools / "uv": False,
    }
    for path in cases:
        path.write_bytes(b"x")
    script = Path(__file__).resolve().parents[2] / "sm120kit" / "remote" / "host_lock.py"
    args = {"work_root": str(tmp_path), "action": "acquire", "owner": {}, "token": "t"}
    out = subprocess.run([sys.executable, str(script), json.dumps(args)],
                         capture_output=True, text=True, check=True)  # fmt: skip
    doc = json.loads(out.stdout)
    assert doc["acquired"] is True
    assert sorted(doc["swept"]) == sorted(str(p) for p, gone in cases.items() if gone)
    assert {p: not p.exists() for p in cases} == cases
