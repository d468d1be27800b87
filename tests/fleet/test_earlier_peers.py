"""Earlier runs' hosts as peers (issue 46): the controller records which host held which
released files when it left a run (cache/holders.py), and a later run's new host takes them
from that host, host to host, instead of from the controller store relayed over SFTP; a
recorded holder that is down costs only the store's relay (ops/stack_files.py). Real sshd
hosts on loopback (127.0.0.114-116, tests/support/fleet.py), their real ``fetch_release``
services and peer servers, a real loopback index (tests/support/tiny_index.py); nothing is
simulated but the index being on loopback."""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sm120kit.cache.holders import Held, earlier_holders, read_record, record, record_path
from sm120kit.cache.wheels import cache_for
from sm120kit.inventory.host import Host
from sm120kit.ops.stack_files import fill_stores, leave_peers, obtain_release
from sm120kit.runner.connection import ConnectOptions
from sm120kit.runner.host_context import HostContext
from sm120kit.runner.pool import Runner, RunOptions
from tests.support.fleet import Fleet, fleet_of
from tests.support.tiny_index import lock_entry, make_wheel, serve


@pytest.fixture(scope="module")
def hosts3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Three real sshd hosts on 127.0.0.114-116."""
    fleet = fleet_of(3, tmp_path_factory.mktemp("earlier-fleet"), first=114)
    fleet.start()
    yield fleet
    fleet.stop()


def _runner(fleet: Fleet, tmp: Path, known: tuple[str, ...]) -> tuple[Runner, dict[str, Host]]:
    inventory = {
        n: Host(n, vars={**fleet.all_vars(fleet.by_name(n)), "work_root": str(tmp / n)})
        for n in known
    }
    runner = Runner(
        RunOptions(
            run_root=str(tmp / "runs"), connect=ConnectOptions(known_hosts=str(fleet.known_hosts))
        )
    )
    runner.settings = {"cache": {"controller": str(tmp / "controller-store")}}
    runner.shared.inventory = dict(inventory)
    return runner, inventory


def test_a_later_runs_new_host_takes_the_files_from_an_earlier_host(
    hosts3: Fleet, tmp_path: Path
) -> None:
    """Run 1: h00 downloads two files, fills the controller store, leaves (the record now
    says h00 holds both). Run 2, h01 alone: its files come from h00 (started as a peer for
    this run), the index is not asked and the controller relays no byte. Run 3, h02 alone
    with h00 down (h01 not in the inventory): h02 takes them from the controller store, and
    says why."""
    files = tmp_path / "index"
    wheels = [make_wheel(files, "later-a", "1.0"), make_wheel(files, "later-b", "2.0")]
    served: list[str] = []
    got: dict[tuple[str, str], tuple[str, int]] = {}

    def op(ctx: HostContext) -> None:
        for e in entries:
            dest = posixpath.join(str(ctx.host.work_root), "releases", e.sha256, e.filename)
            got[(ctx.host.name, e.name)] = obtain_release(ctx, e, dest, indexes=(index,))
        fill_stores(ctx)
        leave_peers(ctx)

    def run(known: tuple[str, ...], names: tuple[str, ...]) -> tuple[Any, Runner]:
        runner, inventory = _runner(hosts3, tmp_path, known)
        try:
            result = runner.run("later", [inventory[n] for n in names], op)
        finally:
            cache_for(runner).close()  # as the CLI's exit does: earlier holders' servers end
        assert {h: r.status for h, r in result.hosts.items()} == dict.fromkeys(names, "ok"), {
            h: r.error for h, r in result.hosts.items()
        }
        return result, runner

    with serve(files, log=served) as url:
        entries = [lock_entry(w, url) for w in wheels]
        index = entries[0].url.rsplit("/", 1)[0]
        run(("h00",), ("h00",))
        assert sorted(served) == sorted(w.name for w in wheels)
        held = read_record(record_path(str(tmp_path / "runs")))
        assert held["h00"].sha256 == {e.sha256 for e in entries}
        assert held["h00"].releases == str(tmp_path / "h00" / "releases")

        served.clear()
        _, second = run(("h00", "h01"), ("h01",))
        assert {got[("h01", e.name)] for e in entries} == {("peer:h00", 0)}
        assert served == []
        assert cache_for(second).stats.get("bytes_to_hosts", 0) == 0  # nothing relayed

        hosts3.stop_host("h00")
        try:
            third, _ = run(("h00", "h02"), ("h02",))
        finally:
            hosts3.start_host("h00")
        assert {got[("h02", e.name)][0] for e in entries} == {"cache:local"}
        assert served == []
    events = third.hosts["h02"].data.get("cache_events") or []
    assert any(ev.startswith("earlier holder h00 not started") for ev in events), events
    for name in ("h01", "h02"):
        for e in entries:
            mine = tmp_path / name / "releases" / e.sha256 / e.filename
            assert hashlib.sha256(mine.read_bytes()).hexdigest() == e.sha256


@pytest.mark.parametrize(
    ("before", "releases", "shas", "after"),
    [
        (None, "/w/releases", ["a"], {"a"}),
        ({"releases": "/w/releases", "sha256": ["a"]}, "/w/releases", ["b"], {"a", "b"}),
        ({"releases": "/old/releases", "sha256": ["a"]}, "/w/releases", ["b"], {"b"}),
    ],
)
def test_the_record_keeps_a_hosts_files_for_the_same_releases_dir(
    tmp_path: Path, before: dict[str, Any] | None, releases: str, shas: list[str], after: set[str]
) -> None:
    path = tmp_path / "holders.json"
    if before is not None:
        path.write_text(json.dumps({"hosts": {"h": before}}))
    record(path, "h", releases, shas)
    assert read_record(path)["h"] == Held("h", releases, frozenset(after))


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("", set()),
        ("not json", set()),
        ('{"hosts": {"h": {"releases": 3, "sha256": []}}}', set()),
        ('{"hosts": {"h": {"releases": "/r", "sha256": ["x"]}}}', {"h"}),
    ],
)
def test_a_broken_record_is_no_record(tmp_path: Path, text: str, hosts: set[str]) -> None:
    path = tmp_path / "holders.json"
    path.write_text(text)
    assert set(read_record(path)) == hosts


def test_earlier_holders_are_inventory_hosts_outside_the_run() -> None:
    held = {
        h: Held(h, "/r", frozenset(s))
        for h, s in {"a": {"x"}, "b": {"x", "y"}, "gone": {"x"}, "c": {"y"}}.items()
    }
    chosen = earlier_holders(held, "x", frozenset({"a"}), frozenset({"a", "b", "c"}))
    assert [h.host for h in chosen] == ["b"]  # a is in the run, gone not in the inventory
