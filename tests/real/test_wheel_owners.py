"""A lock whose wheels write one file with different bytes is refused at draft time
(sm120kit/stack/wheel_owners.py), judged by smoke's own rule (remote/lib/file_owners.py).

Real parts: tiny real wheels (tests/support/tiny_index.py) with real RECORDs, on a real
loopback PEP 503 index resolved by the pinned uv; and the real pair that broke the vLLM
0.33.0 env, cuda-python 12.6.2.post1 and cuda-bindings 13.5.0 (PyPI's wheels, by sha256),
read once in a session fixture.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sm120kit.errors import RecipeError
from sm120kit.stack.draft import draft_lock
from sm120kit.stack.lock import LockEntry
from sm120kit.stack.wheel_owners import check_entries, clashes, site_path, wheel_record
from tests.support.real_wheels import ManifestEntry, ensure
from tests.support.tiny_index import make_wheel, serve, sha256_of

PLATFORM = "manylinux_2_34_x86_64"


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("cuda/bindings/runtime.so", "cuda/bindings/runtime.so"),
        ("build_backend.py", "build_backend.py"),
        ("demo-1.0.data/purelib/demo/x.py", "demo/x.py"),
        ("demo-1.0.data/platlib/demo/_c.so", "demo/_c.so"),
        ("demo-1.0.data/scripts/demo", None),  # bin/, where smoke does not look either
        ("demo-1.0.data/headers/x.h", None),
        ("../../bin/tool", None),
        ("/etc/passwd", None),
    ],
)
def test_where_a_record_path_is_installed(name: str, want: str | None) -> None:
    assert site_path(name) == want


def _wheel(out: Path, name: str, version: str, files: dict[str, bytes]) -> tuple[str, Path]:
    return f"{name} {version}", make_wheel(out, name, version, extra=files)


@pytest.mark.parametrize(
    ("first", "second", "found", "mixed"),
    [
        # A split-out package beside the old self-contained release: a package mixed.
        ({"cuda/bindings/runtime.so": b"12.6"}, {"cuda/bindings/runtime.so": b"13.5"}, 1, True),
        # The same, written through the wheel's .data/platlib/ directory.
        ({"cuda/bindings/runtime.so": b"12.6"},
         {"two-1.0.data/platlib/cuda/bindings/runtime.so": b"13.5"}, 1, True),
        # Two wheels shipping a stray top-level build script: not a package.
        ({"build_backend.py": b"a"}, {"build_backend.py": b"b"}, 1, False),
        # The same bytes under one path (a namespace package's __init__.py): harmless.
        ({"nvidia/__init__.py": b""}, {"nvidia/__init__.py": b""}, 0, False),
        ({"a/x.py": b"1"}, {"b/y.py": b"2"}, 0, False),
        # Scripts go to bin/, outside site-packages: not judged (smoke does not see them).
        ({"one-1.0.data/scripts/tool": b"1"}, {"two-1.0.data/scripts/tool": b"2"}, 0, False),
    ],
)  # fmt: skip
def test_the_clashes_of_two_wheels(
    tmp_path: Path, first: dict[str, bytes], second: dict[str, bytes], found: int, mixed: bool
) -> None:
    got = clashes([_wheel(tmp_path, "one", "1.0", first), _wheel(tmp_path, "two", "1.0", second)])
    assert len(got) == found
    if found:
        assert got[0].dists == ("one 1.0", "two 1.0") and got[0].mixed is mixed


def _entry(label_path: tuple[str, Path]) -> LockEntry:
    label, path = label_path
    name, version = label.split()
    return LockEntry(name, version, path.name, path.as_uri(), sha256_of(path), "release", False)


def test_a_benign_clash_is_kept_for_review_and_a_mixed_package_refused(tmp_path: Path) -> None:
    """flashinfer-python and torch-c-dlpack-ext both ship a top-level build_backend.py (the
    sglang 0.5.23 and vLLM 0.33.0 locks): the draft goes on, the clash is returned for the
    lock's notes; a package mixed stops it, naming both and the paths."""
    benign = [
        _entry(_wheel(tmp_path, "flashinfer-python", "1.0", {"build_backend.py": b"a"})),
        _entry(_wheel(tmp_path, "torch-c-dlpack-ext", "1.0", {"build_backend.py": b"b"})),
    ]
    fetch = lambda e: Path(e.url[len("file://") :])  # noqa: E731
    kept = check_entries(benign, python="3.11", platform=PLATFORM, indexes=[], fetch=fetch)
    assert [c.paths for c in kept] == [("build_backend.py",)]
    files = {f"pkg/m{i}.py": b"old" for i in range(5)}
    mixed = [
        _entry(_wheel(tmp_path / "o", "old", "1.0", files)),
        _entry(_wheel(tmp_path / "n", "new", "1.0", {k: b"new" for k in files})),
    ]
    with pytest.raises(RecipeError) as err:
        check_entries(mixed, python="3.11", platform=PLATFORM, indexes=[], fetch=fetch)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("Python 3.11: the closure would install a package")
    assert "new 1.0 and old 1.0 both write 5 file(s)" in msg
    assert "(pkg/m0.py, pkg/m1.py, pkg/m2.py and 2 more)" in msg
    assert "constrain one of them" in msg  # no index to tell which constraint


@pytest.fixture(scope="module")
def split_index(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """cuda-python's story in miniature: ``old`` 1.0 ships ``pkg/`` itself; ``old`` 2.0 is a
    metapackage requiring ``new==1.0``; ``new`` 1.0 and 2.0 ship ``pkg/``; ``app`` asks for
    both names with no pin, as flashinfer-python (cuda-python>=12.0) and torch
    (cuda-bindings) do."""
    files = tmp_path_factory.mktemp("split")
    make_wheel(files, "app", "1.0", requires=("new", "old"))
    make_wheel(files, "old", "1.0", extra={"pkg/core.py": b"old 1.0\n"})
    make_wheel(files, "old", "2.0", requires=("new==1.0",))
    make_wheel(files, "new", "1.0", extra={"pkg/core.py": b"new 1.0\n"})
    make_wheel(files, "new", "2.0", extra={"pkg/core.py": b"new 2.0\n"})
    with serve(files) as url:
        yield url


def test_the_refusal_names_the_constraint_and_the_constraint_locks(
    split_index: str, tmp_path: Path
) -> None:
    """uv takes the newest ``new`` and so the old self-contained ``old``: refused, with the
    constraint read from ``old`` 2.0's RECORD; with that constraint the closure locks."""
    with pytest.raises(RecipeError) as err:
        draft_lock("app==1.0", python="3.11", platform=PLATFORM, target=None,
                   cache=tmp_path, index=split_index)  # fmt: skip
    msg = str(err.value)
    assert "new 2.0 and old 1.0 both write 1 file(s) in a package directory" in msg
    assert "fix: --constraint 'old>=2.0' (old 2.0, its newest release, writes none" in msg
    lock = draft_lock("app==1.0", python="3.11", platform=PLATFORM, target=None,
                      cache=tmp_path, index=split_index, constraints=("old>=2.0",))  # fmt: skip
    assert {e.name: e.version for e in lock.packages} == {"app": "1.0", "old": "2.0", "new": "1.0"}
    assert lock.constraints == ("old>=2.0",) and "-c constraints.txt" in lock.resolver


#: The vLLM 0.33.0 lock's pair (locks/vllm-0.33.0 before the cuda-python>=13 constraint,
#: git history): PyPI's cp311 wheels, by sha256.
CUDA_PYTHON = ManifestEntry(
    "cuda_python-12.6.2.post1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "https://files.pythonhosted.org/packages/4e/f4/9badcb1f59263365a2ce49b09b4a0bfa95c1c102a367c5601bcfe118cd96/cuda_python-12.6.2.post1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "d47ba3464fd890025a6d1929dac5e71f2d8c16d0abfe461123cf8be1f975d3a0",
)
CUDA_BINDINGS = ManifestEntry(
    "cuda_bindings-13.5.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
    "https://files.pythonhosted.org/packages/f6/0d/ca24317a31118b90fd60126aec5c0a92a191a7fdd39524032d43328b49b5/cuda_bindings-13.5.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
    "08b7e8d674c3266facb00453a7e34ea7d3ea965c2f594bb728f269f45f39fbe2",
)


@pytest.fixture(scope="session")
def real_pair() -> list[tuple[str, Path]]:
    return [("cuda-python 12.6.2.post1", ensure(CUDA_PYTHON)),
            ("cuda-bindings 13.5.0", ensure(CUDA_BINDINGS))]  # fmt: skip


def test_the_real_pair_mixes_cuda_bindings(real_pair: list[tuple[str, Path]]) -> None:
    """The 25 paths under cuda/bindings/ both wheels' RECORDs list with other hashes."""
    (clash,) = clashes(real_pair)
    assert clash.dists == ("cuda-bindings 13.5.0", "cuda-python 12.6.2.post1") and clash.mixed
    assert len(clash.paths) == 25 and all(p.startswith("cuda/bindings/") for p in clash.paths)
    assert "cuda/bindings/runtime.cpython-311-x86_64-linux-gnu.so" in clash.paths
    # cuda-python 12.6.2.post1 ships the bindings itself (13.4.4 is a metapackage).
    assert set(clash.paths) <= set(wheel_record(real_pair[0][1]))
