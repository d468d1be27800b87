"""The real-wheel cache (tests/support/real_wheels.py): a file is kept only when it hashes to
the manifest's sha256, and the manifest names the files the shipped locks name. The download
here is a real urllib fetch of a file:// URL (no network needed); the wheels are stand-ins."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support import real_wheels
from tests.support.real_wheels import MANIFEST, ManifestEntry, WheelUnavailable, ensure


def test_a_file_is_kept_only_with_its_sha256(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SM120KIT_TEST_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "pkg-1.0-py3-none-any.whl"
    src.write_bytes(b"not really a wheel")
    good = hashlib.sha256(src.read_bytes()).hexdigest()
    with pytest.raises(WheelUnavailable, match="the manifest says"):
        ensure(ManifestEntry(src.name, src.as_uri(), "0" * 64))
    assert not (real_wheels.wheels_dir() / src.name).exists()
    got = ensure(ManifestEntry(src.name, src.as_uri(), good))
    assert got.read_bytes() == src.read_bytes() and got.parent == real_wheels.wheels_dir()
    src.unlink()  # verified once: asked again, the cached file is used
    assert ensure(ManifestEntry(src.name, src.as_uri(), good)) == got
    got.write_bytes(b"changed")  # a file changed in the cache is fetched again
    with pytest.raises(WheelUnavailable, match="cannot download"):
        ensure(ManifestEntry(src.name, src.as_uri(), good))


def test_manifest_agrees_with_the_shipped_locks() -> None:
    """Where a shipped lock names a manifest file, it gives the same URL and sha256."""
    locks = "".join(p.read_text() for p in (REPO / "locks").rglob("*.toml"))
    for entry in MANIFEST:
        assert entry.url.endswith("/" + entry.filename)
        if entry.url not in locks:
            continue
        m = re.search(
            r'url = "' + re.escape(entry.url) + r'"[^}]*?sha256 = "([0-9a-f]{64})"', locks
        )
        assert m and m[1] == entry.sha256, entry.filename
