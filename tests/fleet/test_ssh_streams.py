"""Long-lived use of one SSH connection: a remote script kept running as a service, a session
sshd refuses for a moment, a connection lost under a running command, re-key thresholds.

Every host is a real OpenSSH sshd on loopback (tests/support/fleet.py) and every download a
real HTTP transfer from a loopback server (tests/support/tiny_index.py); only the GPUs are
simulated (stub nvidia-smi), since the test machines have none.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sm120kit.errors import HostFailed, HostUnreachable
from sm120kit.inventory.host import Host
from sm120kit.runner.channels import REKEY_BYTES, open_channel, send_eof
from sm120kit.runner.connection import ConnectOptions, SSHConnection, connect
from sm120kit.runner.pool import HostContext, Runner, RunOptions
from tests.support import tiny_index
from tests.support.fleet import Fleet


def _host(fleet: Fleet, name: str) -> Host:
    return Host(name, vars=fleet.all_vars(fleet.by_name(name)))


def test_one_downloader_answers_a_runs_downloads_over_one_session(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The stores' downloads of released files go to one `fetch_release` service per host:
    40 files asked for from 8 threads at once are all downloaded and checked by one process
    on the host, started by one command; a file whose bytes are not the lock's is refused and
    never takes its final name; a service that died is started again on the next request."""
    files = tmp_path / "files"
    files.mkdir()
    wheels = [tiny_index.make_wheel(files, f"pkg{i}", "1.0") for i in range(40)]
    bad = tiny_index.make_wheel(files, "bad", "1.0")
    host = _host(fleet, "gpu6")
    dest = f"{host.work_root}/svc-releases"
    seen: dict[str, object] = {}

    def task(ctx: HostContext) -> None:
        def ask(url: str, wheel: Path, sha256: str) -> dict[str, object]:
            entry = {"name": wheel.name.split("-")[0], "version": "1.0", "url": url,
                     "sha256": sha256, "dest": f"{dest}/{wheel.name}"}  # fmt: skip
            return ctx.ask("fetch_release", {"entry": entry, "indexes": [base]})

        before = ctx.commands_run
        replies: dict[str, dict[str, object]] = {}

        def worker(chunk: list[Path]) -> None:
            for w in chunk:
                url = f"{base}/files/{w.name}"
                replies[w.name] = ask(url, w, tiny_index.sha256_of(w))

        threads = [threading.Thread(target=worker, args=(wheels[i::8],)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seen["replies"] = replies
        seen["commands"] = ctx.commands_run - before
        seen["bad"] = ask(f"{base}/files/{bad.name}", bad, "0" * 64)
        seen["listing"] = ctx.run(f"ls {dest}").stdout.split()
        seen["sums"] = ctx.run(f"cd {dest} && sha256sum pkg*.whl").stdout
        ctx.run("pkill -f 'fetch_release|sm120kit>' || true", check=False)  # the service dies
        time.sleep(0.5)
        again = wheels[0].with_name("again-" + wheels[0].name)
        again.write_bytes(wheels[0].read_bytes())
        seen["again"] = ask(f"{base}/files/{wheels[0].name}", again, tiny_index.sha256_of(again))

    with tiny_index.serve(files) as simple:
        base = simple.rsplit("/simple", 1)[0]
        runner = Runner(
            RunOptions(
                connect=ConnectOptions(known_hosts=str(fleet.known_hosts), connect_retries=1),
                run_root=str(tmp_path / "runs"),
            )
        )
        result = runner.run("t", [host], task)
    assert result.hosts["gpu6"].status == "ok", result.hosts["gpu6"].error
    replies = seen["replies"]
    assert isinstance(replies, dict) and len(replies) == 40
    for name, reply in replies.items():
        assert reply["ok"] and reply["error"] is None, (name, reply)
        assert reply["downloaded"] == (files / name).stat().st_size
    assert seen["commands"] == 1  # one service start for 40 downloads
    bad_reply = seen["bad"]
    assert isinstance(bad_reply, dict) and not bad_reply["ok"]
    assert "differs from the lock's" in str(bad_reply["error"])
    listing = seen["listing"]
    assert isinstance(listing, list) and sorted(listing) == sorted(w.name for w in wheels)
    for w in wheels:
        assert f"{tiny_index.sha256_of(w)}  {w.name}" in str(seen["sums"])
    again_reply = seen["again"]
    assert isinstance(again_reply, dict) and again_reply["ok"], again_reply
    log = Path(result.hosts["gpu6"].log or "").read_text()
    assert log.count("remote service fetch_release started") == 2


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """One sshd that allows a single session per connection (MaxSessions 1)."""
    f = Fleet(
        tmp_path_factory.mktemp("tight"),
        [("one", "127.0.0.81", "nogpu")],
        sshd_options={"one": "MaxSessions 1"},
    ).start()
    yield f
    f.stop()


def test_a_session_sshd_refuses_for_a_moment_is_opened_again(tight: Fleet) -> None:
    """sshd refuses a session over its MaxSessions ("no more sessions"), and it also counts a
    just-closed session until its main loop has collected it: a command whose session is
    refused while another runs is tried again and runs once the other has ended, instead of
    failing its host. The connection re-keys where OpenSSH does (64 GiB), not at paramiko's
    512 MiB, where a re-key under streaming sessions dropped real-lock provisions."""
    host = _host(tight, "one")
    # This side believes in 10 sessions; the server allows one.
    conn = connect(host, ConnectOptions(known_hosts=str(tight.known_hosts), max_sessions=10))
    assert isinstance(conn, SSHConnection)
    try:
        conn.open()
        assert conn._conn.client.get_transport().packetizer.REKEY_BYTES == REKEY_BYTES
        assert REKEY_BYTES == 64 << 30
        results: dict[str, object] = {}

        def long() -> None:
            results["long"] = conn.run("sleep 1.5; echo long")

        t = threading.Thread(target=long)
        t.start()
        time.sleep(0.5)
        results["short"] = conn.run("echo short")
        t.join()
        assert getattr(results["long"], "stdout", "").strip() == "long"
        assert getattr(results["short"], "stdout", "").strip() == "short"
        assert "no more sessions" in (tight.root / "one" / "sshd.log").read_text()
    finally:
        conn.close()


def test_a_command_whose_connection_is_lost_has_its_processes_ended(
    fleet: Fleet, tmp_path: Path
) -> None:
    """When the connection drops while a command runs (no exit status ever comes), the
    command's process group on the host is ended over a new connection and the error says
    so: left running, a stack install went on writing into the env the next run made again
    (seen over SSH as "uv venv: A directory already exists")."""
    host = _host(fleet, "gpu8")
    conn = connect(host, ConnectOptions(known_hosts=str(fleet.known_hosts), connect_retries=1))
    assert isinstance(conn, SSHConnection)
    marker = f"{host.work_root}/lost-{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:8]}"
    try:
        conn.open()
        errors: list[BaseException] = []

        def long() -> None:
            try:
                conn.run(f"sleep 4; touch {marker}")
            except BaseException as exc:  # noqa: BLE001 - inspected below
                errors.append(exc)

        t = threading.Thread(target=long)
        t.start()
        time.sleep(1.0)
        conn._conn.client.get_transport().close()  # the connection drops
        t.join(30)
        assert len(errors) == 1 and isinstance(errors[0], HostUnreachable), errors
        assert "lost while a command ran" in str(errors[0])
        assert "on the host was ended" in str(errors[0])
        time.sleep(4.5)
        conn.close()
        check = connect(host, ConnectOptions(known_hosts=str(fleet.known_hosts)))
        try:
            gone = check.run(f"test -e {marker} && echo present || echo absent").stdout.strip()
        finally:
            check.close()
        assert gone == "absent"
    finally:
        conn.close()


def test_a_service_that_cannot_start_says_why(tmp_path: Path) -> None:
    """A service whose interpreter does not exist: the request fails with the shell's words,
    not a hang."""
    host = Host(
        "local",
        vars={"ansible_connection": "local", "work_root": str(tmp_path / "w"),
              "ansible_python_interpreter": str(tmp_path / "no-python")},
    )  # fmt: skip
    seen: dict[str, str] = {}

    def task(ctx: HostContext) -> None:
        with pytest.raises(HostFailed) as info:
            ctx.ask("fetch_release", {"entry": {}})
        seen["error"] = str(info.value)

    result = Runner(RunOptions(run_root=str(tmp_path / "runs"))).run("t", [host], task)
    assert result.hosts["local"].status == "ok", result.hosts["local"].error
    assert "remote service fetch_release ended (exit 127)" in seen["error"]
    assert "no-python" in seen["error"]


def test_stdin_eof_never_follows_this_sides_close(fleet: Fleet) -> None:
    """The EOF that tells a command its stdin is over goes out under the channel's lock
    (runner/channels.send_eof), so never after this side has answered the server's CLOSE.
    paramiko's own shutdown_write() takes the EOF under the lock but sends it after letting
    go: when the command has ended meanwhile and the transport thread has answered CLOSE, the
    EOF arrives for a channel sshd has freed, and OpenSSH ends the whole connection ("ieof
    packet referred to nonexistent channel"; paramiko issues #1584, #1705). That interleaving
    is made here on a real sshd, as the cause of the lost connections of a host filled from
    the stores; then many quick commands, stdin or none, share one connection throughout."""
    host = _host(fleet, "gpu8")
    options = ConnectOptions(known_hosts=str(fleet.known_hosts), connect_retries=1)
    late = connect(host, options)
    assert isinstance(late, SSHConnection)
    try:
        late.open()
        transport = late._conn.client.get_transport()
        chan = open_channel(transport)
        chan.exec_command("true")
        with chan.lock:  # what shutdown_write() does first...
            eof = chan._send_eof()
        deadline = time.monotonic() + 30
        while not chan.closed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert chan.closed  # ...the command ended, this side answered CLOSE...
        transport._send_user_message(eof)  # ...and then its EOF goes out
        deadline = time.monotonic() + 10
        while transport.is_active() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not transport.is_active()
    finally:
        late.close()
    conn = connect(host, options)
    assert isinstance(conn, SSHConnection)
    try:
        conn.open()
        transport = conn._conn.client.get_transport()
        results: list[str] = []

        def quick(i: int) -> None:
            for j in range(15):
                stdin = f"{i}.{j}\n" if j % 2 else None
                results.append(conn.run("cat" if stdin else "true", stdin=stdin).stdout)

        threads = [threading.Thread(target=quick, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(results) == 90 and transport.is_active()
        assert sorted(r for r in results if r) == sorted(
            f"{i}.{j}\n" for i in range(6) for j in range(15) if j % 2
        )
        # A closed channel gets no EOF from send_eof, whatever paramiko's flags say.
        chan = open_channel(transport)
        chan.exec_command("true")
        deadline = time.monotonic() + 30
        while not chan.closed and time.monotonic() < deadline:
            time.sleep(0.01)
        chan.eof_sent = False
        send_eof(chan)
        assert not chan.eof_sent
        assert conn.run("echo alive").stdout.strip() == "alive"
    finally:
        conn.close()
