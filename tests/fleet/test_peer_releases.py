"""Released files host to host, the controller out of the bytes' path (ops/stack_files.py,
cache/peers.py, remote/lib/peers.py): real sshd hosts on loopback (tests/support/fleet.py),
each host's real ``fetch_release`` service and its peer server, a real loopback index
(tests/support/tiny_index.py). Nothing is simulated here but the index being on loopback.

The whole provision of a three-host fleet taking its files from peers is
tests/real/test_stack.py::test_three_hosts_download_each_locked_file_from_the_index_once; this
file holds what a provision cannot order: a peer's file changed after it was checked."""

from __future__ import annotations

import hashlib
import posixpath
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from sm120kit.cache.key import compute_key
from sm120kit.cache.peers import Peers
from sm120kit.cache.s3 import S3Store
from sm120kit.cache.wheels import cache_for
from sm120kit.inventory.host import Host
from sm120kit.ops.stack_files import obtain_release, release_inputs
from sm120kit.remote.lib.peers import mirror_problem
from sm120kit.runner.connection import ConnectOptions
from sm120kit.runner.host_context import HostContext
from sm120kit.runner.pool import Runner, RunOptions
from sm120kit.stack.lock import LockEntry
from tests.conftest import S3_BUCKET
from tests.support.fleet import Fleet
from tests.support.tiny_index import lock_entry, make_wheel, serve


def test_a_peer_file_with_other_bytes_is_refused_and_fetched_from_the_index(
    fleet: Fleet, tmp_path: Path
) -> None:
    """gpu1 downloads two files from the index and serves them; one is then changed on its
    disk. gpu6 takes the good one from gpu1 (the index is not asked again) and refuses the
    changed one by its sha256, downloading it from the index instead; no byte of either went
    through the controller (its store was never filled: the puts wait for `fill_stores`)."""
    files = tmp_path / "index"
    good = make_wheel(files, "peer-good", "1.0")
    bad = make_wheel(files, "peer-bad", "1.0")
    served: list[str] = []
    hosts = []
    for name in ("gpu1", "gpu6"):
        sim = fleet.by_name(name)
        hosts.append(Host(name, vars={**fleet.all_vars(sim), "work_root": str(tmp_path / name)}))
    ready, done = threading.Event(), threading.Event()
    got: dict[tuple[str, str], tuple[str, int]] = {}
    with serve(files, log=served) as url:
        entries = [lock_entry(good, url), lock_entry(bad, url)]
        index = entries[0].url.rsplit("/", 1)[0]

        def dest(ctx: HostContext, e: LockEntry) -> str:
            return posixpath.join(str(ctx.host.work_root), "releases", e.sha256, e.filename)

        def op(ctx: HostContext) -> None:
            name = ctx.host.name
            if name == "gpu6" and not ready.wait(120):
                raise AssertionError("gpu1 never got its files")
            try:
                for e in entries:
                    got[(name, e.name)] = obtain_release(ctx, e, dest(ctx, e), indexes=(index,))
                if name == "gpu1":
                    # Changed after it was checked (a disk error, a person): gpu1 serves it.
                    Path(dest(ctx, entries[1])).write_bytes(b"not the lock's file")
            finally:
                (ready if name == "gpu1" else done).set()
            if name == "gpu1":
                done.wait(120)  # serving until gpu6 is through

        runner = Runner(
            RunOptions(
                run_root=str(tmp_path / "runs"),
                connect=ConnectOptions(known_hosts=str(fleet.known_hosts)),
            )
        )
        store = tmp_path / "controller-store"
        runner.settings = {"cache": {"controller": str(store)}}
        result = runner.run("peers", hosts, op)
    assert {h: r.status for h, r in result.hosts.items()} == {"gpu1": "ok", "gpu6": "ok"}, {
        h: r.error for h, r in result.hosts.items()
    }
    g, b = entries[0].name, entries[1].name
    assert got[("gpu1", g)][0] == "index" and got[("gpu1", b)][0] == "index"
    assert got[("gpu6", g)] == ("peer:gpu1", 0)
    origin, downloaded = got[("gpu6", b)]
    assert origin == "index" and downloaded == bad.stat().st_size
    # The index served the good file once (to gpu1), the changed one twice.
    assert sorted(served) == sorted([good.name, bad.name, bad.name])
    for e in entries:
        mine = tmp_path / "gpu6" / "releases" / e.sha256 / e.filename
        assert hashlib.sha256(mine.read_bytes()).hexdigest() == e.sha256
        assert not list(mine.parent.glob("*.part"))
    events = result.hosts["gpu6"].data.get("cache_events") or []
    assert any("peer gpu1:" in ev and "differs from the lock's" in ev for ev in events), events
    assert not list(store.rglob("*.whl"))  # nothing relayed, nothing stored yet


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://127.0.0.2:8000/tok/" + "a" * 64 + "/x-1-py3-none-any.whl", None),
        ("https://127.0.0.2:8000/tok/" + "a" * 64 + "/x-1-py3-none-any.whl", "plain http"),
        ("http://u:p@127.0.0.2:8000/tok/" + "a" * 64 + "/x-1-py3-none-any.whl", "plain http"),
        ("http://127.0.0.2:8000/tok/" + "b" * 64 + "/x-1-py3-none-any.whl", "does not end"),
        ("http://127.0.0.2:8000/tok/" + "a" * 64 + "/y-1-py3-none-any.whl", "does not end"),
        ("file:///etc/passwd", "plain http"),
    ],
)
def test_a_mirror_url_names_the_lock_file_by_sha256(url: str, problem: str | None) -> None:
    entry: dict[str, Any] = {"sha256": "a" * 64, "dest": "/w/releases/x/x-1-py3-none-any.whl"}
    said = mirror_problem(url, entry)
    assert (said is None) if problem is None else (said is not None and problem in said)


def test_a_host_waits_for_the_download_in_flight_then_takes_it_from_that_peer() -> None:
    peers = Peers()
    peers.serving("a", "http://127.0.0.2:1/t")
    peers.serving("b", "http://127.0.0.3:1/t")
    assert peers.claim("s", "a") is None  # a downloads it
    taken: list[str | None] = []
    waiter = threading.Thread(target=lambda: taken.append(peers.claim("s", "b")))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and not taken  # b waits for a, does not ask the index too
    peers.placed("s", "a", True)
    waiter.join(10)
    assert taken == ["a"]
    peers.uploaded("a")
    peers.placed("s", "b", False)  # b gave up (a taker is offered as a holder until it ends)
    peers.leave("a")
    assert peers.claim("s", "c") is None  # a left: c gets it another way
    assert peers.claim("t", "b", wait_s=0) is None


def test_a_wheel_in_an_s3_store_is_taken_by_the_host_from_a_presigned_url(
    fleet: Fleet, tmp_path: Path, s3_endpoint: str
) -> None:
    """A released file already in a shared S3 store (moto's real S3 server on loopback): the
    host downloads it from the bucket by a presigned URL (its sha256 checked there), and the
    controller relays none of its bytes. The URL's signature is in no log of the run."""
    files = tmp_path / "files"
    wheel = make_wheel(files, "peer-s3", "1.0")
    entry = lock_entry(wheel, "http://127.0.0.1:9/simple")  # an index that answers nothing
    prefix = f"tests/{tmp_path.name}"
    store = S3Store(S3_BUCKET, prefix, endpoint_url=s3_endpoint)
    inputs = release_inputs(entry)
    store.put(compute_key(inputs), wheel, {"inputs": inputs.to_dict()})
    sim = fleet.by_name("gpu8")
    host = Host("gpu8", vars={**fleet.all_vars(sim), "work_root": str(tmp_path / "gpu8")})
    got: list[tuple[str, int]] = []
    stats: dict[str, int] = {}

    def op(ctx: HostContext) -> None:
        dest = posixpath.join(str(ctx.host.work_root), "releases", entry.sha256, entry.filename)
        got.append(obtain_release(ctx, entry, dest, indexes=("http://127.0.0.1:9",)))
        stats.update(cache_for(ctx.runner).stats)

    runner = Runner(
        RunOptions(
            run_root=str(tmp_path / "runs"),
            connect=ConnectOptions(known_hosts=str(fleet.known_hosts)),
        )
    )
    spec = {"type": "s3", "name": "bucket", "bucket": S3_BUCKET, "prefix": prefix,
            "endpoint_url": s3_endpoint}  # fmt: skip
    runner.settings = {"cache": {"controller": str(tmp_path / "store"), "stores": [spec]}}
    result = runner.run("s3", [host], op)
    assert result.hosts["gpu8"].status == "ok", result.hosts["gpu8"].error
    assert got == [("cache:bucket", 0)]
    assert stats.get("direct_to_hosts") == 1 and not stats.get("bytes_to_hosts"), stats
    placed = tmp_path / "gpu8" / "releases" / entry.sha256 / entry.filename
    assert hashlib.sha256(placed.read_bytes()).hexdigest() == entry.sha256
    logs = "".join(p.read_text() for p in (tmp_path / "runs").rglob("*.log"))
    signatures = re.findall(r"Signature=([^&\s\"']+)", logs)
    assert signatures and set(signatures) == {"****"}, signatures
