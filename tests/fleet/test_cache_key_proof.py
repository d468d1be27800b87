"""A cache entry must prove its key: its meta.json names the key it was found under, and its
recorded inputs hash to that key. An entry copied under another key's directory (its wheel
and sha256 whole) is corrupt: quarantined with an event, never installed for that key, and
reported by `cache.verify`.

Real parts: real stores on disk, real wheels built with pip, the fleet's sshd hosts for the
lookup through the wheel cache, the real `invoke cache.verify`.
"""

from __future__ import annotations

import json
import secrets
import shutil
from pathlib import Path
from typing import Any

import pytest

from sm120kit.cache.key import compute_key
from sm120kit.cache.store import CorruptEntry, LocalStore, entry_dir
from tests.conftest import json_of, run_invoke
from tests.support.wheel_cache_runs import (
    Builds,
    all_ok,
    cli_env,
    config,
    fill_store,
    hosts_of,
    obtain_run,
    tiny_inputs,
    wheel_from,
)


def copy_entry(root: Path, src_key: str, dst_key: str) -> None:
    """What a person (or a bad sync) might do: one entry's directory copied under another key."""
    dst = root / entry_dir(dst_key)
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(root / entry_dir(src_key), dst)


def test_entry_under_another_key_is_corrupt(tmp_path: Path, tiny_wheels: dict[str, Path]) -> None:
    store = LocalStore(tmp_path / "store")
    keys = fill_store(store, tiny_wheels)
    intruder = compute_key(tiny_inputs(version="9.9"))
    copy_entry(store.root, keys["new"], intruder)
    with pytest.raises(CorruptEntry, match=r"meta.json names key .* found under"):
        store.get_meta(intruder)
    assert intruder not in store.keys()
    [record] = store.quarantined()
    assert record["key"] == intruder and "names key" in record["reason"]
    assert store.get_meta(keys["new"]) is not None  # the original is untouched


def test_entry_whose_inputs_do_not_hash_to_its_key_is_corrupt(
    tmp_path: Path,
    tiny_wheels: dict[str, Path],
) -> None:
    store = LocalStore(tmp_path / "store")
    keys = fill_store(store, tiny_wheels)
    # Moved and its meta.json's key rewritten to match: the inputs still give it away.
    intruder = compute_key(tiny_inputs(version="9.9"))
    copy_entry(store.root, keys["new"], intruder)
    meta_path = store.root / entry_dir(intruder) / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["key"] = intruder
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(CorruptEntry, match=r"inputs hash to"):
        store.get_meta(intruder)
    # No inputs at all: nothing proves the key.
    copy_entry(store.root, keys["old"], intruder)
    meta = json.loads(meta_path.read_text())
    meta["key"] = intruder
    del meta["inputs"]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(CorruptEntry, match=r"no inputs"):
        store.get_meta(intruder)


def test_cache_verify_reports_and_quarantines_unproven_entries(
    tmp_path: Path,
    tiny_wheels: dict[str, Path],
) -> None:
    env = cli_env(tmp_path)
    store = LocalStore(tmp_path / "xdg" / "sm120kit" / "wheels")
    keys = fill_store(store, tiny_wheels)
    # a80's directory now holds a copy of "new" (whole wheel, matching sha256).
    copy_entry(store.root, keys["new"], keys["a80"])
    proc = run_invoke(["cache.verify", "--json"], env)
    assert proc.returncode == 2, proc.stderr
    doc = json_of(proc)
    assert doc["ok"] == 3 and doc["corrupt"] == 1, doc
    [bad] = [r for r in doc["entries"] if r["status"] == "corrupt"]
    assert bad["key"] == keys["a80"] and "names key" in bad["reason"]
    assert keys["a80"] not in store.keys()
    assert [q["key"] for q in store.quarantined()] == [keys["a80"]]
    assert run_invoke(["cache.verify", "--json"], env).returncode == 0


def test_lookup_never_serves_an_entry_under_another_key(fleet: Any, tmp_path: Path) -> None:
    """The wheel of one key copied under another in the controller store: the host asking
    for the other key gets an event, the entry is quarantined, and the wheel is built."""
    ctl = tmp_path / "controller"
    conf = config(ctl)
    tag = f"kp-{secrets.token_hex(3)}"
    [gpu1, gpu2] = hosts_of(fleet, ["gpu1", "gpu2"], tag)
    builds = Builds()
    first = tiny_inputs(version="0.7")
    all_ok(obtain_run(fleet, tmp_path, [gpu1], conf, first, builds)[0])
    other = tiny_inputs(version="0.8")
    copy_entry(ctl, compute_key(first), compute_key(other))

    res, _ = obtain_run(fleet, tmp_path, [gpu2], conf, other, builds)
    all_ok(res)
    assert wheel_from(res) == {"gpu2": "build"} and builds.hosts == ["gpu1", "gpu2"]
    events = res.hosts["gpu2"].data["cache_events"]
    assert any("local corrupt" in e and "names key" in e for e in events), events
    assert "0.8" in Path(res.hosts["gpu2"].data["path"]).name
    [record] = LocalStore(ctl).quarantined()
    assert record["key"] == compute_key(other)
