"""install_lock's verdicts on released files are kept beside each file, keyed by the target
(with the verifier's own code) and the file's sha256: a file installed again is not read
again, and another target or another verifier judges afresh.

Real parts: a wheel carrying a real shared object of this machine (tests/support/tiny_index.py),
the verifier reading it. Simulated: the target driver and arch (a GPU-less machine).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sm120kit.remote import install_lock
from tests.support.tiny_index import SYSTEM_SO, make_wheel, sha256_of


@pytest.fixture
def entry(tmp_path: Path) -> dict[str, object]:
    assert SYSTEM_SO is not None
    folder = tmp_path / "releases" / "x"
    wheel = make_wheel(
        folder, "demo-native", "0.1", tag="cp311-cp311-manylinux_2_17_x86_64",
        shared_object=SYSTEM_SO,
    )  # fmt: skip
    return {"name": "demo-native", "version": "0.1", "sha256": sha256_of(wheel),
            "dest": str(wheel), "compiled": True}  # fmt: skip


def _target(digest: str | None) -> dict[str, object]:
    target: dict[str, object] = {
        "cc": [12, 0], "driver": "580.95.05", "driver_cuda": "13.0", "python": "3.11",
        "not_for_arch": {}, "loaders": {},
    }  # fmt: skip
    if digest:
        target["digest"] = digest
    return target


def test_a_verdict_is_kept_and_taken_for_the_same_file_and_target(
    entry: dict[str, object],
) -> None:
    first = install_lock.verify(entry, _target("d1"))
    assert first["ok"] is True
    memo = Path(str(entry["dest"])).parent / install_lock.VERDICTS
    kept = json.loads(memo.read_text())
    assert list(kept) == [f"d1:{entry['sha256']}"]
    # The kept verdict is what a second look returns, without reading the file.
    kept[f"d1:{entry['sha256']}"]["notes"] = ["from the memo"]
    memo.write_text(json.dumps(kept))
    assert install_lock.verify(entry, _target("d1"))["notes"] == ["from the memo"]
    # Another target (or another verifier: the digest covers its code) judges afresh.
    assert install_lock.verify(entry, _target("d2"))["notes"] != ["from the memo"]
    assert sorted(json.loads(memo.read_text())) == sorted(
        [f"d1:{entry['sha256']}", f"d2:{entry['sha256']}"]
    )


def test_without_a_digest_nothing_is_kept(entry: dict[str, object]) -> None:
    assert install_lock.verify(entry, _target(None))["ok"] is True
    assert not (Path(str(entry["dest"])).parent / install_lock.VERDICTS).exists()
