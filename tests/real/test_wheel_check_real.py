"""Released wheels verified for a target before they are trusted, on the real PyPI files.

Nothing is simulated but the target itself (a driver version and a compute capability, as a
GPU-less build box names them): the sglang-kernel 0.4.10 and sgl-kernel 0.3.21 wheels come
from PyPI (tests/support/real_wheels.py: verified by sha256 in the test cache), their modules are read by the
tool's fatbin reader, and cuobjdump (``nvidia-cuda-cuobjdump``, installed by scripts/test.sh)
is the reference for the archs each module carries.

Which modules the package's loader picks on 12.0 was read in the wheels' own
``sgl_kernel/load_utils.py``: capability 90 -> ``sm90/``, anything else -> ``sm100/``
(both releases), so on 12.0 it loads ``sm100/common_ops``; ``spatial_ops`` is loaded by
``sgl_kernel/__init__`` on every GPU. ``flash_ops`` (FA3) and ``flashmla_ops`` load only when
used and carry no SM120 code by design.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import pytest

from sm120kit.errors import RecipeError
from sm120kit.remote.lib.files import sha256_file
from sm120kit.stack.release_check import driver_cuda, verify_release
from tests.support.real_wheels import real_wheel
from tests.support.sample_wheel import cuobjdump

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

NEW = ("sglang-kernel", "0.4.10", "sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl")
NEW_SHA256 = "043cbe4a10e7887ea1b25599b729ff1ce115a0d5217b2c177aff9f9ae5327724"
OLD = ("sgl-kernel", "0.3.21", "sgl_kernel-0.3.21-cp310-abi3-manylinux2014_x86_64.whl")
LOADED_ON_12_0 = ["sgl_kernel/sm100/common_ops.abi3.so", "sgl_kernel/spatial_ops.abi3.so"]
NOT_FOR_ARCH = {
    "flash_ops": "FA3 (FlashAttention 3), Hopper only",
    "flashmla_ops": "FlashMLA, Hopper/Blackwell datacenter only",
}
#: What sglang-kernel 0.4.10's modules carry, by cuobjdump --list-elf (family SASS, which
#: cuobjdump names by its plain arch, is sm_100f here: nvcc refuses sm_100 and sm_100f in one
#: file because they are the same SASS).
NEW_ARCHS = {
    "sgl_kernel/flash_ops.abi3.so": ["sm_80", "sm_86", "sm_90a"],
    "sgl_kernel/flashmla_ops.abi3.so": ["sm_90a", "sm_100f", "sm_103a"],
    "sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so": ["sm_80", "sm_90", "sm_120a"],
    "sgl_kernel/spatial_ops.abi3.so": ["sm_80", "sm_89", "sm_90", "sm_90a", "sm_100f", "sm_120a"],
    "sgl_kernel/sm100/common_ops.abi3.so": [
        "sm_80",
        "sm_89",
        "sm_90",
        "sm_90a",
        "sm_100f",
        "sm_120a",
    ],
    "sgl_kernel/sm90/common_ops.abi3.so": [
        "sm_80",
        "sm_89",
        "sm_90",
        "sm_90a",
        "sm_100f",
        "sm_120a",
    ],
}


@pytest.fixture(scope="module")
def new_wheel() -> Path:
    return real_wheel(*NEW)


@pytest.fixture(scope="module")
def old_wheel() -> Path:
    return real_wheel(*OLD)


@pytest.fixture(scope="module")
def new_on_580(new_wheel: Path) -> dict:  # type: ignore[type-arg]
    return verify_release(
        str(new_wheel),
        sha256=NEW_SHA256,
        driver="580.95.05",
        arch="12.0",
        loaded=LOADED_ON_12_0,
        not_for_arch=NOT_FOR_ARCH,
    )


def _cuobjdump_archs(wheel: Path, member: str) -> list[str]:
    tool = cuobjdump()
    if tool is None:
        pytest.fail("cuobjdump not found: scripts/test.sh installs nvidia-cuda-cuobjdump")
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as zf:
        out = Path(tmp) / "m.so"
        with zf.open(member) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        text = subprocess.run(
            [str(tool), "--list-elf", str(out)], capture_output=True, text=True, check=True
        ).stdout
    return sorted({m for m in re.findall(r"\.(sm_\d+[af]?)\.cubin", text)})


def test_archs_per_module_are_cuobjdumps(new_wheel: Path, new_on_580: dict) -> None:  # type: ignore[type-arg]
    read = {m["module"]: m["sass"] for m in new_on_580["modules"]}
    assert read == NEW_ARCHS
    assert all(not m["ptx"] for m in new_on_580["modules"])
    for member in ("sgl_kernel/sm100/common_ops.abi3.so", "sgl_kernel/flashmla_ops.abi3.so"):
        plain = sorted(t.rstrip("f") if t.endswith("f") else t for t in read[member])
        assert _cuobjdump_archs(new_wheel, member) == plain


def test_sglang_kernel_0_4_10_serves_12_0_on_580(new_on_580: dict) -> None:  # type: ignore[type-arg]
    assert new_on_580["ok"] and new_on_580["refusal"] is None
    assert new_on_580["sha256"] == NEW_SHA256 and new_on_580["driver_cuda"] == "13.0"
    status = {m["module"]: m["status"] for m in new_on_580["modules"]}
    assert status == {
        "sgl_kernel/flash_ops.abi3.so": "not for arch",
        "sgl_kernel/flashmla_ops.abi3.so": "not for arch",
        "sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so": "not loaded",
        "sgl_kernel/spatial_ops.abi3.so": "ok",
        "sgl_kernel/sm100/common_ops.abi3.so": "ok",
        "sgl_kernel/sm90/common_ops.abi3.so": "not loaded",
    }
    common = next(
        m for m in new_on_580["modules"] if m["module"].endswith("sm100/common_ops.abi3.so")
    )
    assert common["cudart"] == 13 and common["nvcc"] == "13.0.88"
    assert common["reason"] == "SASS sm_120a runs on 12.0"


def test_sglang_kernel_0_4_10_is_refused_on_570_for_its_cudart(new_wheel: Path) -> None:
    doc = verify_release(
        str(new_wheel),
        sha256=NEW_SHA256,
        driver="570.124.06",
        arch="12.0",
        loaded=LOADED_ON_12_0,
        not_for_arch=NOT_FOR_ARCH,
    )
    assert not doc["ok"]
    assert doc["refusal"] == (
        "sgl_kernel/sm100/common_ops.abi3.so: links libcudart.so.13 (CUDA 13): driver "
        "570.124.06 runs CUDA <= 12.8"
    )


def test_sgl_kernel_0_3_21_serves_12_0_on_570_through_minor_version_compatibility(
    old_wheel: Path,
) -> None:
    doc = verify_release(
        str(old_wheel),
        sha256=sha256_file(str(old_wheel)),
        driver="570.124.06",
        arch="12.0",
        loaded=LOADED_ON_12_0,
        not_for_arch=NOT_FOR_ARCH,
    )
    assert doc["ok"], doc["refusal"]
    common = next(m for m in doc["modules"] if m["module"].endswith("sm100/common_ops.abi3.so"))
    assert common["cudart"] == 12 and common["nvcc"] == "12.9.86"
    assert "sm_120a" in common["sass"] and not common["ptx"]
    assert doc["notes"] == [
        "built with CUDA 12.9 for a driver of CUDA 12.8: runs through CUDA's minor-version "
        "compatibility, from SASS only (no PTX JIT)"
    ]
    # On a 575 driver (CUDA 12.9) the same wheel needs no such note.
    same = verify_release(
        str(old_wheel),
        sha256=sha256_file(str(old_wheel)),
        driver="575.57.08",
        arch="12.0",
        loaded=LOADED_ON_12_0,
        not_for_arch=NOT_FOR_ARCH,
    )
    assert same["ok"] and same["notes"] == []


def test_a_loaded_module_without_code_for_the_arch_is_refused_naming_its_archs(
    new_wheel: Path,
) -> None:
    doc = verify_release(
        str(new_wheel),
        sha256=NEW_SHA256,
        driver="580.95.05",
        arch="12.0",
        loaded=["sgl_kernel/flash_ops.abi3.so"],
        not_for_arch={},
    )
    assert not doc["ok"]
    assert doc["refusal"].startswith(
        "sgl_kernel/flash_ops.abi3.so: no SASS or PTX usable on 12.0 (has sm_80, sm_86, sm_90a)"
    )
    assert doc["refusal"].endswith("(device code: sm_80, sm_86, sm_90a; wanted: 12.0)")


def test_a_wheel_whose_sha256_differs_is_refused_before_it_is_read(tmp_path: Path) -> None:
    fake = tmp_path / "sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl"
    fake.write_bytes(b"not the release")
    doc = verify_release(
        str(fake), sha256=NEW_SHA256, driver="580.95.05", arch="12.0", loaded=LOADED_ON_12_0
    )
    assert not doc["ok"] and doc["modules"] == []
    assert doc["refusal"] == (
        f"sha256 {sha256_file(str(fake))} differs from the lock's {NEW_SHA256}"
    )


def test_targets_it_cannot_read_are_one_line_errors() -> None:
    assert driver_cuda("580.95.05") == "13.0" and driver_cuda("570.124.06") == "12.8"
    with pytest.raises(RecipeError, match=r"^driver 535.54.03 runs no CUDA toolkit"):
        driver_cuda("535.54.03")
    with pytest.raises(RecipeError, match=r"^arch 'twelve' is not a compute capability"):
        verify_release("/nonexistent", sha256="", driver="580.95.05", arch="twelve", loaded=[])


def test_the_committed_catalogue_agrees_with_the_real_wheel(new_on_580: dict) -> None:  # type: ignore[type-arg]
    """locks/sglang-0.5.23/catalogue.toml (generated by `invoke lock.catalogue`) says what
    this read of the real sglang-kernel 0.4.10 wheel says: per module its SASS, PTX and
    libcudart, and no code for 12.0 exactly where verification finds none."""
    from sm120kit.stack.catalogue import load_beside
    from sm120kit.stack.lock import CHECKOUT

    one = load_beside(CHECKOUT / "locks" / "sglang-0.5.23")
    assert one is not None
    found = one.by_sha256(NEW_SHA256)
    assert found is not None
    rel, wheel = found
    assert (rel.distribution, wheel.version) == ("sglang-kernel", "0.4.10")
    read = {m["module"]: (m["sass"], m["ptx"], m["cudart"]) for m in new_on_580["modules"]}
    assert {m.path: (list(m.sass), list(m.ptx), m.cudart) for m in wheel.modules} == read
    no_code = {m.path for m in wheel.modules if m.not_on.get("12.0")}
    assert no_code == {m["module"] for m in new_on_580["modules"] if m["status"] == "not for arch"}


@pytest.mark.parametrize(("driver", "cuda"), [("580.95.05", "13.0"), ("570.124.06", "12.8")])
def test_the_catalogues_verdict_is_the_hosts_read_of_the_same_file(
    new_wheel: Path, driver: str, cuda: str
) -> None:
    """The stack step takes a compiled release's verdict from the catalogue when its sha256 is
    one the catalogue read (plays/stack.py ``_judged_by_catalogue``): for the real sglang-kernel
    0.4.10 wheel, that verdict equals the host's own read of the file, on a driver it serves
    and on one it is refused on (its libcudart)."""
    from sm120kit.remote.install_lock import verify
    from sm120kit.stack.catalogue import load_beside
    from sm120kit.stack.lock import CHECKOUT
    from sm120kit.stack.release_check import catalogue_verdict

    cat = load_beside(CHECKOUT / "locks" / "sglang-0.5.23")
    assert cat is not None
    target = {
        "cc": [12, 0], "driver": driver, "driver_cuda": cuda, "python": "3.11",
        "not_for_arch": cat.not_for_arch("12.0"), "loaders": cat.loaders(),
    }  # fmt: skip
    from_catalogue = catalogue_verdict(cat, "sglang-kernel", NEW_SHA256, target)
    entry = {"name": "sglang-kernel", "sha256": NEW_SHA256, "dest": str(new_wheel)}
    read = verify(entry, target)  # what install_lock reads on the host (no memo: no digest)
    assert from_catalogue == {k: read[k] for k in ("ok", "refusal", "notes")}
    assert from_catalogue is not None and from_catalogue["ok"] is (driver == "580.95.05")
    assert catalogue_verdict(cat, "sglang-kernel", "0" * 64, target) is None  # not read: host
