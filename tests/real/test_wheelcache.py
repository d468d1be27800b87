"""The wheel cache end to end: real sshd hosts, real SFTP, real pip builds, a real S3 server.

`WheelCache.obtain` is driven through `Runner.run` on fleet hosts with a real build closure:
it writes a minimal setuptools project into the host's work_root and runs
``python -m pip wheel`` there, counting builds. Each test gives every host a fresh work_root
below the fleet's, so no state is shared through the hosts. Nothing is simulated here except
the GPUs of the fleet, which these tests do not use.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import textwrap
import threading
import time
import venv
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sm120kit.cache.commands import parse_size
from sm120kit.cache.config import CacheConfig
from sm120kit.cache.key import KeyInputs, compute_key
from sm120kit.cache.request import BuiltWheel
from sm120kit.cache.resolve import host_store_specs
from sm120kit.cache.store import LocalStore, entry_dir
from sm120kit.cache.wheels import WheelCache, cache_for
from sm120kit.errors import HostFailed, HostUnreachable
from sm120kit.inventory.host import Host
from sm120kit.runner.pool import HostContext, Runner, RunOptions
from sm120kit.runner.results import RunResult
from tests.conftest import REPO, S3_BUCKET, invoke_env, json_of, run_invoke
from tests.support.killed_child import kill_at_ready
from tests.support.wheel_cache_runs import (
    Builds,
    all_ok,
    cli_env,
    config,
    fill_store,
    flip_bytes,
    hosts_of,
    obtain_run,
    tiny_inputs,
    wheel_from,
    wheel_in,
)

# ---- a real tiny build on the host ------------------------------------------------------------


def test_four_hosts_one_build_then_new_key_per_changed_input(fleet: Any, tmp_path: Path) -> None:
    """4 hosts, one key: one builds, three install from the cache; each input change: 1 build."""
    ctl = tmp_path / "controller"
    conf = config(ctl)
    hosts = hosts_of(fleet, ["gpu1", "gpu2", "gpu3", "gpu4"], f"wc-{secrets.token_hex(3)}")
    builds = Builds(delay=0.5)
    inputs = tiny_inputs()
    key = compute_key(inputs)

    result, cache = obtain_run(fleet, tmp_path, hosts, conf, inputs, builds, install=True)
    all_ok(result)
    froms = wheel_from(result)
    assert sorted(froms.values()) == ["build", "cache:local", "cache:local", "cache:local"]
    assert len(builds.hosts) == 1
    builder = builds.hosts[0]
    assert froms[builder] == "build"
    assert {h.data["key"] for h in result.hosts.values()} == {key}
    assert len({h.data["sha256"] for h in result.hosts.values()}) == 1
    # Installed and importable everywhere, the very wheel that was built.
    assert {h.data["installed_value"] for h in result.hosts.values()} == {key[:12]}
    assert cache.stats["builds"] == 1 and cache.stats["hits:local"] == 3

    store = LocalStore(ctl)
    assert store.keys() == [key]
    meta = store.get_meta(key)
    assert meta is not None
    assert meta["builder_host"] == builder and meta["inputs"] == inputs.to_dict()
    assert meta["log_path"].endswith("build.log") and meta["build_seconds"] > 0
    assert meta["size"] > 0 and len(meta["sha256"]) == 64 and meta["created"] > 0
    assert 1 <= store.list()[0]["hits"] <= 3  # hit counts are best-effort under races
    # The builder keeps its own copy under work_root/cache/wheels, with the same meta fields.
    builder_root = Path(next(h for h in hosts if h.name == builder).work_root)
    host_meta = json.loads(
        (builder_root / "cache/wheels" / entry_dir(key) / "meta.json").read_text()
    )
    assert host_meta["sha256"] == meta["sha256"] and host_meta["builder_host"] == builder
    # No temp files left anywhere: not in the stores, not in the destination dirs.
    for h in hosts:
        assert not [p for p in Path(h.work_root, "wheels").iterdir() if p.name.startswith(".")]
    assert not list(ctl.rglob(".tmp-*")) and not list((ctl / "locks").iterdir())

    # Second run: the builder finds it in its host store, the others in the controller store.
    again, _ = obtain_run(fleet, tmp_path, hosts, conf, inputs, builds)
    all_ok(again)
    assert wheel_from(again)[builder] == "cache:host"
    assert sorted(wheel_from(again).values()).count("cache:local") == 3
    assert len(builds.hosts) == 1

    # Any input that can change the binary: a new key and exactly one new build each.
    two = hosts[:2]
    for change in (
        {"arch_list": ("12.0", "10.0")},
        {"patches": (("sm120-loader.patch", "c" * 64),)},
        {"torch_version": "2.9.1"},
    ):
        before = len(builds.hosts)
        changed = tiny_inputs(**change)
        assert compute_key(changed) != key
        res, _ = obtain_run(fleet, tmp_path, two, conf, changed, builds)
        all_ok(res)
        assert sorted(wheel_from(res).values()) == ["build", "cache:local"], change
        assert len(builds.hosts) == before + 1
    assert len(store.keys()) == 4
    # A change that cannot alter the binary (parallelism) keeps the key.
    same = tiny_inputs(build_env={"TORCH_CUDA_ARCH_LIST": "12.0", "MAX_JOBS": "64"})
    assert compute_key(same) == key


def test_check_mode_only_looks(fleet: Any, tmp_path: Path) -> None:
    """Check mode: 'cache:<store>' or 'would build', and nothing written anywhere."""
    ctl = tmp_path / "controller"
    conf = config(ctl)
    hosts = hosts_of(fleet, ["gpu1", "gpu2"], f"wc-{secrets.token_hex(3)}")
    builds = Builds()
    inputs = tiny_inputs(version="0.2")
    first, _ = obtain_run(fleet, tmp_path, hosts[:1], conf, inputs, builds)
    all_ok(first)

    def snapshot() -> dict[str, bytes]:
        roots = [ctl] + [Path(h.work_root) for h in hosts]
        return {str(p): p.read_bytes() for r in roots for p in r.rglob("*") if p.is_file()}

    before = snapshot()
    plan, _ = obtain_run(fleet, tmp_path, hosts, conf, inputs, builds, check_mode=True)
    all_ok(plan)
    assert wheel_from(plan) == {"gpu1": "cache:host", "gpu2": "cache:local"}
    assert all(h.data["path"] == "" for h in plan.hosts.values())
    new, _ = obtain_run(
        fleet, tmp_path, hosts, conf, tiny_inputs(version="0.3"), builds, check_mode=True
    )
    assert wheel_from(new) == {"gpu1": "would build", "gpu2": "would build"}
    assert len(builds.hosts) == 1
    assert snapshot() == before  # not even a hit counter moved


# ---- integrity --------------------------------------------------------------------------------


def test_corrupt_entries_are_quarantined_then_refetched_or_rebuilt(
    fleet: Any, tmp_path: Path
) -> None:
    ctl = tmp_path / "controller"
    conf = config(ctl)
    tag = f"wc-{secrets.token_hex(3)}"
    [gpu1, gpu2, gpu3] = hosts_of(fleet, ["gpu1", "gpu2", "gpu3"], tag)
    builds = Builds()
    inputs = tiny_inputs(version="0.4")
    key = compute_key(inputs)
    all_ok(obtain_run(fleet, tmp_path, [gpu1], conf, inputs, builds)[0])

    # Bit rot in the builder's host store: detected on the host, quarantined there, refetched.
    flip_bytes(wheel_in(Path(gpu1.work_root) / "cache/wheels", key))
    res, _ = obtain_run(fleet, tmp_path, [gpu1], conf, inputs, builds)
    all_ok(res)
    assert wheel_from(res) == {"gpu1": "cache:local"}
    [event] = res.hosts["gpu1"].data["cache_events"]
    assert "corrupt" in event and "host" in event and "quarantined" in event
    assert list((Path(gpu1.work_root) / "cache/wheels/quarantine").iterdir())

    # Bit rot in the controller store: quarantined; no other copy reachable -> rebuilt.
    flip_bytes(wheel_in(ctl, key))
    res, _ = obtain_run(fleet, tmp_path, [gpu2], conf, inputs, builds)
    all_ok(res)
    assert wheel_from(res) == {"gpu2": "build"} and builds.hosts == ["gpu1", "gpu2"]
    assert any("local corrupt" in e for e in res.hosts["gpu2"].data["cache_events"])
    [record] = LocalStore(ctl).quarantined()
    assert record["key"] == key and "sha256" in record["reason"]
    # The rebuilt entry is whole again and serves the next host.
    res, _ = obtain_run(fleet, tmp_path, [gpu3], conf, inputs, builds)
    assert wheel_from(res) == {"gpu3": "cache:local"}


KILLED_PUT_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from sm120kit.cache import store as st
    from tests.real import test_wheelcache as t

    args = json.loads(sys.argv[1])

    def parked(self, path, src, *, link):
        # Mid-write (a copy, or the link of the fetched temporary): part of the wheel is in
        # the store's temp file when the kill comes.
        tmp = self._temp_beside(self._p(path))
        with open(tmp, "wb") as fh:
            fh.write(open(src, "rb").read()[:100])
            fh.flush()
        print("READY", flush=True)
        time.sleep(600)

    st.LocalStore.upload_wheel = parked

    class Fleet:
        known_hosts = args["known_hosts"]

    host = t.Host(args["name"], vars=args["vars"])
    conf = t.config(t.Path(args["controller"]))
    t.obtain_run(Fleet, t.Path(args["tmp"]), [host], conf, t.tiny_inputs(version="0.5"),
                 t.Builds())
    print("FINISHED", flush=True)
    """
)


def test_killed_store_write_leaves_no_entry(fleet: Any, tmp_path: Path) -> None:
    """SIGKILL a real controller process while it writes the built wheel into its store.

    The store then has no entry (only an incomplete dir), the dead run's lock goes stale and is
    taken over, and the next run builds and stores the key normally.
    """
    ctl = tmp_path / "controller"
    [host] = hosts_of(fleet, ["gpu1"], f"wc-{secrets.token_hex(3)}")
    key = compute_key(tiny_inputs(version="0.5"))
    args = {
        "name": host.name,
        "vars": host.vars,
        "known_hosts": str(fleet.known_hosts),
        "controller": str(ctl),
        "tmp": str(tmp_path / "child"),
    }
    kill_at_ready(KILLED_PUT_CHILD, json.dumps(args), cwd=REPO)

    store = LocalStore(ctl)
    assert store.keys() == [] and store.get_meta(key) is None
    assert key in store.incomplete()
    assert store.holder(key) is not None  # the dead run's lock is still there

    builds = Builds()
    conf = config(ctl, stale_lock_after=1.0)
    time.sleep(1.2)
    res, _ = obtain_run(fleet, tmp_path, [host], conf, tiny_inputs(version="0.5"), builds)
    all_ok(res)
    # The kill came before the host store got its copy: nothing to reuse, one clean build.
    assert wheel_from(res) == {"gpu1": "build"} and builds.hosts == ["gpu1"]
    other = hosts_of(fleet, ["gpu2"], f"wc-{secrets.token_hex(3)}")
    res2, _ = obtain_run(fleet, tmp_path, other, conf, tiny_inputs(version="0.5"), builds)
    assert wheel_from(res2) == {"gpu2": "cache:local"}
    assert store.keys() == [key] and store.holder(key) is None


# ---- elections --------------------------------------------------------------------------------


def test_two_runs_at_once_build_one_key_once(fleet: Any, tmp_path: Path) -> None:
    """Two Runner.run calls in two threads, separate WheelCaches, one controller store."""
    ctl = tmp_path / "controller"
    tag = f"wc-{secrets.token_hex(3)}"
    hosts = hosts_of(fleet, ["gpu1", "gpu2", "gpu3", "gpu4"], tag)
    builds = Builds(delay=1.5)
    inputs = tiny_inputs(version="0.6")
    barrier = threading.Barrier(4)
    results: dict[int, RunResult] = {}

    def one(i: int) -> None:
        results[i] = obtain_run(
            fleet, tmp_path, hosts[2 * i : 2 * i + 2], config(ctl), inputs, builds, barrier=barrier
        )[0]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    for r in results.values():
        all_ok(r)
    froms = {**wheel_from(results[0]), **wheel_from(results[1])}
    assert len(builds.hosts) == 1
    assert sorted(froms.values()) == ["build", "cache:local", "cache:local", "cache:local"]
    events = [
        e
        for r in results.values()
        for h in r.hosts.values()
        for e in h.data.get("cache_events", [])
    ]
    assert any("another run's build" in e for e in events), events
    assert LocalStore(ctl).holder(compute_key(inputs)) is None


def test_failed_builder_fails_its_waiters(fleet: Any, tmp_path: Path) -> None:
    hosts = hosts_of(fleet, ["gpu1", "gpu2", "gpu3"], f"wc-{secrets.token_hex(3)}")
    builds = Builds(delay=0.5, fail=HostFailed("tinypkg: build failed (compile error)"))
    res, _ = obtain_run(fleet, tmp_path, hosts, config(tmp_path / "c"), tiny_inputs(), builds)
    assert len(builds.hosts) == 1
    [builder] = builds.hosts
    assert res.hosts[builder].error == "tinypkg: build failed (compile error)"
    for name, h in res.hosts.items():
        if name != builder:
            assert h.status == "failed"
            assert h.error is not None and h.error.startswith(f"builder {builder} failed")


def test_lost_builder_hands_over_to_the_next_host(fleet: Any, tmp_path: Path) -> None:
    """A builder that became unreachable says nothing about the build: the next host builds."""
    hosts = hosts_of(fleet, ["gpu1", "gpu2", "gpu3"], f"wc-{secrets.token_hex(3)}")

    class FirstLost(Builds):
        def closure(self, ctx: HostContext, inputs: KeyInputs) -> Callable[[], BuiltWheel]:
            real = super().closure(ctx, inputs)

            def build() -> BuiltWheel:
                with self._lock:
                    first = not self.hosts
                if first:
                    self.hosts.append(ctx.host.name)
                    time.sleep(0.5)
                    raise HostUnreachable(f"connection to {ctx.host.name} lost")
                return real()

            return build

    builds = FirstLost()
    res, _ = obtain_run(fleet, tmp_path, hosts, config(tmp_path / "c"), tiny_inputs(), builds)
    froms = wheel_from(res)
    lost = builds.hosts[0]
    assert res.hosts[lost].status == "unreachable" and len(builds.hosts) == 2
    others = sorted(v for n, v in froms.items() if n != lost)
    assert others == ["build", "cache:local"]


def test_build_host_var_means_wait_for_the_cache(fleet: Any, tmp_path: Path) -> None:
    """Host var build_host: gpu3 on every host: only gpu3 builds, whatever the thread order."""
    names = ["gpu1", "gpu2", "gpu3"]
    extra = {n: {"build_host": "gpu3"} for n in names}
    hosts = hosts_of(fleet, names, f"wc-{secrets.token_hex(3)}", **extra)
    builds = Builds()
    res, _ = obtain_run(fleet, tmp_path, hosts, config(tmp_path / "c"), tiny_inputs(), builds)
    all_ok(res)
    assert builds.hosts == ["gpu3"]
    assert wheel_from(res) == {"gpu1": "cache:local", "gpu2": "cache:local", "gpu3": "build"}
    # Alone, a host that may not build waits for the cache and then gives up with one line.
    lonely = hosts_of(fleet, ["gpu1"], f"wc-{secrets.token_hex(3)}", gpu1={"build_host": "gpu9"})
    res, _ = obtain_run(
        fleet,
        tmp_path,
        lonely,
        config(tmp_path / "c2", wait_timeout=0.5),
        tiny_inputs(version="9"),
        builds,
    )
    assert res.hosts["gpu1"].status == "failed"
    assert "build_host=gpu9" in (res.hosts["gpu1"].error or "")


class MetaReadFailsOnce(LocalStore):
    """The controller store, whose first meta read after a put raises ``error`` once.

    That read is a waiter's look right after the builder published: the moment at which a
    transient store error used to mark the store down for the whole run and leave every
    waiter polling nothing until ``wait_timeout``. Nothing is simulated but the one error.
    """

    def __init__(self, root: Path, error: BaseException) -> None:
        super().__init__(root, name="local")
        self.error = error
        self.armed = False
        self.raised = 0
        self._guard = threading.Lock()

    def put(self, key: str, wheel_path: Any, meta: Any, **how: Any) -> dict[str, Any]:
        full = super().put(key, wheel_path, meta, **how)
        self.armed = True
        return full

    def read_blob(self, path: str) -> bytes | None:
        if path.endswith("/meta.json"):
            with self._guard:
                if self.armed:
                    self.armed = False
                    self.raised += 1
                    raise self.error
        return super().read_blob(path)


@pytest.mark.parametrize(
    "error",
    [
        OSError(5, "Input/output error (injected)"),
        ConnectionResetError(104, "Connection reset by peer (injected)"),
    ],
    ids=["read-glitch", "unreachable"],
)
def test_a_store_error_while_the_builder_publishes_strands_no_waiter(
    fleet: Any, tmp_path: Path, error: BaseException
) -> None:
    """gpu1 and gpu2 wait for gpu3 (build_host); a lookup in the controller store fails once
    right after gpu3 published. Both waiters still get the wheel from that store: a glitch is
    a miss, an unreachable store is asked again after a short back-off, and either way the
    JSON's cache_events says what happened."""
    names = ["gpu1", "gpu2", "gpu3"]
    hosts = hosts_of(
        fleet, names, f"wc-{secrets.token_hex(3)}", **{n: {"build_host": "gpu3"} for n in names}
    )
    store = MetaReadFailsOnce(tmp_path / "c", error)
    builds = Builds()
    res, _ = obtain_run(
        fleet, tmp_path, hosts, config(tmp_path / "c"), tiny_inputs(), builds, controller=store
    )
    all_ok(res)
    assert store.raised == 1
    assert builds.hosts == ["gpu3"]
    assert wheel_from(res) == {"gpu1": "cache:local", "gpu2": "cache:local", "gpu3": "build"}
    events = [e for n in ("gpu1", "gpu2") for e in res.hosts[n].data.get("cache_events", [])]
    if isinstance(error, ConnectionError):
        assert any("store local unreachable" in e and "asked again in" in e for e in events)
        assert any("store local reachable again" in e for e in events), events
    else:
        assert any("lookup in local failed" in e and "taken as a miss" in e for e in events)
        assert not any("unreachable" in e for e in events), events


class PutRefused(LocalStore):
    """A controller store that refuses every put (as a read-only mount would)."""

    def put(self, key: str, wheel_path: Any, meta: Any, **how: Any) -> dict[str, Any]:
        raise PermissionError(13, "Permission denied (injected)")


def test_designated_builder_lost_or_unpublished_fails_waiters_at_once(
    fleet: Any, tmp_path: Path
) -> None:
    """Waiters on a build_host of the same run do not sit out wait_timeout (600 s here) when
    that host is lost before it builds, or builds but no store they read took the wheel: they
    fail at once, with a line that says which (the timeout's line says something else)."""
    names = ["gpu1", "gpu3"]
    slow = config(tmp_path / "c", wait_timeout=600.0)
    extra = {n: {"build_host": "gpu3"} for n in names}
    hosts = hosts_of(fleet, names, f"wc-{secrets.token_hex(3)}", **extra)
    lost = Builds(fail=HostUnreachable("gpu3: connection lost (injected)"))
    res, _ = obtain_run(fleet, tmp_path, hosts, slow, tiny_inputs(version="5"), lost)
    assert res.hosts["gpu3"].status == "unreachable"
    assert res.hosts["gpu1"].status == "failed"
    assert "build_host=gpu3: that host was lost before it built" in (res.hosts["gpu1"].error or "")

    extra = {n: {"build_host": "gpu3", "wheel_cache_host_store": False} for n in names}
    hosts = hosts_of(fleet, names, f"wc-{secrets.token_hex(3)}", **extra)
    refused = PutRefused(tmp_path / "ro", name="local")
    res, _ = obtain_run(
        fleet, tmp_path, hosts, slow, tiny_inputs(version="6"), Builds(), controller=refused
    )
    assert wheel_from(res)["gpu3"] == "build"
    assert any("not stored in local" in e for e in res.hosts["gpu3"].data["cache_events"])
    assert res.hosts["gpu1"].status == "failed"
    assert "gpu3 built tinypkg" in (res.hosts["gpu1"].error or "")
    assert "no store took the wheel" in (res.hosts["gpu1"].error or "")


# ---- shared stores: S3 (moto server) and SSH (a fleet host as the team cache host) ---------


def test_s3_shared_store_serves_a_second_controller(
    fleet: Any, tmp_path: Path, s3_endpoint: str
) -> None:
    s3 = {
        "name": "s3team",
        "type": "s3",
        "bucket": S3_BUCKET,
        "prefix": f"wc/{secrets.token_hex(4)}",
        "endpoint_url": s3_endpoint,
    }
    tag = f"wc-{secrets.token_hex(3)}"
    [gpu1, gpu2, gpu3] = hosts_of(fleet, ["gpu1", "gpu2", "gpu3"], tag)
    builds = Builds()
    inputs = tiny_inputs(version="0.7")
    key = compute_key(inputs)
    first, _ = obtain_run(
        fleet, tmp_path, [gpu1], config(tmp_path / "ctl-a", stores=[s3]), inputs, builds
    )
    all_ok(first)
    assert wheel_from(first) == {"gpu1": "build"}

    # Another controller (empty store) on another host: the team's S3 bucket has it.
    ctl_b = tmp_path / "ctl-b"
    second, _ = obtain_run(fleet, tmp_path, [gpu2], config(ctl_b, stores=[s3]), inputs, builds)
    all_ok(second)
    events = second.hosts["gpu2"].data.get("cache_events")
    assert wheel_from(second) == {"gpu2": "cache:s3team"}, events
    assert builds.hosts == ["gpu1"], events
    assert LocalStore(ctl_b).keys() == [key]  # kept locally for next time

    # Corrupt controller B's copy: quarantined there, refetched from S3, no rebuild.
    flip_bytes(wheel_in(ctl_b, key))
    third, _ = obtain_run(fleet, tmp_path, [gpu3], config(ctl_b, stores=[s3]), inputs, builds)
    all_ok(third)
    assert wheel_from(third) == {"gpu3": "cache:s3team"} and builds.hosts == ["gpu1"]
    assert any("local corrupt" in e for e in third.hosts["gpu3"].data["cache_events"])
    # The build lock lived in S3 (the first shared store) and was released.
    from sm120kit.cache.s3 import S3Store

    bucket = S3Store(S3_BUCKET, s3["prefix"], endpoint_url=s3_endpoint)
    assert bucket.keys() == [key] and bucket.holder(key) is None


def test_sftp_team_store_on_a_cache_host(fleet: Any, tmp_path: Path) -> None:
    """gpu8 is the team cache host (real sshd, real sftp); its store is shared by hosts."""
    cache_host = fleet.by_name("gpu8")
    team_root = cache_host.work_root / f"team-{secrets.token_hex(3)}"
    team = {
        "name": "team",
        "type": "sftp",
        "host": cache_host.address,
        "port": fleet.port,
        "user": fleet.user,
        "key_filename": str(fleet.client_key),
        "path": str(team_root),
    }
    tag = f"wc-{secrets.token_hex(3)}"
    hosts = hosts_of(fleet, ["gpu1", "gpu2", "gpu3"], tag)
    builds = Builds()
    inputs = tiny_inputs(version="0.8")
    key = compute_key(inputs)
    first, _ = obtain_run(fleet, tmp_path, hosts[:1], config(False, stores=[team]), inputs, builds)
    all_ok(first)
    assert wheel_from(first) == {"gpu1": "build"}
    assert (team_root / entry_dir(key) / "meta.json").exists()
    # Two hosts at once through per-thread SFTP clients, from a controller with no store.
    res, _ = obtain_run(fleet, tmp_path, hosts[1:], config(False, stores=[team]), inputs, builds)
    all_ok(res)
    assert wheel_from(res) == {"gpu2": "cache:team", "gpu3": "cache:team"}
    assert builds.hosts == ["gpu1"] and not list((team_root / "locks").iterdir())


# ---- configuration ----------------------------------------------------------------------------


def test_config_and_host_var_stores(tmp_path: Path) -> None:
    conf = CacheConfig.from_settings(
        {
            "cache": {
                "controller": str(tmp_path / "c"),
                "stores": [
                    {"name": "team", "type": "sftp", "host": "cachebox", "path": "/srv/w"},
                    {"type": "s3", "bucket": "b", "prefix": "p"},
                ],
            }
        }
    )
    assert [s["name"] for s in conf.stores] == ["team", "s3:b/p"]
    host = Host(
        "gpu1",
        vars={
            "wheel_cache_stores": [
                {"name": "team", "type": "sftp", "host": "nearer", "path": "/w"},
                {"name": "mine", "type": "local", "path": str(tmp_path / "m")},
            ]
        },
        var_sources={"wheel_cache_stores": "inventory/host_vars/gpu1.yaml"},
    )
    merged = host_store_specs(conf, host)
    assert [(s["name"], s.get("host")) for s in merged] == [
        ("team", "nearer"),
        ("s3:b/p", None),
        ("mine", None),
    ]
    assert CacheConfig.from_settings({}).controller is None
    assert CacheConfig.from_settings({"cache": {"controller": "false"}}).controller is False
    with pytest.raises(Exception, match=r"sm120kit.cache: unknown key 'colour'"):
        CacheConfig.from_settings({"cache": {"colour": 1}})
    with pytest.raises(Exception, match=r"stores\[0\]: .*missing 'bucket'"):
        CacheConfig.from_settings({"cache": {"stores": [{"type": "s3"}]}})
    with pytest.raises(Exception, match=r"store name 'local' is reserved"):
        CacheConfig.from_settings({"cache": {"stores": [{"type": "local", "name": "local"}]}})
    bad = Host(
        "gpu2",
        vars={"wheel_cache_stores": [{"type": "ftp"}]},
        var_sources={"wheel_cache_stores": "inventory/group_vars/all.yaml"},
    )
    with pytest.raises(Exception, match=r"host gpu2 var wheel_cache_stores \(inventory/group_vars"):
        host_store_specs(conf, bad)
    assert parse_size("50G") == 50 << 30 and parse_size("1.5KiB") == 1536
    assert parse_size("100") == 100 and parse_size(None) is None


def test_cache_for_is_one_per_runner(tmp_path: Path) -> None:
    runner = Runner(RunOptions(run_root=str(tmp_path / "runs")))
    runner.settings = {"cache": {"controller": str(tmp_path / "c")}}  # type: ignore[attr-defined]
    got: list[WheelCache] = []
    threads = [threading.Thread(target=lambda: got.append(cache_for(runner))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in got}) == 1
    assert got[0].controller.root == tmp_path / "c" and got[0].controller.name == "local"
    assert cache_for(Runner(RunOptions())) is not got[0]


# ---- cache.* tasks through the real CLI -------------------------------------------------------


def test_cache_tasks_list_verify_prune(tmp_path: Path, tiny_wheels: dict[str, Path]) -> None:
    env = cli_env(tmp_path)
    store = LocalStore(tmp_path / "xdg" / "sm120kit" / "wheels")
    keys = fill_store(store, tiny_wheels)
    store.record_hit(keys["new"])

    proc = run_invoke(["cache.list", "--json"], env)
    assert proc.returncode == 0, proc.stderr
    doc = json_of(proc)
    assert doc["stores"] == ["local"]
    rows = {r["full_key"]: r for r in doc["entries"]}
    assert set(rows) == set(keys.values())
    new = rows[keys["new"]]
    assert {
        k: new[k] for k in ("package", "version", "key", "arch", "cuda", "torch", "hits", "store")
    } == {
        "package": "tinypkg",
        "version": "0.2",
        "key": keys["new"][:12],
        "arch": "12.0",
        "cuda": "13.0",
        "torch": "2.13.0",
        "hits": 1,
        "store": "local",
    }
    assert new["size"] == tiny_wheels["0.2"].stat().st_size and new["age"] < 600
    assert rows[keys["old"]]["age"] > 2 * 86400
    human = run_invoke(["cache.list"], env)
    assert human.returncode == 0 and "tinypkg" in human.stdout and keys["new"][:12] in human.stdout

    flip_bytes(wheel_in(store.root, keys["a90"]))
    proc = run_invoke(["cache.verify", "--json"], env)
    assert proc.returncode == 2
    doc = json_of(proc)
    assert doc["ok"] == 3 and doc["corrupt"] == 1
    [bad] = [r for r in doc["entries"] if r["status"] == "corrupt"]
    assert bad["key"] == keys["a90"] and "sha256" in bad["reason"]
    assert keys["a90"] not in store.keys() and store.quarantined()
    assert run_invoke(["cache.verify", "--json"], env).returncode == 0

    proc = run_invoke(["cache.prune", "--json", "--older-than", "1"], env)
    assert proc.returncode == 0, proc.stderr
    assert [r["key"] for r in json_of(proc)["removed"]] == [keys["old"]]
    proc = run_invoke(["cache.prune", "--json", "--keep", "1"], env)
    assert [r["key"] for r in json_of(proc)["removed"]] == [keys["a80"]]
    size = tiny_wheels["0.2"].stat().st_size
    proc = run_invoke(["cache.prune", "--json", "--max-size", str(size - 1)], env)
    doc = json_of(proc)
    assert [r["key"] for r in doc["removed"]] == [keys["new"]] and doc["freed_bytes"] == size
    assert store.keys() == []

    proc = run_invoke(["cache.prune"], env)
    assert proc.returncode == 1 and "--keep" in proc.stderr
    proc = run_invoke(["cache.list", "--json", "--store", "nope"], env)
    assert proc.returncode == 1 and "--store nope" in proc.stderr and "have: local" in proc.stderr


def test_cache_export_installs_offline_then_imports(
    tmp_path: Path, tiny_wheels: dict[str, Path]
) -> None:
    env = cli_env(tmp_path)
    store = LocalStore(tmp_path / "xdg" / "sm120kit" / "wheels")
    keys = fill_store(store, tiny_wheels)
    out = tmp_path / "offline"
    proc = run_invoke(["cache.export", str(out), "--json"], env)
    assert proc.returncode == 0, proc.stderr
    doc = json_of(proc)
    exported = {r["key"] for r in doc["exported"]}
    assert exported == {keys["old"], keys["new"]}  # one file per wheel name: the newest
    assert {r["key"] for r in doc["skipped"]} == {keys["a80"], keys["a90"]}

    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-index",
            "--find-links",
            str(out),
            "tinypkg==0.2",
        ],
        check=True,
    )
    got = subprocess.run(
        [str(python), "-c", "import tinypkg; print(tinypkg.VALUE)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert got.stdout.strip() == "v0.2"

    # Import on "another controller" (a fresh cache dir).
    env2 = cli_env(tmp_path / "other")
    proc = run_invoke(["cache.import", str(out), "--json"], env2)
    assert proc.returncode == 0, proc.stderr
    doc = json_of(proc)
    assert sorted(doc["imported"]) == sorted(exported) and doc["store"] == "local"
    other = LocalStore(tmp_path / "other" / "xdg" / "sm120kit" / "wheels")
    assert set(other.keys()) == exported
    assert json_of(run_invoke(["cache.import", str(out), "--json"], env2))["present"]


def test_cache_tasks_see_env_and_config_file_stores(
    tmp_path: Path, tiny_wheels: dict[str, Path], s3_endpoint: str
) -> None:
    """The controller dir from INVOKE_SM120KIT_CACHE_CONTROLLER, a shared S3 store from a
    config file (`invoke -f`), and --store picking one of them."""
    prefix = f"cli/{secrets.token_hex(4)}"
    from sm120kit.cache.s3 import S3Store

    keys = fill_store(S3Store(S3_BUCKET, prefix, endpoint_url=s3_endpoint), tiny_wheels)
    local = LocalStore(tmp_path / "ctl")
    local.put(keys["new"], tiny_wheels["0.2"], {"inputs": tiny_inputs(version="0.2").to_dict()})
    conf = tmp_path / "cache.yaml"
    conf.write_text(
        json.dumps(
            {
                "sm120kit": {
                    "cache": {
                        "stores": [
                            {
                                "name": "s3team",
                                "type": "s3",
                                "bucket": S3_BUCKET,
                                "prefix": prefix,
                                "endpoint_url": s3_endpoint,
                            }
                        ]
                    }
                }
            }
        )
    )
    env = invoke_env(None, tmp_path, INVOKE_SM120KIT_CACHE_CONTROLLER=str(tmp_path / "ctl"))
    doc = json_of(run_invoke(["-f", str(conf), "cache.list", "--json"], env))
    assert doc["stores"] == ["local", "s3team"]
    assert sorted((r["store"], r["full_key"]) for r in doc["entries"]) == sorted(
        [("local", keys["new"])] + [("s3team", k) for k in keys.values()]
    )
    doc = json_of(run_invoke(["-f", str(conf), "cache.list", "--json", "--store", "s3team"], env))
    assert {r["store"] for r in doc["entries"]} == {"s3team"} and len(doc["entries"]) == 4
    env["INVOKE_SM120KIT_CACHE_CONTROLLER"] = "false"
    doc = json_of(run_invoke(["-f", str(conf), "cache.list", "--json"], env))
    assert doc["stores"] == ["s3team"]


# ---- the real build op: `invoke build` of the sample kernel on four hosts ------------------


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_invoke_build_minikernel_on_three_hosts_builds_once(fleet: Any, tmp_path: Path) -> None:
    """`invoke build --package minikernel -H gpu1,gpu2,gpu3`: toolkit, env, source upload, one
    real nvcc build for sm_120 through build_wheel.py and the wheel cache, two installs from the
    cache. The .so carries sm_120 SASS (NVIDIA's cuobjdump). A second run changes nothing and
    builds nothing; `cache.key` computes the same key without building. The three inventory
    hosts are reached through the fleet's GPU-less sshd (gpu3), each with its own work_root (so
    its own env, host store and source copy); they cross-build for an R580 SM120 host with
    torch 2.13.0+cpu, as the example `local` host does. (It also carries what the single-host
    `test_build_op.py::test_invoke_build_minikernel_for_sm120` asserted: docs/testing.md.)
    """
    import zipfile

    import yaml

    from tests.support.sample_wheel import cuobjdump, nvcc_available

    tool = cuobjdump()
    if tool is None or not nvcc_available():
        pytest.skip("needs nvcc and nvidia-cuda-cuobjdump")
    ssh = fleet.host_vars(fleet.by_name("gpu3"))
    cross = {
        "target_driver": "580.95.05",
        "target_arch": "12.0",
        "recipe.torch.index": "pypi",
        "recipe.torch.version": "2.13.0",
        "recipe.torch.cuda": "cpu",
        "max_jobs": 1,
        # sshd sessions do not inherit this machine's pip settings; torch 2.13.0+cpu is here
        # (PyPI's own 2.13.0 is the CUDA build).
        "pip_args": ["--find-links", "/opt/wheels"],
    }
    names = ["gpu1", "gpu2", "gpu3"]
    doc = {
        "all": {
            "vars": fleet.common_vars(),
            "hosts": {n: {**ssh, "work_root": str(tmp_path / n / "work"), **cross} for n in names},
        }
    }
    inventory = tmp_path / "inventory" / "hosts.yaml"
    inventory.parent.mkdir(parents=True)
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    env = invoke_env(fleet, tmp_path, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    args = ["build", "--package", "minikernel", "-H", ",".join(names), "-i", str(inventory)]
    start = time.monotonic()
    proc = run_invoke([*args, "--json"], env, timeout=1700)
    first = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    hosts = json_of(proc)["hosts"]
    froms = {n: hosts[n]["packages"]["minikernel"]["wheel_from"] for n in names}
    assert sorted(froms.values()) == ["build", "cache:local", "cache:local"], froms
    keys = {hosts[n]["packages"]["minikernel"]["key"] for n in names}
    assert len(keys) == 1
    key = next(iter(keys))
    store = LocalStore(tmp_path / "xdg" / "sm120kit" / "wheels")
    assert store.keys() == [key]
    meta = store.get_meta(key)
    assert meta is not None and meta["builder_host"] in names
    assert meta["inputs"]["arch_list"] == ["12.0"] and meta["inputs"]["package"] == "minikernel"

    builder = next(n for n in names if froms[n] == "build")
    rec = hosts[builder]["packages"]["minikernel"]
    for name in names:
        assert hosts[name]["status"] == "changed", hosts[name]["steps"]
        assert hosts[name]["packages"]["minikernel"]["installed"] == "now"
    assert rec["source_digest"].startswith("tree:")
    assert rec["env"]["TORCH_CUDA_ARCH_LIST"] == "12.0"
    steps = {s["name"]: s["status"] for s in hosts[builder]["steps"]}
    for step in ("source:minikernel", "wheel:minikernel", "install:minikernel"):
        assert steps[step] == "changed", steps
    wheel = Path(rec["wheel"])
    assert wheel.is_file() and wheel.name.startswith("minikernel-0.1.0-cp311")
    assert "[2/2]" in Path(rec["log"]).read_text()
    # The extension's device code: SASS for sm_120, from real nvcc.
    with zipfile.ZipFile(wheel) as zf:
        so = next(n for n in zf.namelist() if n.startswith("minikernel/_C") and n.endswith(".so"))
        zf.extract(so, tmp_path / "unzipped")
    listing = subprocess.run(
        [str(tool), "--list-elf", str(tmp_path / "unzipped" / so)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "sm_120" in listing, listing
    # Installed into the recipe's env, with the record the next run checks.
    marker = Path(hosts[builder]["env"]["path"]) / ".sm120kit" / "installed" / "minikernel.json"
    assert json.loads(marker.read_text())["key"] == key

    # A second run changes nothing and builds nothing, on every host.
    start = time.monotonic()
    again = run_invoke([*args, "--json"], env, timeout=1200)
    second = time.monotonic() - start
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    for name, host in json_of(again)["hosts"].items():
        assert host["status"] == "ok" and host["changed"] == 0, (name, host["steps"])
        assert host["packages"]["minikernel"]["key"] == key
        assert host["packages"]["minikernel"]["installed"] == "already"
    assert store.keys() == [key]
    # cache.key computes the same key without building anything.
    proc = run_invoke(
        ["cache.key", "--package", "minikernel", "-H", builder, "-i", str(inventory), "--json"],
        env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    computed = json_of(proc)["hosts"][builder]
    assert computed["key"] == key and computed["predicted"] is False
    rows = dict(map(tuple, computed["inputs"]))
    assert rows["arch list"] == "12.0" and rows["source"] == rec["source_digest"]
    assert rows["env TORCH_CUDA_ARCH_LIST"] == "12.0" and "MAX_JOBS" in rows["env ignored"]
    # cache.list sees it, through the same settings.
    listing = json_of(run_invoke(["cache.list", "--json"], env))
    assert [r["package"] for r in listing["entries"]] == ["minikernel"]
    print(
        f"\nminikernel through `invoke build` on three hosts: first run {first:.1f}s "
        f"(build {rec['seconds']:.1f}s), second run {second:.1f}s"
    )


@pytest.mark.parametrize("flag", ["--keep", "--older-than"])
def test_prune_zero_is_a_value_not_unset(
    tmp_path: Path, tiny_wheels: dict[str, Path], flag: str
) -> None:
    """`cache.prune --keep 0` removes every entry of each package and `--older-than 0` every
    entry older than now (issue #45: both were refused as 'give --older-than ...'); a negative
    or non-numeric value is one line naming the flag. A real local store."""
    env = cli_env(tmp_path)
    store = LocalStore(tmp_path / "xdg" / "sm120kit" / "wheels")
    keys = fill_store(store, tiny_wheels)
    proc = run_invoke(["cache.prune", "--json", flag, "0"], env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(r["key"] for r in json_of(proc)["removed"]) == sorted(keys.values())
    assert store.keys() == []
    for bad in ("-1", "abc", "nan"):
        proc = run_invoke(["cache.prune", flag, bad], env)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert flag in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
