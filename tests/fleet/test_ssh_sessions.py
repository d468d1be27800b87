"""A host's SSH sessions under sshd's MaxSessions (1, 2, 3, and 0 that refuses them all) and a
host whose sshd stopped answering (its session process SIGSTOPped).

Every host is a real OpenSSH sshd on loopback (tests/support/fleet.py), every download a real
HTTP transfer from a loopback server (tests/support/tiny_index.py), and the stopped host a
real stopped process; only the GPUs are simulated (stub nvidia-smi). Every wait is bounded
(thread joins with a timeout, pytest-timeout), so a regression fails instead of hanging.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sm120kit.errors import ConnectionLost, HostUnreachable
from sm120kit.inventory.host import Host
from sm120kit.runner.connection import ConnectOptions, SSHConnection, connect
from sm120kit.runner.pool import HostContext, Runner, RunOptions
from sm120kit.runner.process import start
from sm120kit.runner.service import Service, service_command
from sm120kit.runner.sessions import PROBE_AFTER, SessionLimit
from tests.support import tiny_index
from tests.support.fleet import Fleet

pytestmark = pytest.mark.timeout(300)

#: A bound on every join below: far more than any of the work takes, far less than a hang.
JOIN = 120.0


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Hosts whose sshd allows 0, 1, 2 and 3 sessions per connection, and one with sshd's
    default (10) for the stopped-host tests."""
    f = Fleet(
        tmp_path_factory.mktemp("limited"),
        [
            ("ms0", "127.0.0.82", "nogpu"),
            ("ms1", "127.0.0.83", "nogpu"),
            ("ms2", "127.0.0.84", "nogpu"),
            ("ms3", "127.0.0.85", "nogpu"),
            ("still", "127.0.0.86", "nogpu"),
        ],  # fmt: skip
        sshd_options={f"ms{n}": f"MaxSessions {n}" for n in range(4)},
    ).start()
    yield f
    f.stop()


def _host(fleet: Fleet, name: str) -> Host:
    return Host(name, vars=fleet.all_vars(fleet.by_name(name)))


def _joined(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.join(JOIN)
    assert not [t.name for t in threads if t.is_alive()], "threads still waiting: a hang"


@pytest.mark.parametrize(("sshd", "setting"), [(1, 1), (1, 10), (2, 2), (2, 10), (3, 3), (3, 10)])
def test_a_stack_like_workload_fits_any_max_sessions(
    limited: Fleet, tmp_path: Path, sshd: int, setting: int
) -> None:
    """Six threads at once on a host whose sshd allows `sshd` sessions, the setting
    ssh_max_sessions saying `setting` (equal, or left at 10): each runs commands, copies a
    file up and back, runs a command inside an SFTP block (a second session of its thread),
    asks the download service that holds a session for the whole task, and has a command
    killed at its timeout (the kill needs a session of its own). All of it completes: nothing
    waits on a session its own thread or service holds, and the host is not unreachable."""
    files = tmp_path / "files"
    files.mkdir()
    wheels = [tiny_index.make_wheel(files, f"pkg{i}", "1.0") for i in range(6)]
    host = _host(limited, f"ms{sshd}")
    dest = f"{host.work_root}/sessions-{setting}"
    errors: list[str] = []

    def task(ctx: HostContext) -> None:
        ctx.run(f"mkdir -p {dest}")
        lease = ctx.sftp_lease()
        assert lease is not None

        def worker(i: int) -> None:
            try:
                assert ctx.run(f"echo {i}").stdout.strip() == str(i)
                src = tmp_path / f"up{i}"
                src.write_bytes(os.urandom(50_000))
                ctx.put(src, f"{dest}/f{i}")
                with lease() as sftp:
                    assert sftp.stat(f"{dest}/f{i}").st_size == 50_000
                    assert ctx.run(f"wc -c < {dest}/f{i}").stdout.strip() == "50000"
                ctx.get(f"{dest}/f{i}", tmp_path / f"down{i}")
                assert (tmp_path / f"down{i}").read_bytes() == src.read_bytes()
                w = wheels[i]
                entry = {"name": f"pkg{i}", "version": "1.0", "url": f"{base}/files/{w.name}",
                         "sha256": tiny_index.sha256_of(w), "dest": f"{dest}/{w.name}"}  # fmt: skip
                reply = ctx.ask("fetch_release", {"entry": entry, "indexes": [base]})
                assert reply["ok"], reply
                if i == 0:
                    assert ctx.run("sleep 30", timeout=0.5, check=False).exit_code == 124
            except Exception as exc:  # noqa: BLE001 - reported below, with the thread's number
                errors.append(f"{i}: {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=worker, args=(i,), name=f"w{i}") for i in range(6)]
        for t in threads:
            t.start()
        _joined(threads)

    with tiny_index.serve(files) as simple:
        base = simple.rsplit("/simple", 1)[0]
        options = ConnectOptions(
            known_hosts=str(limited.known_hosts), connect_retries=1, max_sessions=setting
        )
        runner = Runner(RunOptions(connect=options, run_root=str(tmp_path / "runs")))
        result = runner.run("t", [host], task)
    assert errors == []
    assert result.hosts[host.name].status == "ok", result.hosts[host.name].error


def test_a_session_sshd_refuses_with_none_open_is_one_clear_line(limited: Fleet) -> None:
    """sshd with MaxSessions 0 refuses every session: the command fails at once with one line
    naming the host and MaxSessions/ssh_max_sessions, not a hang and not a traceback."""
    host = _host(limited, "ms0")
    conn = connect(host, ConnectOptions(known_hosts=str(limited.known_hosts), max_sessions=1))
    box: dict[str, BaseException] = {}

    def run() -> None:
        try:
            conn.run("true")
        except BaseException as exc:  # noqa: BLE001 - checked below
            box["exc"] = exc

    t = threading.Thread(target=run)
    t.start()
    try:
        _joined([t])
    finally:
        conn.close()
    exc = box.get("exc")
    assert isinstance(exc, HostUnreachable), exc
    text = str(exc)
    assert "\n" not in text and text.startswith(f"host {host.user}@{host.address}:")
    assert "MaxSessions" in text and "ssh_max_sessions is 1" in text


def _session_process(pid: int) -> int:
    """The sshd process serving the connection that `pid` (a remote command) runs under: its
    nearest ancestor named sshd (or sshd-session, OpenSSH >= 9.8)."""
    while pid > 1:
        stat = Path(f"/proc/{pid}/stat").read_text()
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if name.startswith("sshd"):
            return pid
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
    raise AssertionError("no sshd above the command")


def test_a_host_whose_sshd_stopped_fails_with_what_it_was_doing(limited: Fleet) -> None:
    """The sshd process serving the connection is SIGSTOPped (the TCP connection stays up,
    nothing answers): a command and a service's reply waited for end after the
    ssh_silence_timeout (here 2 s) with "no reply ... (keepalive unanswered) while <what>".
    A command that only prints nothing for longer than that, on a connection that answers its
    keepalives, is not touched."""
    host = _host(limited, "still")
    options = ConnectOptions(known_hosts=str(limited.known_hosts), silence_timeout=2.0)
    conn = connect(host, options)
    assert isinstance(conn, SSHConnection)
    stopped: list[int] = []
    box: dict[str, object] = {}
    try:
        # Silent for 4 s, but the connection answers: fine.
        assert conn.run("sleep 4; echo ok").stdout.strip() == "ok"
        service = Service("fetch_release", start(conn, service_command("python3", "fetch_release")))
        waiting = start(conn, "echo $$; exec sleep 30")  # alive while its ancestors are found
        sshd = _session_process(int(waiting.readline()))
        os.kill(sshd, signal.SIGSTOP)
        stopped.append(sshd)

        def command() -> None:
            try:
                box["command"] = conn.run("echo hi")
            except BaseException as exc:  # noqa: BLE001 - checked below
                box["command"] = exc

        def ask() -> None:
            try:
                box["ask"] = service.ask({"entry": {}, "indexes": []})
            except BaseException as exc:  # noqa: BLE001 - checked below
                box["ask"] = exc

        threads = [threading.Thread(target=command), threading.Thread(target=ask)]
        for t in threads:
            t.start()
        _joined(threads)
    finally:
        for sshd in stopped:
            os.kill(sshd, signal.SIGCONT)
        conn.close()
    ran = box["command"]
    assert isinstance(ran, ConnectionLost), ran
    assert str(ran).startswith(f"host {host.user}@{host.address}:")
    assert "no reply for 2 s (keepalive unanswered) while running 'echo hi'" in str(ran)
    asked = box["ask"]
    assert isinstance(asked, ConnectionLost), asked
    assert "no reply for 2 s (keepalive unanswered) while waiting for a reply of remote " \
        "service fetch_release" in str(asked)  # fmt: skip


def test_a_command_or_service_killed_on_the_host_says_by_which_signal(limited: Fleet) -> None:
    """A command, and the download service, killed by a signal on the host by someone else:
    util-linux `setsid -w` reports that as "setsid: child N did not exit normally: Success";
    the user sees which signal ended it and, for the service, that the next request starts it
    again."""
    host = _host(limited, "still")
    conn = connect(host, ConnectOptions(known_hosts=str(limited.known_hosts)))
    assert isinstance(conn, SSHConnection)
    try:
        res = conn.run("kill -TERM $$")
        assert res.exit_code == 15 and "did not exit normally" not in res.stderr
        assert res.stderr.strip() == "killed by SIGTERM on the host"
        service = Service("fetch_release", start(conn, service_command("python3", "fetch_release")))
        assert conn.run("sleep 0.5; pkill -KILL -f '^python3 -S -c'").ok
        box: dict[str, object] = {}

        def ask() -> None:
            try:
                box["ask"] = service.ask({"entry": {}, "indexes": []})
            except BaseException as exc:  # noqa: BLE001 - checked below
                box["ask"] = exc

        t = threading.Thread(target=ask)
        t.start()
        _joined([t])
    finally:
        conn.close()
    text = str(box["ask"])
    assert "did not exit normally" not in text and "\n" not in text
    assert text == (
        "remote service fetch_release ended (killed by SIGKILL on the host; the next request "
        "starts it again)"
    )


#: (events, the limit after each): "r<N>": sshd refused a session with N others open,
#: "o<K>": K sessions opened without a refusal. Setting 10, PROBE_AFTER sessions to a raise.
P = PROBE_AFTER
LIMIT_TABLE = [
    # One transient refusal at 3: back up by one per PROBE_AFTER successes, to the setting.
    (["r3", f"o{P - 1}", "o1", f"o{P}", f"o{P * 5}"], [3, 3, 4, 5, 10]),
    # A real MaxSessions 2: each raise to 3 is refused; the wait before the next one doubles.
    (["r2", f"o{P}", "r2", f"o{P}", f"o{P}", "r2", f"o{P * 3}", f"o{P}"], [2, 3, 2, 2, 3, 2, 2, 3]),
    # A refusal at or above the limit teaches nothing; one deeper lowers again.
    (["r4", "r5", "r1", f"o{P}"], [4, 4, 1, 2]),
    # At the setting nothing is counted.
    ([f"o{P * 4}"], [10]),
]


@pytest.mark.parametrize(("events", "limits"), LIMIT_TABLE)
def test_the_session_limit_recovers_after_a_transient_refusal(
    events: list[str], limits: list[int]
) -> None:
    """`SessionLimit` (sm120kit/runner/sessions.py), pure: a refusal lowers the limit to what
    was open; sessions opened after it raise it again one at a time; a raise refused at once
    (the real MaxSessions) doubles the sessions the next raise waits for."""
    limit = SessionLimit(10)
    seen = []
    for event in events:
        kind, n = event[0], int(event[1:])
        if kind == "r":
            limit.refused(n)
        else:
            for _ in range(n):
                limit.opened()
        seen.append(limit.value)
    assert seen == limits
