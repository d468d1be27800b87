"""The build record (``sm120kit-build.json``) of the sample kernel's wheel: written by the build,
read by smoke, and different when the arch list differs.

Two real builds of examples/minikernel through build_wheel.py (the same ones
tests/real/test_smoke_task.py uses, cached across sessions): for 12.0 and for 9.0. The torch in
the record is the one the build env imports (this suite's), measured, not the recipe's claim.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from sm120kit.remote.build_wheel import PROVENANCE_FILE, write_provenance
from sm120kit.smoke.report import probe_args, probe_source
from tests.support.sample_wheel import (
    NVCC,
    SampleWheel,
    build_sample_wheel,
    install_into_venv,
    nvcc_available,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (nvcc_available() and shutil.which("g++")), reason="needs nvcc and g++ to build kernels"
    ),
    pytest.mark.timeout(2400),  # two real builds on a small, busy host
]


@pytest.fixture(scope="session")
def sample_builds() -> dict[str, SampleWheel]:
    """minikernel for 12.0 and for 9.0 (shared with test_smoke_task's variants)."""
    return {"12.0": build_sample_wheel(), "9.0": build_sample_wheel(arch_list="9.0")}


def record_of(wheel: Path) -> dict[str, Any]:
    """The build record inside a wheel, checked against the wheel's RECORD line."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (path,) = [n for n in names if n.endswith(".dist-info/" + PROVENANCE_FILE)]
        body = zf.read(path)
        record_file = path.rsplit("/", 1)[0] + "/RECORD"
        lines = zf.read(record_file).decode().splitlines()
    digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
    assert f"{path},sha256={digest},{len(body)}" in lines
    assert lines[-1].startswith(record_file + ",")  # RECORD still lists itself last
    doc: dict[str, Any] = json.loads(body)
    return doc


def test_build_writes_the_record(sample_builds: dict[str, SampleWheel]) -> None:
    import torch

    nvcc = subprocess.run([str(NVCC), "--version"], capture_output=True, text=True).stdout
    release = re.search(r"V([\d.]+)", nvcc)
    assert release is not None
    for arch, sample in sample_builds.items():
        rec = record_of(sample.wheel)
        assert (rec["schema"], rec["tool"], rec["package"]) == (1, "sm120kit", "minikernel")
        assert rec["wheel_version"] == "0.1.0"
        assert rec["torch"]["version"] == torch.__version__
        assert rec["torch"]["cuda"] == torch.version.cuda
        assert rec["toolkit"]["nvcc"] == release.group(1)
        assert rec["arch_list"] == [arch]
        assert rec["env"]["TORCH_CUDA_ARCH_LIST"] == arch
        (so,) = rec["device_code"]
        assert so.startswith("minikernel/_C") and so.endswith(".so")
    twelve, nine = (record_of(sample_builds[a].wheel) for a in ("12.0", "9.0"))
    assert (twelve["gencodes"], nine["gencodes"]) == (["sm_120"], ["sm_90"])
    assert twelve["device_code"] != nine["device_code"]
    # The hash the build reports (and the cache keeps) is of the wheel with the record in it.
    sample = sample_builds["12.0"]
    assert hashlib.sha256(sample.wheel.read_bytes()).hexdigest() == sample.sha256


def test_rewriting_keeps_one_record(sample_builds: dict[str, SampleWheel], tmp_path: Path) -> None:
    copy = tmp_path / sample_builds["12.0"].wheel.name
    shutil.copy(sample_builds["12.0"].wheel, copy)
    before = zipfile.ZipFile(copy).namelist()
    written = write_provenance(str(copy), {"recipe": "r580", "cache_key": "abc"})
    assert written["recipe"] == "r580" and written["gencodes"] == ["sm_120"]
    assert zipfile.ZipFile(copy).namelist() == before  # replaced in place, nothing added
    rec = record_of(copy)
    assert rec["cache_key"] == "abc" and "torch" not in rec  # only what it was given, plus code
    assert not list(tmp_path.glob(".provenance-*"))


def _probe(venv: Path, arch: str) -> dict[str, Any]:
    args = probe_args(["minikernel"], python=str(venv), arch=arch)
    proc = subprocess.run(
        [sys.executable, "-", json.dumps(args)],
        input=probe_source(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def test_smoke_reads_the_record(sample_builds: dict[str, SampleWheel], tmp_path: Path) -> None:
    import torch

    for arch, sample in sample_builds.items():
        venv = tmp_path / arch
        install_into_venv(sample.wheel, venv)
        pkg = _probe(venv, "12.0")["packages"]["minikernel"]
        assert pkg["provenance"] == record_of(sample.wheel)
        assert pkg["built_for"]["source"] == "build record sm120kit-build.json"
        assert pkg["torch"]["built_for"] == torch.__version__
        assert pkg["torch"]["summary"] == (
            f"built for torch {torch.__version__} (build record sm120kit-build.json), "
            f"this env has torch {torch.__version__}"
        )
        status = {c["check"]: c["status"] for c in pkg["checks"]}
        # Built for 12.0 and judged for 12.0: no warning about other archs anywhere.
        assert status["arch_coverage"] == ("pass" if arch == "12.0" else "fail")
        if arch == "12.0":
            assert all(s in ("pass", "skip") for s in status.values()), status
