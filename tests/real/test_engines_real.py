"""The serving engines against real toolchains and envs (tests/unit/test_engines.py holds the
tables): triton's ptxas rule runs this machine's real nvcc (``--version``) as the ptxas it
finds; with a real vLLM 0.33.0 env (SM120KIT_VLLM_ENV=<its python>, provisioned by
bench/ssh_real_lock.py; CI has none) `invoke smoke` on it imports vllm through the stub,
judges its JIT toolchains and warns on the fa2 module's compute_80-only PTX.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from sm120kit.remote.lib.jit_toolchain import check_jit
from tests.conftest import invoke_env, json_of, run_invoke

VLLM_ENV = os.environ.get("SM120KIT_VLLM_ENV", "")


@pytest.mark.parametrize(("cc", "tool"), [((12, 0), "ptxas-blackwell"), ((9, 0), "ptxas")])
def test_triton_takes_its_own_ptxas_by_capability(
    tmp_path: Path, cc: tuple[int, int], tool: str
) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc on this machine")
    bin_dir = tmp_path / "triton" / "backends" / "nvidia" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / tool).symlink_to(nvcc)
    pkg = {"triton": {"rule": "triton", "version": "3.8.0", "location": str(tmp_path)}}
    res = check_jit(pkg, [str(tmp_path)], cc, "13.0", env={"PATH": "/usr/bin"})
    row = res["packages"]["triton"]
    assert row["status"] == "pass", row
    assert row["ptxas"] == str(bin_dir / tool) and row["ptxas_from"].endswith(tool)
    # The env var names another ptxas first; one that does not run falls back to the wheel's.
    var = "TRITON_" + tool.upper().replace("-", "_") + "_PATH"
    res = check_jit(pkg, [str(tmp_path)], cc, "13.0", env={var: str(tmp_path / "none")})
    assert res["packages"]["triton"]["ptxas"] == str(bin_dir / tool)
    (bin_dir / tool).unlink()
    res = check_jit(pkg, [str(tmp_path)], cc, "13.0", env={})
    assert res["status"] == "fail" and f"no working {tool}" in res["reason"]


# ------------------------------------------------------------------ the real vLLM env


@pytest.fixture(scope="module")
def vllm_smoke(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not VLLM_ENV:
        pytest.skip("SM120KIT_VLLM_ENV names no real vLLM env")
    proc = run_invoke(
        ["smoke", "-H", "local", "--python", VLLM_ENV, "--arch", "12.0", "--json"],
        invoke_env(None, tmp_path_factory.mktemp("vllm-smoke")),
        timeout=1800,
    )
    host: dict[str, Any] = json_of(proc)["hosts"]["local"]
    return host


def test_real_env_imports_vllm_through_the_stub_with_its_pins(vllm_smoke: dict[str, Any]) -> None:
    stack = vllm_smoke["stack"]
    assert stack["top"] == "vllm" and stack["version"].startswith("0.33.0")
    checks = {c["check"]: c for c in stack["checks"]}
    assert checks["import"]["status"] == "pass", checks["import"]
    assert checks["import"]["details"]["stub"] == "torch.cuda faked as one GPU of capability 12.0"
    assert checks["pins"]["status"] == "pass", checks["pins"]
    assert {"torch", "flashinfer-python"} <= {
        r["package"] for r in checks["pins"]["details"]["pins"]
    }


def test_real_env_jit_toolchains_flashinfer_and_triton(vllm_smoke: dict[str, Any]) -> None:
    jit = vllm_smoke["stack"]["jit"]["packages"]
    assert {"flashinfer-python", "triton"} <= set(jit)
    assert jit["triton"]["status"] == "pass" and jit["triton"]["ptxas_from"].endswith(
        "ptxas-blackwell"
    )


def test_real_env_every_vllm_module_judged_fa2_warned(vllm_smoke: dict[str, Any]) -> None:
    exts = vllm_smoke["smoke"]["packages"]["vllm"]["extensions"]
    fa2 = next(e for e in exts if e["rel"].endswith("_vllm_fa2_C.abi3.so"))
    assert (fa2["sass"], fa2["ptx"]) == (["sm_80"], ["compute_80"])
    cov = next(c for c in vllm_smoke["packages"]["vllm"]["checks"] if c["check"] == "arch_coverage")
    assert cov["status"] in ("warn", "info", "pass"), cov
    text = json.dumps(cov)
    assert "_vllm_fa2_C" in text and "compute_80" in text
