"""Wheel stores: one contract run against every store kind, plus local-only integrity tests.

StoreContract is run here for LocalStore and for SFTPStore (against a real OpenSSH sshd of the
shared fleet and OpenSSH's real sftp-server), and in test_cache_s3.py against a moto S3 server.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
import venv
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import paramiko
import pytest

from sm120kit.cache import manage
from sm120kit.cache.key import KeyInputs, compute_key, file_sha256
from sm120kit.cache.registry import make_store
from sm120kit.cache.s3 import S3Store
from sm120kit.cache.sftp import SFTPStore, paramiko_connect
from sm120kit.cache.store import (
    CacheError,
    CorruptEntry,
    EntryMissing,
    LocalStore,
    LockOwner,
    Store,
    default_local_root,
    entry_dir,
)
from tests.support.killed_child import kill_at_ready

REPO = Path(__file__).resolve().parents[2]


def entry_inputs(package: str = "demo", version: str = "1.0", arch: str = "12.0") -> KeyInputs:
    return KeyInputs(
        package=package,
        version=version,
        source_digest="sha256:" + "1" * 64,
        arch_list=(arch,),
        cuda_version="13.0",
        torch_version="2.13.0+cu130",
        python_abi="cp311",
        platform="linux_x86_64",
        cc_version="gcc 13.3.0",
    )


def new_entry(package: str = "demo", version: str = "1.0", arch: str = "12.0") -> tuple[str, dict]:
    """A real key and the caller part of its meta."""
    inputs = entry_inputs(package, version, arch)
    meta = {
        "inputs": inputs.to_dict(),
        "build_seconds": 12.5,
        "builder_host": "gpu1",
        "log_path": "/runs/r1/gpu1/build.log",
    }
    return compute_key(inputs), meta


def make_wheel(tmp: Path, name: str = "demo-1.0-py3-none-any.whl", body: bytes = b"") -> Path:
    """A file with a wheel's name; the stores never look inside it."""
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / name
    path.write_bytes(body or (name.encode() * 2000))
    return path


class StoreContract:
    """Behaviour every Store must have. Subclasses provide a fresh ``store`` fixture."""

    def test_put_then_fetch_roundtrip(self, store: Store, tmp_path: Path) -> None:
        key, meta = new_entry()
        wheel = make_wheel(tmp_path / "src")
        written = store.put(key, wheel, meta)
        assert written["sha256"] == file_sha256(wheel)
        assert written["size"] == wheel.stat().st_size
        assert written["filename"] == wheel.name
        assert written["builder_host"] == "gpu1" and written["build_seconds"] == 12.5

        got = store.get_meta(key)
        assert got is not None and got["key"] == key and got["inputs"]["package"] == "demo"
        assert store.keys() == [key]
        out = store.fetch(key, tmp_path / "out")
        assert out == tmp_path / "out" / wheel.name
        assert out.read_bytes() == wheel.read_bytes()
        assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]

        names = {b.path for b in store.list_blobs(entry_dir(key))}
        assert f"{key[:2]}/{key}/{wheel.name}" in names
        assert f"{key[:2]}/{key}/meta.json" in names

    def test_missing_entry(self, store: Store, tmp_path: Path) -> None:
        key, _ = new_entry()
        assert store.get_meta(key) is None
        with pytest.raises(EntryMissing, match=key[:12]):
            store.fetch(key, tmp_path)

    def test_bad_key_rejected(self, store: Store, tmp_path: Path) -> None:
        with pytest.raises(CacheError, match="cache key"):
            store.put("../etc", make_wheel(tmp_path), {})

    def test_corrupt_wheel_is_quarantined_on_fetch(self, store: Store, tmp_path: Path) -> None:
        key, meta = new_entry()
        wheel = make_wheel(tmp_path / "src")
        store.put(key, wheel, meta)
        # Bit rot / tampering: same name, different bytes.
        store.write_blob(f"{entry_dir(key)}/{wheel.name}", b"garbage")
        with pytest.raises(CorruptEntry) as err:
            store.fetch(key, tmp_path / "out")
        assert "sha256" in err.value.reason
        assert not (tmp_path / "out" / wheel.name).exists()
        assert list((tmp_path / "out").iterdir()) == []
        assert store.get_meta(key) is None and store.keys() == []
        [record] = store.quarantined()
        assert record["key"] == key and "sha256" in record["reason"]
        moved = {b.path.rsplit("/", 1)[-1] for b in store.list_blobs(record["dir"])}
        assert {wheel.name, "meta.json", "reason.json"} <= moved
        # A rebuild can put the key again.
        store.put(key, wheel, meta)
        assert store.fetch(key, tmp_path / "out").read_bytes() == wheel.read_bytes()

    def test_missing_wheel_is_corrupt(self, store: Store, tmp_path: Path) -> None:
        key, meta = new_entry()
        wheel = make_wheel(tmp_path / "src")
        store.put(key, wheel, meta)
        store.delete_blob(f"{entry_dir(key)}/{wheel.name}")
        with pytest.raises(CorruptEntry, match="missing"):
            store.fetch(key, tmp_path / "out")
        assert store.get_meta(key) is None

    def test_unreadable_meta_is_corrupt(self, store: Store, tmp_path: Path) -> None:
        key, meta = new_entry()
        store.put(key, make_wheel(tmp_path / "src"), meta)
        store.write_blob(f"{entry_dir(key)}/meta.json", b"{not json")
        with pytest.raises(CorruptEntry, match="meta.json"):
            store.get_meta(key)
        assert store.get_meta(key) is None
        assert store.list() == []

    def test_wheel_without_meta_is_absent(self, store: Store, tmp_path: Path) -> None:
        """A put killed after the wheel but before meta.json (simulated by writing only that)."""
        key, _ = new_entry()
        store.upload_blob(f"{entry_dir(key)}/demo-1.0-py3-none-any.whl", make_wheel(tmp_path))
        store.write_blob(f"{entry_dir(key)}/.tmp-meta.json-0123", b'{"partial": ')
        assert store.get_meta(key) is None
        assert store.keys() == [] and store.list() == []
        with pytest.raises(EntryMissing):
            store.fetch(key, tmp_path / "out")
        assert key in store.incomplete()
        assert manage.prune(store, incomplete_older_than=0, now=time.time() + 60) == [
            {"key": key, "incomplete": True}
        ]
        assert store.list_blobs(entry_dir(key)) == []

    def test_put_replaces_previous_entry(self, store: Store, tmp_path: Path) -> None:
        key, meta = new_entry()
        store.put(key, make_wheel(tmp_path / "a", "demo-1.0-py3-none-any.whl", b"one"), meta)
        second = make_wheel(tmp_path / "b", "demo-1.0-cp311-cp311-linux_x86_64.whl", b"two")
        store.put(key, second, meta)
        wheels = [b.path for b in store.list_blobs(entry_dir(key)) if b.path.endswith(".whl")]
        assert wheels == [f"{entry_dir(key)}/{second.name}"]
        assert store.fetch(key, tmp_path / "out").read_bytes() == b"two"

    def test_delete(self, store: Store, tmp_path: Path) -> None:
        key, meta = new_entry()
        other, other_meta = new_entry("other")
        store.put(key, make_wheel(tmp_path), meta)
        store.put(other, make_wheel(tmp_path, "other-1.0-py3-none-any.whl"), other_meta)
        store.fetch(key, tmp_path / "out")  # leaves a hits.json to delete too
        store.delete(key)
        assert store.keys() == [other]
        assert store.list_blobs(entry_dir(key)) == []

    def test_hits_are_counted(self, store: Store, tmp_path: Path) -> None:
        key, meta = new_entry()
        store.put(key, make_wheel(tmp_path), meta)
        store.fetch(key, tmp_path / "o1")
        store.fetch(key, tmp_path / "o2")
        store.fetch(key, tmp_path / "o3", count_hit=False)
        [row] = store.list()
        assert row["hits"] == 2 and row["last_used"] is not None

    def test_lock_exclusive_holder_release(self, store: Store) -> None:
        key, _ = new_entry()
        alice = LockOwner(host="ctl-a", pid=11, user="alice", run_id="run-a")
        bob = LockOwner(host="ctl-b", pid=22, user="bob", run_id="run-b")
        assert store.holder(key) is None
        assert store.acquire(key, alice)
        assert not store.acquire(key, bob)
        assert store.acquire(key, alice)  # re-entrant for the same owner
        held = store.holder(key)
        assert held is not None
        assert (held["host"], held["pid"], held["user"], held["run_id"]) == (
            "ctl-a",
            11,
            "alice",
            "run-a",
        )
        assert abs(held["time"] - time.time()) < 3600 and "token" not in held
        assert not store.release(key, bob)
        assert store.holder(key) is not None
        assert store.release(key, alice)
        assert store.holder(key) is None
        assert store.acquire(key, bob)
        assert store.release(key, bob)

    def test_stale_lock_is_taken_over(self, store: Store) -> None:
        key, _ = new_entry()
        dead = LockOwner(host="ctl-a", pid=11, user="alice")
        live = LockOwner(host="ctl-b", pid=22, user="bob")
        assert store.acquire(key, dead)
        assert not store.acquire(key, live, stale_after=3600)
        assert store.acquire(key, live, stale_after=0)
        held = store.holder(key)
        assert held is not None and held["host"] == "ctl-b"
        assert not store.release(key, dead)
        assert not store.refresh(key, dead)
        assert store.refresh(key, live)
        assert store.release(key, live)
        # Nothing left behind in locks/ (no '.break-' or temp files).
        assert [b.path for b in store.list_blobs("locks")] == []

    def test_dead_claim_does_not_block_takeover(self, store: Store) -> None:
        """A breaker killed mid-takeover (simulated: its claim file left behind, 1 h old)."""
        if type(store).replace_blob_if is not Store.replace_blob_if:
            pytest.skip(f"{type(store).__name__} takes over with its own compare-and-swap")
        key, _ = new_entry()
        assert store.acquire(key, LockOwner(host="ctl-a", pid=11, user="alice"))
        raw = store.read_blob(f"locks/{key}.lock")
        assert raw is not None
        claim = f"locks/{key}.lock.claim-{hashlib.sha256(raw).hexdigest()[:16]}"
        store.write_blob(claim, json.dumps({"time": time.time() - 3600}).encode())
        live = LockOwner(host="ctl-b", pid=22, user="bob")
        assert store.acquire(key, live, stale_after=0)
        assert [b.path for b in store.list_blobs("locks")] == [f"locks/{key}.lock"]

    def test_verify_and_list_entries(self, store: Store, tmp_path: Path) -> None:
        good, good_meta = new_entry("good", "2.0", "12.0a")
        bad, bad_meta = new_entry("bad")
        store.put(good, make_wheel(tmp_path, "good-2.0-py3-none-any.whl"), good_meta)
        store.put(bad, make_wheel(tmp_path, "bad-1.0-py3-none-any.whl"), bad_meta)
        rows = manage.list_entries([store], now=time.time() + 100)
        assert [(r["package"], r["version"], r["key"]) for r in rows] == [
            ("bad", "1.0", bad[:12]),
            ("good", "2.0", good[:12]),
        ]
        assert rows[1]["arch"] == "12.0a" and rows[1]["cuda"] == "13.0"
        assert rows[1]["torch"] == "2.13.0+cu130" and rows[1]["store"] == store.name
        assert rows[1]["size"] > 0 and rows[1]["age"] >= 99 and rows[1]["hits"] == 0

        store.write_blob(f"{entry_dir(bad)}/bad-1.0-py3-none-any.whl", b"flipped")
        result = {r["key"]: r["status"] for r in manage.verify([store])}
        assert result == {good: "ok", bad: "corrupt"}
        assert store.keys() == [good]
        assert [q["key"] for q in store.quarantined()] == [bad]

    def test_prune(self, store: Store, tmp_path: Path) -> None:
        now = time.time()
        made = {}
        for i, (package, age_days) in enumerate(
            [("a", 30), ("a", 20), ("a", 1), ("b", 40), ("b", 2)]
        ):
            key, meta = new_entry(package, f"1.{i}")
            meta["created"] = now - age_days * 86400
            store.put(key, make_wheel(tmp_path, f"{package}-1.{i}-py3-none-any.whl"), meta)
            made[(package, age_days)] = key

        gone = manage.prune(store, older_than=25 * 86400, dry_run=True, now=now)
        assert {m["key"] for m in gone} == {made[("a", 30)], made[("b", 40)]}
        assert len(store.keys()) == 5  # dry run

        gone = manage.prune(store, keep=1, now=now)
        assert {m["key"] for m in gone} == {made[("a", 30)], made[("a", 20)], made[("b", 40)]}
        assert set(store.keys()) == {made[("a", 1)], made[("b", 2)]}

        sizes = {m["key"]: m["size"] for m in store.list()}
        gone = manage.prune(store, max_total_bytes=sizes[made[("a", 1)]], now=now)
        assert [m["key"] for m in gone] == [made[("b", 2)]]  # the least recently used
        assert store.keys() == [made[("a", 1)]]


class TestLocalStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> LocalStore:
        return LocalStore(tmp_path / "store")

    def test_a_released_file_is_hard_linked_not_copied(self, store: Store, tmp_path: Path) -> None:
        """``link=True`` (a host's own copy of a released file, on this disk): the store's
        wheel is the same inode, so a 4 GB lock is not written twice; without it, a copy."""
        key, meta = new_entry()
        wheel = make_wheel(tmp_path / "src")
        digest = (file_sha256(wheel), wheel.stat().st_size)
        written = store.put(key, wheel, meta, link=True, digest=digest)
        assert written["sha256"] == digest[0]
        stored = store.root / entry_dir(key) / wheel.name  # type: ignore[attr-defined]
        assert stored.stat().st_ino == wheel.stat().st_ino
        assert store.fetch(key, tmp_path / "out").read_bytes() == wheel.read_bytes()
        other, _ = new_entry("other")
        store.put(other, wheel, meta)
        copied = store.root / entry_dir(other) / wheel.name  # type: ignore[attr-defined]
        assert copied.stat().st_ino != wheel.stat().st_ino


@pytest.mark.parametrize(
    "size",
    [0, 1, 4095, 4096, 4097, 8 << 20, (8 << 20) + 1, 2 * (8 << 20), 3 * (8 << 20) - 7],
)
def test_uncached_copy_is_byte_exact_at_every_block_edge(tmp_path: Path, size: int) -> None:
    """A store's copy (O_DIRECT, whole aligned blocks, the last one padded and cut back): the
    same bytes and size as its source at each edge of the alignment and of the copy's block,
    and no temporary left beside it."""
    src = tmp_path / "src.whl"
    src.write_bytes(os.urandom(size))
    store = LocalStore(tmp_path / "store")
    store.upload_blob("ab/entry/src.whl", src)
    stored = tmp_path / "store" / "ab" / "entry" / "src.whl"
    assert stored.read_bytes() == src.read_bytes()
    assert os.listdir(stored.parent) == ["src.whl"]


def test_uncached_copy_refused_falls_back_and_fails_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filesystem that takes O_DIRECT's open but refuses its writes (EINVAL) gets the copy
    through the page cache instead; a source that breaks mid-copy leaves no temporary."""
    import sm120kit.cache.filecopy as copy_mod

    src = tmp_path / "src.whl"
    src.write_bytes(os.urandom((8 << 20) + 100))
    real_write = os.write

    def refuse(fd: int, data: Any) -> int:
        if os.fstat(fd).st_size == 0 and len(data) >= 4096:
            raise OSError(22, "Invalid argument")
        return real_write(fd, data)

    monkeypatch.setattr(copy_mod.os, "write", refuse)
    store = LocalStore(tmp_path / "store")
    store.upload_blob("ab/entry/src.whl", src)
    stored = tmp_path / "store" / "ab" / "entry" / "src.whl"
    assert stored.read_bytes() == src.read_bytes()
    assert os.listdir(stored.parent) == ["src.whl"]
    monkeypatch.setattr(copy_mod.os, "write", real_write)

    def broken(*_a: Any, **_k: Any) -> Any:
        raise OSError(5, "Input/output error")

    tmp = tmp_path / "store" / "ab" / ".tmp-other"
    monkeypatch.setattr(copy_mod.mmap, "mmap", broken)
    with pytest.raises(OSError, match="Input/output"):
        copy_mod.copy_past_cache(src, tmp)
    assert not tmp.exists()


# ---- SFTP: a real sshd of the shared fleet -------------------------------------------------


def _sftp_client(fleet: Any) -> paramiko.SFTPClient:
    """An SFTPClient to fleet host gpu1 over a real SSH connection.

    Uses the sftp subsystem when the fleet's sshd defines one, else runs OpenSSH's own
    sftp-server over an exec channel (exactly what the subsystem would start).
    """
    host = fleet.by_name("gpu1")
    ssh = paramiko.SSHClient()
    ssh.load_host_keys(str(fleet.known_hosts))
    ssh.set_missing_host_key_policy(paramiko.RejectPolicy())
    ssh.connect(
        host.address,
        port=fleet.port,
        username=fleet.user,
        key_filename=str(fleet.client_key),
        look_for_keys=False,
        allow_agent=False,
    )
    try:
        return ssh.open_sftp()
    except paramiko.SSHException:
        channel = ssh.get_transport().open_session()  # type: ignore[union-attr]
        channel.exec_command("exec /usr/lib/openssh/sftp-server")
        return paramiko.SFTPClient(channel)


class TestSFTPStore(StoreContract):
    @pytest.fixture(scope="class")
    def sftp(self, fleet: Any) -> Iterator[paramiko.SFTPClient]:
        client = _sftp_client(fleet)
        yield client
        client.get_channel().get_transport().close()

    @pytest.fixture
    def store(self, sftp: paramiko.SFTPClient, fleet: Any, request: Any) -> SFTPStore:
        root = fleet.by_name("gpu1").work_root / "cache-tests" / request.node.name
        return SFTPStore(lambda: sftp, str(root), name="sftp:gpu1")

    def test_make_store_with_a_connection_callable(self, fleet: Any, sftp: Any) -> None:
        seen = []

        def connect(spec: Mapping[str, Any]) -> Any:
            seen.append(spec["host"])
            return sftp

        root = str(fleet.by_name("gpu1").work_root / "cache-spec")
        store = make_store({"type": "sftp", "host": "gpu1", "path": root}, sftp_connect=connect)
        assert isinstance(store, SFTPStore) and seen == []  # connects on first use only
        assert store.keys() == [] and seen == ["gpu1"]

    def test_make_store_with_paramiko(self, fleet: Any, tmp_path: Path) -> None:
        host = fleet.by_name("gpu1")
        spec = {
            "type": "sftp",
            "host": host.address,
            "port": fleet.port,
            "user": fleet.user,
            "key_filename": str(fleet.client_key),
            "known_hosts": str(fleet.known_hosts),
            "path": str(host.work_root / "cache-paramiko"),
        }
        store = make_store(spec)
        try:
            key, meta = new_entry()
            store.put(key, make_wheel(tmp_path), meta)
            assert store.keys() == [key]
        except CacheError as exc:
            # The fleet's sshd may lack an sftp subsystem; the error must say so in one line.
            assert "\n" not in str(exc)
            pytest.skip(f"fleet sshd has no sftp subsystem: {exc}")
        finally:
            store.close()

    def test_unknown_host_key_is_refused(self, fleet: Any) -> None:
        host = fleet.by_name("gpu1")
        spec = {"type": "sftp", "host": host.address, "port": fleet.port, "path": "/tmp/x"}
        spec.update(user=fleet.user, key_filename=str(fleet.client_key))
        with pytest.raises(CacheError, match="is not in .*known_hosts"):
            make_store(spec).keys()


# ---- local-only integrity: real kills and real races ---------------------------------------

KILL_CHILD = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from sm120kit.cache.store import LocalStore

    root, key, wheel, stop_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    calls = [0]
    real_fsync = os.fsync

    def fsync(fd):
        # Park right before a temp file would be renamed into place, so the parent can kill.
        calls[0] += 1
        if calls[0] == stop_at:
            print("READY", flush=True)
            time.sleep(600)
        real_fsync(fd)

    os.fsync = fsync
    LocalStore(root).put(key, Path(wheel), {"inputs": {"package": "demo"}})
    print("DONE", flush=True)
    """
)


@pytest.mark.parametrize("stage", [1, 2], ids=["during-wheel", "during-meta"])
def test_killed_put_leaves_no_entry(tmp_path: Path, stage: int) -> None:
    """SIGKILL a real process in the middle of LocalStore.put, then check the store."""
    root = tmp_path / "store"
    key, meta = new_entry()
    wheel = make_wheel(tmp_path / "src", body=os.urandom(3 << 20))
    kill_at_ready(KILL_CHILD, str(root), key, str(wheel), str(stage))

    entry = root / entry_dir(key)
    names = sorted(p.name for p in entry.iterdir())
    assert "meta.json" not in names
    assert any(n.startswith(".tmp-") for n in names)
    assert (wheel.name in names) == (stage == 2)

    store = LocalStore(root)
    assert store.get_meta(key) is None and store.keys() == [] and store.list() == []
    with pytest.raises(EntryMissing):
        store.fetch(key, tmp_path / "out")
    assert key in store.incomplete()
    # The next build's put simply succeeds.
    store.put(key, wheel, meta)
    assert store.fetch(key, tmp_path / "out").read_bytes() == wheel.read_bytes()


def _race_acquire(root: str, key: str, run_id: str, stale_after: float, barrier: Any) -> bool:
    store = LocalStore(root)
    owner = LockOwner.current(run_id=run_id)
    barrier.wait()
    return store.acquire(key, owner, stale_after=stale_after)


@pytest.mark.parametrize("stale_first", [False, True], ids=["free", "stale"])
def test_racing_processes_exactly_one_wins(tmp_path: Path, stale_first: bool) -> None:
    """Real processes race for one lock (free, or held by a dead owner): one wins."""
    root = tmp_path / "store"
    key, _ = new_entry()
    if stale_first:
        old = LockOwner(host="dead-ctl", pid=1, user="x")
        assert LocalStore(root).acquire(key, old)
        lock = root / "locks" / f"{key}.lock"
        record = json.loads(lock.read_bytes())
        record["time"] = time.time() - 10 * 3600
        lock.write_text(json.dumps(record))
    n = 4
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Manager().Barrier(n)
    with ctx.Pool(n) as pool:
        results = pool.starmap(
            _race_acquire, [(str(root), key, f"run-{i}", 3600.0, barrier) for i in range(n)]
        )
    assert sorted(results) == [False] * (n - 1) + [True]
    winner = results.index(True)
    held = LocalStore(root).holder(key)
    assert held is not None and held["run_id"] == f"run-{winner}"
    assert sorted(p.name for p in (root / "locks").iterdir()) == [f"{key}.lock"]


def test_default_root_honours_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_local_root() == tmp_path / "xdg" / "sm120kit" / "wheels"
    assert LocalStore().root == tmp_path / "xdg" / "sm120kit" / "wheels"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_local_root() == tmp_path / "home" / ".cache" / "sm120kit" / "wheels"


def test_make_store_specs(tmp_path: Path) -> None:
    local = make_store({"type": "local", "path": str(tmp_path / "w")})
    assert isinstance(local, LocalStore) and local.root == tmp_path / "w"
    s3 = make_store(
        {"type": "s3", "bucket": "wheels", "prefix": "sm120/", "endpoint_url": "http://x:9000"}
    )
    assert isinstance(s3, S3Store) and s3.prefix == "sm120" and s3.addressing_style == "path"
    sftp = make_store({"type": "sftp", "host": "cachebox", "path": "~/wheels"})
    assert isinstance(sftp, SFTPStore) and sftp.root == "wheels"
    with pytest.raises(CacheError, match="type 'ftp'"):
        make_store({"type": "ftp"})
    with pytest.raises(CacheError, match="missing 'bucket'"):
        make_store({"type": "s3"})
    with pytest.raises(CacheError, match="not the store spec") as err:
        make_store({"type": "s3", "bucket": "b", "aws_secret_access_key": "hunter2"})
    assert "hunter2" not in str(err.value)


def test_a_backend_registers_its_store_type(tmp_path: Path) -> None:
    """The registry knows a type only from its backend's registration: a new backend needs no
    change in the base or the registry (and the base imports no backend)."""
    from sm120kit.cache import registry

    assert registry.known_types()[:3] == ["local", "sftp", "s3"]
    assert registry.store_type("s3") is not None  # loaded by name on first use

    @registry.register_store_type("flat", allowed={"path"}, required=("path",))
    def flat(spec: Any, sftp_connect: Any) -> Store:
        return LocalStore(spec["path"], name=spec.get("name") or "flat")

    try:
        store = make_store({"type": "flat", "path": str(tmp_path / "f")})
        assert isinstance(store, LocalStore) and store.name == "flat"
        assert "flat" in registry.known_types()
        with pytest.raises(CacheError, match=r"\(flat\): missing 'path'"):
            make_store({"type": "flat"})
        with pytest.raises(CacheError, match=r"\(flat\): unknown key 'bucket'"):
            make_store({"type": "flat", "path": "x", "bucket": "b"})
    finally:
        registry._TYPES.pop("flat")


# ---- export / import with real pip ---------------------------------------------------------


@pytest.fixture(scope="session")
def tiny_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real pure-Python wheel built by `pip wheel` from a minimal setuptools project."""
    root = tmp_path_factory.mktemp("tinypkg")
    (root / "tinypkg").mkdir()
    (root / "tinypkg" / "__init__.py").write_text("VALUE = 'from the cache'\n")
    (root / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [build-system]
            requires = ["setuptools"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "tinypkg"
            version = "0.1"
            """
        )
    )
    out = root / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
        + ["--no-index", "-q", "-w", str(out), str(root)],
        check=True,
    )
    [wheel] = out.glob("tinypkg-0.1-*.whl")
    return wheel


def test_export_installs_offline_with_pip_then_imports(tmp_path: Path, tiny_wheel: Path) -> None:
    store = LocalStore(tmp_path / "store")
    key, meta = new_entry("tinypkg", "0.1")
    store.put(key, tiny_wheel, meta)
    # A second build of the same file name (another arch list), older: skipped in the export.
    older, older_meta = new_entry("tinypkg", "0.1", "8.0")
    older_meta["created"] = time.time() - 3600
    store.put(older, tiny_wheel, older_meta)

    export = tmp_path / "export"
    result = manage.export_dir([store], export)
    assert [r["key"] for r in result["exported"]] == [key]
    assert [r["key"] for r in result["skipped"]] == [older]
    assert sorted(p.name for p in export.iterdir()) == sorted([tiny_wheel.name, "index.json"])

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
        + ["--no-index", "--find-links", str(export), "tinypkg"],
        check=True,
    )
    got = subprocess.run(
        [str(python), "-c", "import tinypkg; print(tinypkg.VALUE)"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert got.stdout.strip() == "from the cache"

    target = LocalStore(tmp_path / "target")
    imported = manage.import_dir(export, target)
    assert imported == {"imported": [key], "present": [], "corrupt": []}
    assert target.get_meta(key)["created"] == store.get_meta(key)["created"]  # type: ignore[index]
    assert target.fetch(key, tmp_path / "o").read_bytes() == tiny_wheel.read_bytes()
    assert manage.import_dir(export, target)["present"] == [key]

    (export / tiny_wheel.name).write_bytes(b"tampered")
    assert manage.import_dir(export, LocalStore(tmp_path / "t2"))["corrupt"] == [tiny_wheel.name]
    (export / "index.json").unlink()
    with pytest.raises(CacheError, match="index.json"):
        manage.import_dir(export, target)


@pytest.mark.parametrize("swap", ["bytes and meta.json", "put under the key"])
def test_a_released_files_entry_must_hold_the_sha256_of_its_key(tmp_path: Path, swap: str) -> None:
    """A released file's entry (key: the lock's sha256) whose bytes are another valid wheel,
    with meta.json edited to match (or put so by a hostile writer): never served, and verify
    reports it corrupt and quarantines it. Real store dir, real wheels (tests/support)."""
    from sm120kit.ops.stack_files import release_inputs
    from sm120kit.stack.lock import LockEntry
    from tests.support.tiny_index import make_wheel as real_wheel
    from tests.support.tiny_index import sha256_of

    good = real_wheel(tmp_path / "a", "demo-lib", "2.0")
    other = real_wheel(tmp_path / "b", "demo-lib", "2.0", requires=("demo-extra",))
    assert sha256_of(good) != sha256_of(other)
    entry = LockEntry("demo-lib", "2.0", good.name, "https://x/" + good.name, sha256_of(good),
                      "release", False)  # fmt: skip
    inputs = release_inputs(entry)
    key = compute_key(inputs)
    store = LocalStore(tmp_path / "store")
    meta = {"inputs": inputs.to_dict()}
    if swap == "put under the key":
        store.put(key, other, meta)
    else:
        store.put(key, good, meta)
        assert store.get_meta(key) is not None
        folder = tmp_path / "store" / entry_dir(key)
        (folder / good.name).write_bytes(other.read_bytes())
        doc = json.loads((folder / "meta.json").read_text())
        doc.update(sha256=sha256_of(other), size=other.stat().st_size)
        (folder / "meta.json").write_text(json.dumps(doc))
    rows = manage.verify([store])
    assert [(r["key"], r["status"]) for r in rows] == [(key, "corrupt")]
    assert "is not its key's" in rows[0]["reason"], rows[0]
    assert store.keys() == [] and [q["key"] for q in store.quarantined()] == [key]
    assert store.get_meta(key) is None


def _store_connect(fleet: Any, known: Path) -> str:
    """What `paramiko_connect` makes of fleet host gpu1 with `known` as the store's
    known_hosts: "sftp" (connected), "no-sftp" (the key was accepted; this sshd has no sftp
    subsystem), or the CacheError's line."""
    host = fleet.by_name("gpu1")
    spec = {"host": host.address, "port": fleet.port, "user": fleet.user,
            "key_filename": str(fleet.client_key), "known_hosts": str(known)}  # fmt: skip
    try:
        client = paramiko_connect(spec)
    except CacheError as exc:
        return "no-sftp" if "refused the sftp subsystem" in str(exc) else str(exc)
    client.close()
    return "sftp"


def test_an_sftp_stores_host_key_is_judged_as_openssh_reads_known_hosts(
    fleet: Any, tmp_path: Path
) -> None:
    """A real sshd (fleet host gpu1) and real known_hosts files with markers: an
    `@cert-authority` line and another host's `@revoked` line beside the right key accept (no
    "Incorrect padding" from paramiko's reader); the host's own key `@revoked`, or only a
    wrong key listed, is refused in one line naming the file and line; an unknown key too."""
    host = fleet.by_name("gpu1")
    name = f"[{host.address}]:{fleet.port}"
    right = " ".join(host.host_pub.read_text().split()[:2])
    wrong = " ".join(fleet.by_name("gpu2").host_pub.read_text().split()[:2])
    known = tmp_path / "known_hosts"
    cases = [
        ([f"@cert-authority *.example {wrong}", f"@revoked other.example {right}",
          f"{name} {right}"], None),
        ([f"{name} {wrong}", f"{name} {right}"], None),
        ([f"{name} {right}", f"@revoked * {right}"], "REVOKED"),
        ([f"@cert-authority * {wrong}", f"{name} {wrong}"], "CHANGED"),
        ([f"@cert-authority * {right}"], "is not in"),
    ]  # fmt: skip
    for lines, refused in cases:
        known.write_text("".join(line + "\n" for line in lines))
        got = _store_connect(fleet, known)
        if refused is None:
            assert got in ("sftp", "no-sftp"), (lines, got)
        else:
            assert refused in got and str(known) in got and "padding" not in got, (lines, got)
            assert got.startswith(f"cache sftp:{host.address}: ") and "\n" not in got
