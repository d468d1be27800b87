"""The foundation over real SSH: facts, runner, host keys, locks, JSON, errors.

Every host here is a real OpenSSH sshd on loopback (tests/support/fleet.py); only the GPUs
are simulated, by per-host nvidia-smi stubs printing real-format output, because the test
machines have no GPU.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from sm120kit.errors import HostFailed
from sm120kit.inventory.host import Host
from sm120kit.remote import run_script
from sm120kit.runner.connection import ConnectOptions
from sm120kit.runner.pool import HostContext, Runner, RunOptions
from tests.conftest import invoke_env, json_of, run_invoke
from tests.support.fleet import Fleet

LIVE = "all:!ghost"


@pytest.fixture(scope="module")
def facts_run(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One `invoke facts --json` over the eight live hosts, shared by the facts tests."""
    tmp = tmp_path_factory.mktemp("facts")
    proc = run_invoke(["facts", "-H", LIVE, "--json"], invoke_env(fleet, tmp))
    assert proc.returncode == 0, proc.stderr
    return json_of(proc)


def test_json_schema(facts_run: dict) -> None:
    assert set(facts_run) >= {"task", "hosts", "summary", "run_dir", "check_mode"}
    assert facts_run["task"] == "facts"
    assert len(facts_run["hosts"]) == 8
    for name, entry in facts_run["hosts"].items():
        assert entry["status"] == "ok", (name, entry)
        assert entry["changed"] == 0
        assert entry["error"] is None
        assert {"steps", "facts", "log", "commands"} <= set(entry)
        assert Path(entry["log"]).is_file()
    assert facts_run["summary"] == {
        "ok": 8,
        "changed": 0,
        "failed": 0,
        "unreachable": 0,
        "skipped": 0,
    }


def test_facts_take_one_command_per_host(facts_run: dict) -> None:
    assert {e["commands"] for e in facts_run["hosts"].values()} == {1}


def test_facts_pro6000_pair(facts_run: dict, fleet: Fleet) -> None:
    facts = facts_run["hosts"]["gpu1"]["facts"]
    gpu = facts["gpu"]
    assert gpu["present"] is True
    assert gpu["driver_version"] == "580.95.05"
    assert gpu["module"] == "open"
    assert [g["name"] for g in gpu["gpus"]] == [
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    ] * 2
    assert [g["compute_cap"] for g in gpu["gpus"]] == ["12.0", "12.0"]
    assert gpu["gpus"][0]["memory_mib"] == 97887
    # Each host has its own work_root, resolved on the host.
    assert facts["work_root"] == str(fleet.by_name("gpu1").work_root)
    for key in ("os", "kernel", "cpu", "memory", "disk", "glibc", "gcc", "python", "cuda"):
        assert key in facts
    assert facts["cpu"]["count"] >= 1
    assert facts["memory"]["total_bytes"] > 0
    assert facts["disk"]["free_bytes"] > 0


def test_facts_rtx5090(facts_run: dict) -> None:
    gpu = facts_run["hosts"]["gpu2"]["facts"]["gpu"]
    assert gpu["driver_version"] == "570.124.06"
    assert gpu["gpus"][0]["name"] == "NVIDIA GeForce RTX 5090"
    assert gpu["gpus"][0]["compute_cap"] == "12.0"


def test_no_nvidia_smi_is_no_gpu(facts_run: dict) -> None:
    entry = facts_run["hosts"]["gpu3"]
    assert entry["status"] == "ok"
    gpu = entry["facts"]["gpu"]
    assert gpu["present"] is False
    assert "nvidia-smi not found" in gpu["error"]


def test_old_driver_rejecting_compute_cap(facts_run: dict) -> None:
    gpu = facts_run["hosts"]["gpu4"]["facts"]["gpu"]
    assert gpu["present"] is True
    assert gpu["driver_version"] == "470.82.01"
    assert gpu["module"] == "proprietary"
    assert gpu["gpus"][0]["name"] == "NVIDIA A100-SXM4-40GB"
    assert gpu["gpus"][0]["compute_cap"] is None
    assert any("compute_cap" in n and "unknown" in n for n in gpu["notes"])


def test_driverless_nvidia_smi_is_no_gpu(facts_run: dict) -> None:
    entry = facts_run["hosts"]["gpu5"]
    assert entry["status"] == "ok"
    assert entry["facts"]["gpu"]["present"] is False
    assert "couldn't communicate with the NVIDIA driver" in entry["facts"]["gpu"]["error"]


def test_facts_table_for_people(fleet: Fleet, tmp_path: Path) -> None:
    proc = run_invoke(["facts", "-H", "gpu1,gpu4"], invoke_env(fleet, tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "RTX PRO 6000" in proc.stdout and "580.95.05" in proc.stdout
    assert "compute_cap" in proc.stdout  # the old driver's note is shown
    assert "RECAP" in proc.stderr and "gpu1" in proc.stderr


def _group_of_eight(fleet: Fleet, tmp_path: Path) -> Path:
    doc = yaml.safe_load(fleet.inventory.read_text())
    doc["all"]["children"]["eight"] = {
        "hosts": {
            n: None for n in ["gpu1", "gpu2", "gpu3", "gpu4", "gpu5", "gpu6", "gpu7", "ghost"]
        }
    }
    inv = tmp_path / "hosts.yaml"
    inv.write_text(yaml.safe_dump(doc))
    return inv


def test_unreachable_host_does_not_stop_the_others(fleet: Fleet, tmp_path: Path) -> None:
    inv = _group_of_eight(fleet, tmp_path)
    # Seven live handshakes at once on a loaded 2-core machine (two test workers) once took
    # over the suite's 5 s connect timeout; the dead address refuses at once whatever the value.
    env = invoke_env(fleet, tmp_path, INVOKE_SM120KIT_CONNECT_TIMEOUT="60")
    proc = run_invoke(["facts", "-H", "eight", "-i", str(inv), "--json"], env)
    assert proc.returncode == 2
    doc = json_of(proc)
    statuses = {n: e["status"] for n, e in doc["hosts"].items()}
    assert statuses.pop("ghost") == "unreachable"
    errors = {n: e.get("error") for n, e in doc["hosts"].items() if e["status"] != "ok"}
    assert set(statuses.values()) == {"ok"} and len(statuses) == 7, errors
    assert "127.0.0.10" in doc["hosts"]["ghost"]["error"]
    assert "2 attempt(s)" in doc["hosts"]["ghost"]["error"]  # retried, bounded
    assert doc["summary"]["unreachable"] == 1
    # The recap (stderr) says so too, and names the run directory.
    assert "unreachable=1" in proc.stderr
    assert doc["run_dir"] in proc.stderr.replace("\n", "")


def test_changed_host_key_is_refused(fleet: Fleet, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    other_key = fleet.by_name("gpu1").host_pub.read_text().split()
    # gpu2's entry carries gpu1's key: what a man in the middle would look like.
    known.write_text(f"[127.0.0.3]:{fleet.port} {other_key[0]} {other_key[1]}\n")
    env = invoke_env(fleet, tmp_path, INVOKE_SM120KIT_KNOWN_HOSTS=str(known))
    proc = run_invoke(["facts", "-H", "gpu2", "--json", "--accept-new-host-keys"], env)
    assert proc.returncode == 2
    entry = json_of(proc)["hosts"]["gpu2"]
    assert entry["status"] == "unreachable"
    assert "CHANGED" in entry["error"] and "ssh-keygen -R" in entry["error"]


def test_unknown_host_key_needs_opt_in(fleet: Fleet, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    env = invoke_env(fleet, tmp_path, INVOKE_SM120KIT_KNOWN_HOSTS=str(known))
    proc = run_invoke(["facts", "-H", "gpu6", "--json"], env)
    assert proc.returncode == 2
    entry = json_of(proc)["hosts"]["gpu6"]
    assert entry["status"] == "unreachable"
    assert "not in" in entry["error"] and "--accept-new-host-keys" in entry["error"]
    proc = run_invoke(["facts", "-H", "gpu6", "--json", "--accept-new-host-keys"], env)
    assert proc.returncode == 0, proc.stderr
    assert f"[127.0.0.7]:{fleet.port} ssh-ed25519" in known.read_text()
    # Recorded: trusted from now on without the flag.
    proc = run_invoke(["facts", "-H", "gpu6", "--json"], env)
    assert proc.returncode == 0, proc.stderr


def _runner(fleet: Fleet, tmp_path: Path, **kw: object) -> Runner:
    return Runner(
        RunOptions(
            connect=ConnectOptions(known_hosts=str(fleet.known_hosts), connect_retries=1),
            run_root=str(tmp_path / "runs"),
            **kw,  # type: ignore[arg-type]
        )
    )


def _hosts(fleet: Fleet, *names: str) -> list[Host]:
    return [Host(n, vars=fleet.all_vars(fleet.by_name(n))) for n in names]


def test_failing_command_on_one_host(fleet: Fleet, tmp_path: Path) -> None:
    def task(ctx: HostContext) -> None:
        with ctx.step("probe"):
            ctx.run("exit 3" if ctx.host.name == "gpu2" else "true", what="the probe")

    result = _runner(fleet, tmp_path).run("t", _hosts(fleet, "gpu1", "gpu2", "gpu3"), task)
    assert {n: r.status for n, r in result.hosts.items()} == {
        "gpu1": "ok",
        "gpu2": "failed",
        "gpu3": "ok",
    }
    assert "the probe" in (result.hosts["gpu2"].error or "")
    assert "exit 3" in (result.hosts["gpu2"].error or "")
    assert not result.ok
    # A command that ran and failed is not retried: one command on that host.
    assert result.hosts["gpu2"].data["commands"] == 1


def test_lock_contention_names_the_holder(fleet: Fleet, tmp_path: Path) -> None:
    host = _hosts(fleet, "gpu7")[0]
    runner = _runner(fleet, tmp_path)
    holder_seen: list[str] = []

    def inner(ctx: HostContext) -> None:
        # While this run holds gpu7, a second run must be refused and told who holds it.
        second = _runner(fleet, tmp_path).run("second", [host], lambda c: None, lock=True)
        holder_seen.append(second.hosts["gpu7"].error or "")
        assert second.hosts["gpu7"].status == "failed"

    first = runner.run("first", [host], inner, lock=True)
    assert first.hosts["gpu7"].status == "ok", first.hosts["gpu7"].error
    assert "locked by another run" in holder_seen[0]
    assert "task first" in holder_seen[0] and "pid" in holder_seen[0]
    # Released at the end: the next run gets it.
    third = runner.run("third", [host], lambda c: None, lock=True)
    assert third.hosts["gpu7"].status == "ok"


def test_stale_lock_is_taken_over(fleet: Fleet, tmp_path: Path) -> None:
    host = _hosts(fleet, "gpu8")[0]
    from sm120kit.runner.connection import connect

    conn = connect(host, ConnectOptions(known_hosts=str(fleet.known_hosts)))
    doc = run_script(
        conn,
        "host_lock",
        {
            "work_root": host.work_root,
            "action": "acquire",
            "owner": {"task": "crashed"},
            "token": "x",
        },
    )
    assert doc["acquired"]
    conn.close()
    blocked = _runner(fleet, tmp_path).run("t", [host], lambda c: None, lock=True)
    assert blocked.hosts["gpu8"].status == "failed"
    forced = _runner(fleet, tmp_path, break_lock=True).run("t", [host], lambda c: None, lock=True)
    assert forced.hosts["gpu8"].status == "ok"


def test_host_var_reaching_a_shell_is_quoted(fleet: Fleet, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    doc = yaml.safe_load(fleet.inventory.read_text())
    # (a work_root like this is refused before any host is touched: tests/fleet/test_faults.py)
    doc["all"]["hosts"]["gpu1"]["ansible_python_interpreter"] = "python3; touch " + str(marker)
    inv = tmp_path / "hosts.yaml"
    inv.write_text(yaml.safe_dump(doc))
    proc = run_invoke(
        ["facts", "-H", "gpu1", "-i", str(inv), "--json"], invoke_env(fleet, tmp_path)
    )
    assert not marker.exists()
    entry = json_of(proc)["hosts"]["gpu1"]
    assert entry["status"] == "failed"
    assert "no Python at" in entry["error"]


def test_passwords_never_reach_output_or_logs(fleet: Fleet, tmp_path: Path) -> None:
    secret = "s3cret-Pa55-do-not-print"
    env = invoke_env(fleet, tmp_path, SM120KIT_SSH_PASSWORD=secret, SM120KIT_SUDO_PASSWORD=secret)
    proc = run_invoke(["facts", "-H", "gpu1,ghost", "--json"], env)
    assert secret not in proc.stdout + proc.stderr
    for path in (tmp_path / "runs").rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path


def test_ad_hoc_host(fleet: Fleet, tmp_path: Path) -> None:
    target = f"{fleet.user}@127.0.0.9:{fleet.port}"
    proc = run_invoke(["facts", "-H", target, "--json"], invoke_env(fleet, tmp_path))
    assert proc.returncode == 0, proc.stderr
    entry = json_of(proc)["hosts"][target]
    assert entry["facts"]["gpu"]["gpus"][0]["compute_cap"] == "12.0"


def test_local_host_without_ssh(tmp_path: Path) -> None:
    env = invoke_env(None, tmp_path, INVOKE_SM120KIT_INVENTORY=str(tmp_path / "none.yaml"))
    env["HOME"] = str(tmp_path)  # local's default work_root lands under this HOME
    proc = run_invoke(["facts", "--host", "local", "--json"], env)
    assert proc.returncode == 0, proc.stderr
    entry = json_of(proc)["hosts"]["local"]
    assert entry["status"] == "ok"
    assert entry["facts"]["work_root"] == str(tmp_path / ".sm120kit")


def test_malformed_inventory_is_one_clear_error(fleet: Fleet, tmp_path: Path) -> None:
    inv = tmp_path / "bad.yaml"
    inv.write_text("all:\n  children:\n    gpus:\n      hosts:\n        - gpu1\n")
    proc = run_invoke(
        ["facts", "-H", "gpus", "-i", str(inv), "--json"], invoke_env(fleet, tmp_path)
    )
    assert proc.returncode == 1
    doc = json_of(proc)
    assert "bad.yaml:5:" in doc["error"] and "all.children.gpus.hosts" in doc["error"]
    err_lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(err_lines) == 1 and "bad.yaml" in err_lines[0]
    assert "Traceback" not in proc.stderr


def test_unknown_host_lists_close_matches(fleet: Fleet, tmp_path: Path) -> None:
    proc = run_invoke(["facts", "-H", "gpu9"], invoke_env(fleet, tmp_path))
    assert proc.returncode == 1
    assert "gpu9" in proc.stderr and "gpu1" in proc.stderr


def test_inventory_task_json(fleet: Fleet, tmp_path: Path) -> None:
    proc = run_invoke(["inventory", "--json"], invoke_env(fleet, tmp_path))
    assert proc.returncode == 0, proc.stderr
    doc = json_of(proc)
    assert "gpu1" in doc["hosts"] and "pro6000x2" in doc["groups"]
    assert doc["hosts"]["gpu1"]["vars"]["ansible_host"] == "127.0.0.2"
    proc = run_invoke(["inventory", "-H", "rtx5090", "--json"], invoke_env(fleet, tmp_path))
    assert sorted(json_of(proc)["selected"]) == ["gpu2", "gpu7"]


def test_fleet_hosts_do_not_share_state(fleet: Fleet) -> None:
    roots = {fleet.by_name(n).work_root for n in ("gpu1", "gpu2", "gpu3")}
    assert len(roots) == 3
    assert shutil.which("sshd") or os.path.exists("/usr/sbin/sshd")


def test_runner_unexpected_error_stays_on_its_host(fleet: Fleet, tmp_path: Path) -> None:
    def task(ctx: HostContext) -> None:
        if ctx.host.name == "gpu1":
            raise ValueError("boom")
        if ctx.host.name == "gpu2":
            raise HostFailed("a clear failure")

    result = _runner(fleet, tmp_path).run("t", _hosts(fleet, "gpu1", "gpu2", "gpu3"), task)
    assert result.hosts["gpu1"].status == "failed"
    assert "ValueError: boom" in (result.hosts["gpu1"].error or "")
    assert "Traceback" in Path(result.hosts["gpu1"].log or "").read_text()
    assert result.hosts["gpu2"].error == "a clear failure"
    assert result.hosts["gpu3"].status == "ok"


def test_a_script_argument_of_any_size_reaches_the_host_intact(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A host script's arguments travel on stdin with the program, never on the command line
    (Linux refuses one argument over 128 KiB): a 1 MB document over real SSH is stored by the
    host script byte for byte, and a lock-sized list of 207 entries (the real r580 lock's
    count, each with a dest, URL and sha256) is read whole by install_lock's probe."""
    import json

    from sm120kit.runner.connection import connect

    host = _hosts(fleet, "gpu6")[0]
    conn = connect(host, ConnectOptions(known_hosts=str(fleet.known_hosts)))
    try:
        memo = f"{host.work_root}/argtest"
        blob = "".join(f"{i:07d}-" + "x" * 120 + "\n" for i in range(8000))  # 1 MB
        assert len(blob) > 1_000_000
        doc = {"blob": blob, "quotes": "'\"$(touch /tmp/no)`x`;\\"}
        stored = run_script(
            conn, "smoke_memo", {"action": "store", "memo_dir": memo, "key": "k", "doc": doc}
        )
        assert stored == {"ok": True}
        back = conn.run(f"cat {memo}/k.json").stdout
        assert json.loads(back) == doc

        dests = [
            f"{host.work_root}/releases/{i:03d}/dist_{i:03d}-1.0-py3-none-any.whl"
            for i in range(207)
        ]
        conn.run(" && ".join(f"mkdir -p {os.path.dirname(d)} && : > {d}" for d in dests[::2]))
        entries = [
            {
                "name": f"dist-{i:03d}",
                "version": "1.0",
                "filename": os.path.basename(d),
                "url": f"https://files.example.invalid/packages/{'ab/' * 40}{os.path.basename(d)}",
                "sha256": hashlib.sha256(d.encode()).hexdigest(),
                "compiled": False,
                "dest": d,
            }
            for i, d in enumerate(dests)
        ]
        probe = run_script(
            conn,
            "install_lock",
            {
                "action": "probe",
                "env": f"{host.work_root}/envs/none",
                "record": "/nonexistent",
                "entries": entries,
            },
        )
        assert sorted(probe["present"]) == sorted(dests[::2])
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("host_vars", "probe", "want"),
    [
        (
            {},
            {"path": "/root/.pyenv/versions/3.12.1/bin/python3", "version": "3.12.1"},
            "/root/.pyenv/versions/3.12.1/bin/python3",
        ),  # fmt: skip
        ({"ansible_python_interpreter": "/opt/py/bin/python3"}, {"path": "/usr/bin/python3"}, None),
        ({}, {"path": ""}, None),  # the probe could not tell: python3 as before
        ({}, {"path": "python3"}, None),  # not a path: nothing gained
        ({}, None, None),
    ],
)
def test_the_interpreter_python3_turned_out_to_be_runs_later_scripts(
    host_vars: dict[str, str], probe: dict[str, str] | None, want: str | None
) -> None:
    from sm120kit.facts import discovered_python

    assert discovered_python(host_vars, {"probe_python": probe}) == want


def test_scripts_start_the_discovered_interpreter_not_the_wrapper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host (here ``local``) whose ``python3`` is a wrapper script in front of the real
    interpreter, as pyenv's shim is, and no ``ansible_python_interpreter``: the facts probe goes
    through the wrapper, every later script starts the interpreter the probe found (the wrapper
    counts its starts); a script named in ``NO_SITE`` runs without ``site``."""
    from sm120kit.facts import gather

    shim = tmp_path / "shim"
    shim.mkdir()
    count = tmp_path / "starts"
    (shim / "python3").write_text(f'#!/bin/sh\necho x >> {count}\nexec {sys.executable} "$@"\n')
    (shim / "python3").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    host = Host("local", vars={"ansible_connection": "local", "work_root": str(tmp_path / "w")})
    seen: dict[str, object] = {}

    def task(ctx: HostContext) -> None:
        facts = gather(ctx)
        seen["probe"] = facts["probe_python"]["path"]
        seen["found"] = ctx.script_python
        seen["after_facts"] = count.read_text().count("x")
        wheel = tmp_path / "w" / "present.whl"
        wheel.parent.mkdir(parents=True, exist_ok=True)
        wheel.write_bytes(b"present")
        digest = hashlib.sha256(b"present").hexdigest()
        entry = {"name": "p", "version": "1", "url": "http://127.0.0.1:9/p.whl", "sha256": digest}
        seen["fetch"] = ctx.ask("fetch_release", {"entry": {**entry, "dest": str(wheel)}})
        seen["after_fetch"] = count.read_text().count("x")
        seen["facts"] = ctx.script("facts_probe", {"work_root": ctx.host.work_root})

    result = Runner(RunOptions(run_root=str(tmp_path / "runs"))).run("t", [host], task)
    assert result.hosts["local"].status == "ok", result.hosts["local"].error
    assert seen["found"] == seen["probe"]
    assert Path(str(seen["found"])).resolve() == Path(sys.executable).resolve()
    # The probe went through the wrapper (and asked it its version); the script did not.
    assert seen["after_facts"] >= 1 and seen["after_fetch"] == seen["after_facts"]
    fetch = {k: seen["fetch"].get(k) for k in ("id", "ok", "error", "downloaded")}
    assert fetch == {"id": 1, "ok": True, "error": None, "downloaded": 0}
    assert seen["facts"]["probe_python"]["path"] == seen["found"]
    log = Path(result.hosts["local"].log or "").read_text()
    assert f"scripts run by {seen['found']}" in log


def test_many_threads_share_one_connection_within_sshds_session_limit(
    fleet: Fleet, tmp_path: Path
) -> None:
    """One host's connection used by 24 threads at once, each running a command, copying a
    file up and back and using the host's wheel store, against sshd's default MaxSessions (10;
    the fleet's sshd sets none). Commands wait for a session instead of being refused
    ("administratively prohibited"), and the SFTP sessions are lent to one thread at a time:
    threads that shared paramiko's one SFTPClient took each other's replies, which a real-lock
    provision saw as "Server connection dropped" half way through. A session that breaks in a
    copy is replaced and the copy done again."""
    import threading

    from sm120kit.cache.sftp import SFTPStore
    from sm120kit.runner.connection import SSHConnection, connect

    host = _hosts(fleet, "gpu7")[0]
    conn = connect(host, ConnectOptions(known_hosts=str(fleet.known_hosts), retry_backoff=0))
    assert isinstance(conn, SSHConnection)
    root = f"{host.work_root}/sessions"
    conn.run(f"mkdir -p {root}")
    store = SFTPStore.leased(conn.sftp_session, f"{root}/store", name="host")
    errors: list[str] = []

    def worker(i: int) -> None:
        try:
            res = conn.run(f"sleep 0.3; echo {i}")
            assert res.ok and res.stdout.strip() == str(i), res
            src = tmp_path / f"up{i}"
            src.write_bytes(os.urandom(300_000) + str(i).encode())
            conn.put(src, f"{root}/f{i}")
            conn.get(f"{root}/f{i}", tmp_path / f"down{i}")
            assert (tmp_path / f"down{i}").read_bytes() == src.read_bytes()
            store.write_blob(f"k{i}/meta.json", str(i).encode())
            assert store.read_blob(f"k{i}/meta.json") == str(i).encode()
        except Exception as exc:  # noqa: BLE001 - reported below, with the thread's number
            errors.append(f"{i}: {type(exc).__name__}: {exc}")

    try:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(24)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(store.list_blobs()) == 24

        # A session that breaks during a copy: the copy is done again on a fresh one.
        attempts: list[int] = []

        def copy(sftp: object) -> None:
            attempts.append(1)
            if len(attempts) == 1:
                sftp.get_channel().close()  # type: ignore[attr-defined]
            sftp.get(f"{root}/f3", str(tmp_path / "again"))  # type: ignore[attr-defined]

        conn._transfer(copy, "a copy")
        assert len(attempts) == 2
        assert (tmp_path / "again").read_bytes() == (tmp_path / "up3").read_bytes()
        # A missing file is the file's error, raised at once, not retried.
        with pytest.raises(FileNotFoundError):
            conn.get(f"{root}/none", tmp_path / "none")
    finally:
        conn.close()
