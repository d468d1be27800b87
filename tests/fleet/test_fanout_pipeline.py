"""The pipelined fan-out (issue 46): a host serves a released file while it is still arriving
(remote/lib/growing.py, remote/lib/peers.py), takers chain onto the holder with the fewest
takers (cache/peers.py), and a taker whose holder dies mid-file tries another holder
(ops/stack_files.py). Real sshd hosts on loopback (127.0.0.111-113, tests/support/fleet.py),
each host's real ``fetch_release`` service and peer server. Simulated: the index's slow link,
by a loopback server that sends half a file and the rest only when the test says (so that a
file is caught while it arrives, without asserting on time)."""

from __future__ import annotations

import hashlib
import os
import posixpath
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sm120kit.inventory.host import Host
from sm120kit.ops.stack_files import obtain_release
from sm120kit.runner.connection import ConnectOptions
from sm120kit.runner.host_context import HostContext
from sm120kit.runner.pool import Runner, RunOptions
from sm120kit.stack.lock import LockEntry
from tests.support.fleet import Fleet, fleet_of
from tests.support.held_index import held_index, wait_for
from tests.support.peer_table import play

# -- the holder choice, as a table ------------------------------------------------------------

#: Steps on one Peers (tests/support/peer_table.py).
CASES: dict[str, list[tuple[Any, ...]]] = {
    "takers chain: each takes the newest taker, every link busy at once": [
        ("claim", "a", None, ()),
        ("receiving", "a"),
        ("claim", "b", "a", ()),
        ("claim", "c", "b", ()),
        ("claim", "d", "c", ()),
        ("claim", "e", "d", ()),
    ],
    "fewest takers first, a whole holder before a receiving one": [
        ("claim", "a", None, ()),
        ("placed", "a", True),
        ("claim", "b", "a", ()),
        ("uploaded", "a"),
        ("claim", "c", "a", ()),  # a and b have no taker: a has the whole file
        ("claim", "d", "b", ()),
    ],
    "a waiter chains on when the owner's own download begins": [
        ("claim", "a", None, ()),
        ("claim", "b", None, (), {"wait_s": 0.0}),  # nobody serves it yet: b's wait ends empty
        ("receiving", "a"),
        ("claim", "c", "a", ()),
    ],
    "a failed holder is avoided; no taker takes from its own takers": [
        ("claim", "a", None, ()),
        ("receiving", "a"),
        ("claim", "b", "a", ()),
        ("claim", "c", "b", ()),
        ("placed", "b", False),  # b's download from a was cut
        ("claim", "b", None, ("a",), {"wait_s": 0.0}),  # c takes from b: never offered to b
        ("claim", "c", "a", ("b",)),
    ],
    "a host that left is offered to nobody": [
        ("claim", "a", None, ()),
        ("placed", "a", True),
        ("claim", "b", "a", ()),
        ("placed", "b", True),
        ("uploaded", "a"),
        ("leave", "a"),
        ("claim", "c", "b", ()),
    ],
    "a taker without a server is not offered as receiving": [
        ("claim", "a", None, ()),
        ("receiving", "a"),
        ("claim", "x", "a", ()),  # x serves nothing (not started)
        ("claim", "c", "a", ()),
    ],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_holder_with_the_fewest_takers_is_chosen(case: str) -> None:
    play(case, CASES[case])


# -- over sshd ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Three real sshd hosts on 127.0.0.111-113."""
    fleet = fleet_of(3, tmp_path_factory.mktemp("fanout-fleet"), first=111).start()
    yield fleet
    fleet.stop()


def _file_of(files: Path, name: str) -> bytes | None:
    target = files / name
    return target.read_bytes() if target.is_file() else None


def _first_of(log: list[str]) -> Callable[[str], bool]:
    """Hold the first request of each file (logged in `log`); later ones get it whole."""

    def hold(name: str) -> bool:
        first = name not in log
        log.append(name)
        return first

    return hold


def _entry(path: Path, base: str) -> LockEntry:
    return LockEntry(
        name="demo-blob",
        version="1.0",
        filename=path.name,
        url=f"{base}/{path.name}",
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        source="release",
        compiled=False,
        size=path.stat().st_size,
    )


def _peer_part(root: Path) -> bool:
    """Whether some bytes have reached a peer part file under `root`'s releases."""
    return any(p.stat().st_size > 0 for p in (root / "releases").rglob("*.peer.part"))


def _pid_listening(address: str, port: int) -> int | None:
    """The process holding the listening socket (address, port): a host's peer server."""
    hexed = "".join(f"{int(x):02X}" for x in reversed(address.split(".")))
    want = f"{hexed}:{port:04X}"
    inode = ""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        cols = line.split()
        if cols[1] == want and cols[3] == "0A":  # LISTEN
            inode = cols[9]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        if f"socket:[{inode}]" in links:
            return int(pid)
    return None


def _run(
    fleet: Fleet, tmp: Path, op: Any, names: tuple[str, ...] = ("h00", "h01", "h02")
) -> tuple[Any, Runner]:
    hosts = [
        Host(n, vars={**fleet.all_vars(fleet.by_name(n)), "work_root": str(tmp / n)}) for n in names
    ]
    runner = Runner(
        RunOptions(
            run_root=str(tmp / "runs"), connect=ConnectOptions(known_hosts=str(fleet.known_hosts))
        )
    )
    runner.settings = {"cache": {"controller": str(tmp / "controller-store")}}
    return runner.run("fanout", hosts, op), runner


def _dest(ctx: HostContext, e: LockEntry) -> str:
    return posixpath.join(str(ctx.host.work_root), "releases", e.sha256, e.filename)


def _chain_op(
    entry: LockEntry,
    log: list[str],
    root: Path,
    got: dict[str, Any],
    done: threading.Event,
    runners: list[Runner] | None = None,
) -> Any:
    """The host op of a chain h00 -> h01 -> h02: h01 starts once h00's download began, h02
    once h01's has; every host serves until h02 is through (a host's op end closes its server)."""

    def op(ctx: HostContext) -> None:
        name = ctx.host.name
        if runners is not None:
            runners.append(ctx.runner)
        if name == "h01":
            wait_for(lambda: bool(log), "h00's download began")
        if name == "h02":
            wait_for(lambda: _peer_part(root / "h01"), "h01's download began")
        try:
            got[name] = obtain_release(ctx, entry, _dest(ctx, entry))
        finally:
            if name == "h02":
                done.set()
        done.wait(60)

    return op


def test_a_taker_serves_the_file_while_it_arrives_and_takers_chain(
    trio: Fleet, tmp_path: Path
) -> None:
    """h00 downloads a file the index sends half of and then holds; h01 takes it from h00
    and h02 from h01 while h00 still has only half: bytes reach h02 (two hops) before the
    index sends the rest. Every host ends with the lock's bytes, the index served it once, no
    part file is left."""
    files = tmp_path / "index"
    files.mkdir()
    blob = files / "demo_blob-1.0-py3-none-any.whl"
    blob.write_bytes(os.urandom(3 << 20))
    log: list[str] = []
    got: dict[str, tuple[str, int]] = {}
    done = threading.Event()
    seen = threading.Event()
    with held_index(lambda name: _file_of(files, name), _first_of(log)) as (base, release):
        entry = _entry(blob, base)

        op = _chain_op(entry, log, tmp_path, got, done)

        def watch() -> None:
            try:
                wait_for(lambda: _peer_part(tmp_path / "h02"), "bytes at h02")
                seen.set()
            finally:
                release.set()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        result, _runner = _run(trio, tmp_path, op)
        watcher.join(5)
    assert {h: r.status for h, r in result.hosts.items()} == dict.fromkeys(got, "ok")
    assert seen.is_set()  # h02 had bytes while the index still held the rest back
    assert got["h00"][0] == "index" and got["h01"] == ("peer:h00", 0)
    assert got["h02"] == ("peer:h01", 0)
    assert log == [blob.name]
    for name in ("h00", "h01", "h02"):
        mine = tmp_path / name / "releases" / entry.sha256 / entry.filename
        assert hashlib.sha256(mine.read_bytes()).hexdigest() == entry.sha256
        assert not list(mine.parent.glob("*.part"))


def test_a_holder_that_dies_mid_file_is_replaced_by_another_holder(
    trio: Fleet, tmp_path: Path
) -> None:
    """h02 takes the file from h01, which takes it from h00 (the index holds the rest). h01's
    host process is killed while h02 streams from it: h02's download is cut short, refused,
    and taken again from h00, whole and checked; h01 fails with one line; nothing
    half-written stays on h02."""
    files = tmp_path / "index"
    files.mkdir()
    blob = files / "demo_blob-1.0-py3-none-any.whl"
    blob.write_bytes(os.urandom(3 << 20))
    log: list[str] = []
    got: dict[str, tuple[str, int]] = {}
    done = threading.Event()
    killed: list[int] = []
    with held_index(lambda name: _file_of(files, name), _first_of(log)) as (base, release):
        entry = _entry(blob, base)
        runner_box: list[Runner] = []

        op = _chain_op(entry, log, tmp_path, got, done, runner_box)

        def kill_h01() -> None:
            try:
                wait_for(lambda: _peer_part(tmp_path / "h02"), "bytes at h02")
                url = str(runner_box[0].shared.wheel_cache.peers.base_url("h01"))  # type: ignore[union-attr]
                address, port = url.split("//")[1].split("/")[0].split(":")
                pid = _pid_listening(address, int(port))
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)  # h01's fetch_release service (our child's)
                    killed.append(pid)
            finally:
                release.set()

        killer = threading.Thread(target=kill_h01, daemon=True)
        killer.start()
        result, _runner = _run(trio, tmp_path, op)
        killer.join(5)
    assert killed
    status = {h: r.status for h, r in result.hosts.items()}
    assert status == {"h00": "ok", "h01": "failed", "h02": "ok"}, {
        h: r.error for h, r in result.hosts.items()
    }
    assert "\n" not in str(result.hosts["h01"].error)
    assert got["h02"] == ("peer:h00", 0), result.hosts["h02"].data.get("cache_events")
    events = result.hosts["h02"].data.get("cache_events") or []
    assert any(ev.startswith("peer h01:") for ev in events), events
    mine = tmp_path / "h02" / "releases" / entry.sha256 / entry.filename
    assert hashlib.sha256(mine.read_bytes()).hexdigest() == entry.sha256
    assert not list(mine.parent.glob("*.part"))
    assert log == [blob.name]  # the index was asked once: h02's second try came from h00
