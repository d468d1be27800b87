"""`invoke smoke` against the real sgl-kernel 0.3.21 wheel from PyPI, the way a new user runs it.

The wheel (about 535 MB, no dependencies pulled) is downloaded once into the test cache
(``SM120KIT_TEST_CACHE``, default ``~/.cache/sm120kit-tests``) and installed with --no-deps
into a venv that sees the suite's torch (``--system-site-packages``), never into the system
site-packages. Nothing is simulated: the torch here is 2.13.0+cpu, while the wheel was built
for torch 2.9.1 with CUDA 12, so smoke must name the drift, the CPU build and the missing CUDA
12 runtime, and must report FA3 (flash_ops) and FlashMLA (flashmla_ops) as not for 12.0 by
design while judging common_ops and spatial_ops. No download: the test fails and says why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from sm120kit.output.checks import render_smoke
from sm120kit.runner.results import HostResult, RunResult
from tests.conftest import invoke_env, json_of, run_invoke
from tests.support.real_wheels import real_wheel, wheel_venv

VERSION = "0.3.21"
WHEEL = f"sgl_kernel-{VERSION}-cp310-abi3-manylinux2014_x86_64.whl"

# A 535 MB download and a probe of ~30 .so files: minutes on a small host.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


@pytest.fixture(scope="session")
def sgl_venv() -> Path:
    """A venv holding the PyPI sgl-kernel 0.3.21 wheel beside the suite's torch (cached)."""
    wheel = real_wheel("sgl-kernel", VERSION, WHEEL)
    return wheel_venv(f"sgl-kernel-{VERSION}", [wheel], system_site_packages=True)


@pytest.fixture(scope="session")
def smoked(sgl_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`invoke smoke --host local --python VENV --package sgl-kernel --arch 12.0 --json`, with
    local on an R570 driver: r570 pins sgl-kernel 0.3.21 (torch ==2.9.1), which r580 (torch
    2.14.1, its lock's) no longer carries."""
    tmp = tmp_path_factory.mktemp("smoke-real")
    argv = ["smoke", "-H", "local", "--python", str(sgl_venv), "--package", "sgl-kernel"]
    inventory = tmp / "hosts.yaml"
    local = {"ansible_connection": "local", "target_driver": "570.124.06", "target_arch": "12.0"}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"local": local}}}))
    env = invoke_env(None, tmp, INVOKE_SM120KIT_INVENTORY=str(inventory))
    proc = run_invoke([*argv, "--arch", "12.0", "--json"], env, timeout=1800)
    assert proc.returncode == 2, proc.stderr  # it does not load here: a failed host
    doc = json_of(proc)
    host: dict[str, Any] = doc["hosts"]["local"]
    return host


@pytest.fixture(scope="session")
def smoked_on_r580(sgl_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same wheel smoked on an R580 host: r580's sgl-kernel is its stack's sglang-kernel
    0.4.10 (torch ==2.14.1), so no recipe of this host pins 0.3.21's torch (#46 item 6b)."""
    tmp = tmp_path_factory.mktemp("smoke-real-r580")
    argv = ["smoke", "-H", "local", "--python", str(sgl_venv), "--package", "sgl-kernel"]
    inventory = tmp / "hosts.yaml"
    local = {"ansible_connection": "local", "target_driver": "580.95.05", "target_arch": "12.0"}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"local": local}}}))
    env = invoke_env(None, tmp, INVOKE_SM120KIT_INVENTORY=str(inventory))
    proc = run_invoke([*argv, "--arch", "12.0", "--json"], env, timeout=1800)
    assert proc.returncode == 2, proc.stderr
    host: dict[str, Any] = json_of(proc)["hosts"]["local"]
    return host


def test_the_release_torch_is_found_by_the_wheels_sha256(smoked_on_r580: dict[str, Any]) -> None:
    """Beside another torch and with no recipe pin for it, the torch 0.3.21 was released with
    comes from the shipped lock that holds this very wheel (its sha256, from the install's
    direct_url.json): locks/sglang-0.5.9 pins torch 2.9.1 beside it."""
    import torch

    pkg = smoked_on_r580["packages"]["sgl-kernel"]
    assert pkg["built_for"]["torch"] == "==2.9.1"
    source = (
        "locks/sglang-0.5.9/pylock.cp311-manylinux_2_34_x86_64.toml: this wheel "
        "(sha256 57dfb3a2a3cd) is locked beside torch 2.9.1"
    )
    assert pkg["built_for"]["source"] == source
    assert pkg["torch"]["summary"] == (
        f"built for torch 2.9.1 with CUDA 12.8 ({source}), this env has torch {torch.__version__}"
    )


def _checks(host: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["check"]: c for c in host["packages"]["sgl-kernel"]["checks"]}


def _ext(host: dict[str, Any], rel: str) -> dict[str, Any]:
    exts = host["smoke"]["packages"]["sgl-kernel"]["extensions"]
    (ext,) = [e for e in exts if e["rel"] == rel]
    return ext


def test_fa3_and_flashmla_are_info_with_reasons(smoked: dict[str, Any]) -> None:
    arch = _checks(smoked)["arch_coverage"]
    files = {f["rel"]: f for f in arch["details"]["files"]}
    fa3 = files["sgl_kernel/flash_ops.abi3.so"]
    assert fa3["status"] == "info"
    assert fa3["reason"].startswith("not for 12.0 by design: FA3")
    assert "Hopper only" in fa3["reason"] and "(has sm_80, sm_86, sm_90a)" in fa3["reason"]
    mla = files["sgl_kernel/flashmla_ops.abi3.so"]
    assert mla["status"] == "info" and "Hopper/B200 only" in mla["reason"]
    assert "(has sm_90a, sm_100a)" in mla["reason"]
    assert "2 not for 12.0 by design (flash_ops, flashmla_ops)" in arch["reason"]
    # The two modules are never the cause named: the check is judged on the others.
    assert "flash_ops" not in arch["reason"].split(";")[0]


def test_common_ops_and_spatial_ops_are_judged(smoked: dict[str, Any]) -> None:
    files = {f["rel"]: f for f in _checks(smoked)["arch_coverage"]["details"]["files"]}
    for rel in ("sgl_kernel/sm100/common_ops.abi3.so", "sgl_kernel/spatial_ops.abi3.so"):
        assert files[rel]["status"] == "pass" and "sm_120a runs on 12.0" in files[rel]["reason"]
    # The loader picks sm100/ on 12.0; the sm90/ build is not loaded, so not judged for arch.
    loader = _checks(smoked)["loader"]
    assert loader["details"]["chosen"] == "sgl_kernel/sm100/common_ops.abi3.so"
    assert any(p.endswith("sm90/common_ops.abi3.so") for p in files) is False
    undefined = _checks(smoked)["undefined_symbols"]
    assert undefined["status"] == "fail"
    failing = {f["rel"] for f in undefined["details"]["failing"]}
    assert {"sgl_kernel/sm100/common_ops.abi3.so", "sgl_kernel/spatial_ops.abi3.so"} <= failing
    assert undefined["reason"].startswith("sgl_kernel/sm100/common_ops.abi3.so: ")
    not_judged = {f["rel"] for f in undefined["details"]["not_judged"]}
    assert not_judged == {"sgl_kernel/flash_ops.abi3.so", "sgl_kernel/flashmla_ops.abi3.so"}


def test_torch_drift_named_exactly(smoked: dict[str, Any]) -> None:
    import torch

    pkg = smoked["packages"]["sgl-kernel"]
    assert pkg["built_for"]["torch"] == "==2.9.1"
    assert pkg["built_for"]["source"] == f"recipe pin for sgl-kernel {VERSION}"
    assert pkg["torch"]["built_for"] == "2.9.1"
    assert pkg["torch"]["installed"] == torch.__version__
    line = f"built for torch 2.9.1 (recipe pin for sgl-kernel {VERSION}), this env has torch {torch.__version__}"
    assert pkg["torch"]["summary"] == line
    assert pkg["provenance"] is None  # a wheel built elsewhere carries no build record
    reason = _checks(smoked)["undefined_symbols"]["reason"]
    assert line in reason and "the wheel pins no torch version" not in reason


def test_causes_sorted(smoked: dict[str, Any]) -> None:
    import torch

    common = _ext(smoked, "sgl_kernel/sm100/common_ops.abi3.so")
    causes = {c["cause"]: c for c in common["causes"]}
    assert list(causes)[:2] == ["torch_abi", "torch_cpu_build"]
    cpu = causes["torch_cpu_build"]["reason"]
    assert cpu.startswith(f"torch {torch.__version__} is a CPU build: libtorch_cuda/libc10_cuda")
    assert "are not there" in cpu
    # Drift: cited demangled, with what the installed torch has instead.
    drift = causes["torch_abi"]["reason"]
    assert "int const* at::TensorBase::const_data_ptr<int, 0>() const" in drift
    assert "[installed torch has int const* at::TensorBase::const_data_ptr<int>() const]" in drift
    # The CPU torch's absent CUDA half is its own cause, not evidence of drift.
    assert "c10::cuda::" not in drift
    assert "c10::cuda::getCurrentCUDAStream" in cpu
    cuda = causes["cuda_major"]["reason"]
    assert cuda.startswith("needs CUDA 12 libraries (") and "libcudart.so.12" in cuda
    assert "this env provides" in cuda and "ships CUDA none" not in cuda
    spatial = _ext(smoked, "sgl_kernel/spatial_ops.abi3.so")
    (drifted,) = [c for c in spatial["causes"] if c["cause"] == "torch_abi"]
    assert "std::vector<at::Tag, std::allocator<at::Tag> >" in drifted["reason"]
    assert "torch::headeronly::Tag" in drifted["reason"]  # torch 2.13's variant of _def
    syms = {s["name"]: s for s in spatial["missing_symbols"]}
    assert all(s.get("cause") for s in syms.values())


def test_human_output(smoked: dict[str, Any]) -> None:
    """The table view of the same run: the torch line and the info lines per package."""
    import torch

    keys = ("smoke", "packages", "python", "python_source", "arch", "arch_source")
    host = HostResult("local", status=smoked["status"], error=smoked["error"])
    host.data.update({k: smoked[k] for k in keys})
    console = Console(record=True, width=400)
    render_smoke(console, RunResult("smoke", {"local": host}))
    out = console.export_text()
    assert (
        f"sgl-kernel {VERSION}: built for torch 2.9.1 (recipe pin for sgl-kernel {VERSION}), "
        f"this env has torch {torch.__version__}"
    ) in out
    assert "sgl_kernel/flash_ops.abi3.so: info (arch_coverage): not for 12.0 by design: FA3" in out
    # The per-.so lines start with the causes of the file the verdict names.
    lines = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("sgl-kernel: ")]
    problems = [ln for ln in lines if ": info (" not in ln]
    assert problems[0].startswith(
        "sgl-kernel: sgl_kernel/sm100/common_ops.abi3.so: cause torch_abi: built for torch 2.9.1"
    )
    assert problems[1].startswith(
        "sgl-kernel: sgl_kernel/sm100/common_ops.abi3.so: cause torch_cpu_build:"
    )
    assert any(
        "sgl_kernel/flash_ops.abi3.so: info (undefined_symbols): not for 12.0 by design, not judged"
        in ln
        for ln in lines
    )
