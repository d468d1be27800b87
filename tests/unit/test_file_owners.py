"""Two installed distributions that write the same file (remote/lib/file_owners.py): real
dist-info RECORDs and files in a temporary site-packages, as an installer leaves them."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from sm120kit.remote.lib import file_owners


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _dist(site: Path, name: str, files: dict[str, bytes]) -> None:
    info = site / f"{name}.dist-info"
    info.mkdir(parents=True)
    rows = [f"{path},{_hash(data)},{len(data)}" for path, data in files.items()]
    (info / "RECORD").write_text("\n".join([*rows, f"{name}.dist-info/RECORD,,"]) + "\n")


@pytest.mark.parametrize(
    ("first", "second", "status", "on_disk"),
    [
        # A split-out package beside the old self-contained release: a package mixed.
        ({"cuda/bindings/runtime.so": b"12.6"}, {"cuda/bindings/runtime.so": b"13.5"}, "fail",
         "cuda_bindings-13.5.0"),
        # Two wheels shipping a stray top-level build script: said, not failed.
        ({"build_backend.py": b"a"}, {"build_backend.py": b"b"}, "warn", "cuda_bindings-13.5.0"),
        # The same bytes under one path (a namespace package's __init__.py): harmless.
        ({"nvidia/__init__.py": b""}, {"nvidia/__init__.py": b""}, "pass", None),
        ({"a/x.py": b"1"}, {"b/y.py": b"2"}, "pass", None),
    ],
)  # fmt: skip
def test_a_file_two_distributions_write_differently_is_found(
    tmp_path: Path, first: dict[str, bytes], second: dict[str, bytes], status: str,
    on_disk: str | None,
) -> None:  # fmt: skip
    site = tmp_path / "site-packages"
    _dist(site, "cuda_python-12.6.2.post1", first)
    _dist(site, "cuda_bindings-13.5.0", second)
    for path, data in second.items():  # the second installed last: its bytes won
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_bytes(data)
    got = file_owners.check([str(site), str(tmp_path / "absent")])
    assert got["check"] == "file_owners" and got["status"] == status
    if status != "pass":
        shown = got["details"]["shown"]
        assert shown[0]["on_disk"] == on_disk
        assert shown[0]["claimed_by"] == ["cuda_bindings-13.5.0", "cuda_python-12.6.2.post1"]
        assert (
            "cuda_bindings-13.5.0 and cuda_python-12.6.2.post1 both install 1 file" in got["reason"]
        )
