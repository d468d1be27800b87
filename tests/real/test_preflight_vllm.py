"""Preflight of a vLLM launch: the launch shapes, vLLM 0.33.0's own capability facts as tables
(read from the released wheel, vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl; paths:lines
in sm120kit/preflight/vllm_checks.py), one `invoke preflight -- vllm serve ...` over the real
SSH fleet, and, with a real vLLM env (SM120KIT_VLLM_ENV: its python; CI has none), vLLM's own
resolver run in it over the fleet and the tables checked against its installed files.

Only the GPU is simulated: the fleet host's stub nvidia-smi (gpu1: two RTX PRO 6000, 12.0) and,
in the env, torch.cuda answering as one 12.0 GPU (remote/lib/in_target/vllm_args.py).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from sm120kit.engines import ENGINES, engine_of
from sm120kit.preflight.launch import parse_launch, server_args
from sm120kit.preflight.vllm_checks import (
    QUANT_MIN_CAPABILITY,
    VLLM_ATTENTION,
    backend_check,
    probe_request,
    quantization_check,
)
from sm120kit.remote.preflight_probe import env_site
from tests.conftest import invoke_env, json_of, run_invoke
from tests.support.fleet import Fleet
from tests.support.sglang_env import sglang_venv

REAL_ENV = os.environ.get("SM120KIT_VLLM_ENV")
real_env = pytest.mark.skipif(
    not REAL_ENV, reason="needs a real vLLM 0.33.0 env: set SM120KIT_VLLM_ENV to its python"
)
MODELS = Path(__file__).parent.parent / "fixtures" / "models"


@pytest.mark.parametrize(
    ("words", "engine", "model", "tp", "port"),
    [
        (["vllm", "serve", "org/m", "-tp", "2"], "vllm", "org/m", 2, 8000),
        (["/venv/bin/vllm", "serve", "--model", "m", "--port", "9000"], "vllm", "m", 1, 9000),
        (["python", "-m", "vllm.entrypoints.openai.api_server", "--model=m"], "vllm", "m", 1, 8000),
        (["sglang", "serve", "--model-path", "m", "--tp", "2"], "sglang", "m", 2, 30000),
        (["python", "-m", "sglang.launch_server", "--model", "m"], "sglang", "m", 1, 30000),
        (["--model-path", "m"], "sglang", "m", 1, 30000),
    ],
)
def test_the_launch_names_its_engine(
    words: list[str], engine: str, model: str, tp: int, port: int
) -> None:
    """Each launcher is its engine's; its options are read from that engine's table."""
    launch = parse_launch(words)
    assert (launch.engine, launch.model_path, launch.tp, launch.port) == (engine, model, tp, port)


def test_vllm_options_and_the_positional_model() -> None:
    """vLLM's spellings (-q, --gpu-memory-utilization); ``vllm serve M`` is ``--model M``, as
    vllm/entrypoints/cli/serve.py reads it; a bare launch is the default engine's."""
    words = ["vllm", "serve", "m", "-q", "fp8", "--gpu-memory-utilization", "0.8", "-pp", "2"]
    launch = parse_launch(words)
    assert (launch.quantization, launch.mem_fraction_static, launch.pp) == ("fp8", 0.8, 2)
    assert launch.gpus_needed() == 2 and launch.host == "0.0.0.0"
    assert server_args(words)[:2] == ["--model", "m"]
    assert parse_launch(["--model", "m", "-tp", "4"], default="vllm").tp == 4
    assert engine_of(["tgi", "serve", "m"]) is None
    assert {e.name for e in ENGINES.values()} == {"sglang", "vllm"}


@pytest.mark.parametrize(
    ("backend", "cc", "status", "cited"),
    [
        ("FLASH_ATTN", (12, 0), "pass", "flash_attn.py:458"),
        ("FLASHINFER", (12, 0), "pass", "flashinfer.py:696-703"),
        ("flashinfer", (12, 1), "pass", "flashinfer.py:696-703"),
        ("TRITON_ATTN", (12, 0), "pass", "triton_attn.py:405"),
        ("TRITON_MLA", (12, 0), "pass", "mla/triton_mla.py:140"),
        ("B12X", (12, 0), "pass", "b12x.py:216-219"),
        ("B12X", (9, 0), "fail", "b12x.py:216-219"),
        ("FLASHINFER_MLA_SPARSE_SM120", (12, 0), "pass", "flashinfer_mla_sparse.py:192"),
        ("FLASHMLA", (12, 0), "fail", "mla/flashmla.py:73"),
        ("FLASHMLA", (9, 0), "pass", "mla/flashmla.py:73"),
        ("CUTLASS_MLA", (12, 0), "fail", "mla/cutlass_mla.py:65"),
        ("FLASHINFER_MLA", (12, 0), "fail", "mla/flashinfer_mla.py:220"),
        ("FLASH_ATTN_MLA", (12, 0), "fail", "mla/flashattn_mla.py:69"),
        ("TRITON_FLASH_ATTN", (12, 0), "fail", "triton_flash_attn.py:21-26"),
        ("FLASHINFER", (13, 0), "fail", "flashinfer.py:696-703"),
        ("NO_SUCH", (12, 0), "unknown", "no NO_SUCH"),
    ],
)
def test_attention_backend_against_vllms_capability_check(
    backend: str, cc: tuple[int, int], status: str, cited: str
) -> None:
    """Each backend's supports_compute_capability, as vLLM 0.33.0 writes it, with the source."""
    got = backend_check(backend, cc, "--attention-backend")
    assert got["status"] == status, got
    assert cited in got["reason"]


def test_a_refused_backend_names_the_ones_vllm_would_pick_on_12() -> None:
    """The fix lists the valid backends of vLLM's own order for major 12 (platforms/cuda.py)."""
    mla = backend_check("CUTLASS_MLA", (12, 0), "--attention-backend")
    assert mla["fix"].endswith("give one of: TRITON_MLA, FLASHINFER_MLA_SPARSE_SM120")
    mha = backend_check("TRITON_FLASH_ATTN", (12, 0), "--attention-backend")
    assert mha["fix"].endswith("FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION")


@pytest.mark.parametrize(
    ("method", "cc", "status", "text"),
    [
        ("fp8", (12, 0), "pass", "minimum capability 75 <= 120"),
        ("modelopt_fp4", (12, 0), "pass", "minimum capability 75 <= 120"),
        ("fp_quant", (12, 0), "pass", "minimum capability 100 <= 120"),
        ("fp_quant", (8, 9), "fail", "Minimum capability: 100. Current capability: 89."),
        ("mxfp4", (7, 5), "fail", "The quantization method mxfp4 is not supported"),
        ("awq_marlin_x", (12, 0), "unknown", "has no awq_marlin_x"),
        (None, (12, 0), "skip", "no quantization method"),
    ],
)
def test_quantization_against_vllms_min_capability(
    method: str | None, cc: tuple[int, int], status: str, text: str
) -> None:
    """VllmConfig._get_quantization_config's check, with each method's get_min_capability."""
    got = quantization_check(method, cc)
    assert got["status"] == status and text in got["reason"], got


def test_the_probe_asks_vllms_resolver() -> None:
    """The request runs vllm_args.py in the env with the server's own argv."""
    launch = parse_launch(["vllm", "serve", "m", "--attention-backend", "FLASHMLA"])
    req = probe_request(launch, "/env/bin/python", (12, 0), resolve=True)
    assert req["resolve"]["resolver"] == "vllm_args"
    assert req["resolve"]["cases"] == [["--model", "m", "--attention-backend", "FLASHMLA"]]
    assert req["port"] == 8000 and "vllm" in req["dists"]


def _preflight(fleet: Fleet, tmp: Path, python: str, *words: str) -> tuple[int, dict[str, Any]]:
    argv = ["preflight", "-H", "gpu1", "--python", python, "--json", "--", *words]
    proc = run_invoke(argv, invoke_env(fleet, tmp), timeout=600)
    return proc.returncode, json_of(proc)


def _checks(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["check"]: c for c in doc["hosts"]["gpu1"]["preflight"]["checks"]}


def _model(tmp: Path) -> Path:
    path = tmp / "Llama-tiny"
    path.mkdir()
    (path / "config.json").write_text((MODELS / "llama-mha" / "config.json").read_text())
    return path


def test_vllm_launch_over_ssh_in_an_env_without_vllm(fleet: Fleet, tmp_path: Path) -> None:
    """`invoke preflight -- vllm serve M --attention-backend FLASHMLA` on gpu1 (12.0), in the
    real sglang wheels' venv, which has no vllm: the env fails, vLLM's resolver says why it
    could not run, and FLASHMLA is refused from vLLM's own capability check."""
    code, doc = _preflight(
        fleet, tmp_path, str(sglang_venv()),
        "vllm", "serve", str(_model(tmp_path)), "--attention-backend", "FLASHMLA",
    )  # fmt: skip
    assert code == 2
    checks = _checks(doc)
    assert checks["serving_env"]["status"] == "fail"
    assert "vllm is not installed" in checks["serving_env"]["reason"]
    assert "vLLM's resolution could not run" in checks["vllm_resolution"]["reason"]
    attn = checks["attention_backend"]
    assert attn["status"] == "fail" and "capability.major in [9, 10]" in attn["reason"]
    assert "vllm 0.33.0 vllm/v1/attention/backends/mla/flashmla.py:73" in json.dumps(attn)


@pytest.mark.parametrize(
    ("packages", "site"),
    [
        # a vLLM env: no sglang, the stub still serves the env's site-packages
        ({"sglang": {"installed": False}, "vllm": {"installed": True, "location": "/e/site"},
          "torch": {"installed": True, "location": "/e/site"}}, "/e/site"),
        ({"sglang": {"installed": True, "location": "/s/site"},
          "torch": {"installed": True, "location": "/s/site"}}, "/s/site"),
        # an editable checkout elsewhere: the directory most distributions are in
        ({"vllm": {"installed": True, "location": "/src/vllm"},
          "torch": {"installed": True, "location": "/e/site"},
          "flashinfer-python": {"installed": True, "location": "/e/site"}}, "/e/site"),
        ({"vllm": {"installed": False}}, None),
    ],
)  # fmt: skip
def test_the_driver_stub_serves_the_envs_site_packages_whatever_the_engine(
    packages: dict[str, Any], site: str | None
) -> None:
    """The directory whose every compiled module's driver imports the stub defines is the
    env's, found from its installed distributions, not from one engine's package."""
    assert env_site(packages) == site


# --------------------------------------------------------------- with a real vLLM env


def _site() -> Path:
    assert REAL_ENV
    lib = Path(REAL_ENV).parent.parent / "lib"
    return sorted(lib.glob("python3*/site-packages"))[0]


@real_env
def test_the_tables_are_the_installed_vllms_own_code() -> None:
    """Each table row's path:line in the real env's vllm: the check it names is there."""
    for entry in VLLM_ATTENTION.values():
        path, lines = entry.source.rsplit(":", 1)
        first = int(lines.split("-")[0])
        text = (_site() / path).read_text().splitlines()[first - 1 : first + 6]
        assert any("supports_compute_capability" in t for t in text), (entry.name, text)
    for method, (need, source) in QUANT_MIN_CAPABILITY.items():
        path, lines = source.rsplit(":", 1)
        first = int(lines.split("-")[0])
        text = "\n".join((_site() / path).read_text().splitlines()[first - 1 : first + 1])
        assert "get_min_capability" in text and re.search(rf"return {need}\b", text), method


@real_env
def test_real_vllm_resolves_a_dense_model_and_refuses_a_backend_without_12_code(
    fleet: Fleet, tmp_path: Path
) -> None:
    """vLLM's own parser, engine config and selector in the real env, over SSH: the dense
    Llama config gets a backend that has 12.0 code; FLASHMLA is refused in vLLM's words."""
    assert REAL_ENV
    model = str(_model(tmp_path))
    code, doc = _preflight(fleet, tmp_path, REAL_ENV, "vllm", "serve", model, "--port", "18123")
    checks = _checks(doc)
    res = checks["vllm_resolution"]
    assert res["status"] == "pass", res
    backend = res["evidence"]["backends"]["attention_backend"]
    assert VLLM_ATTENTION[backend].accepts((12, 0))
    assert checks["attention_backend"]["status"] == "pass"
    code, doc = _preflight(
        fleet, tmp_path, REAL_ENV, "vllm", "serve", model, "--attention-backend", "FLASHMLA"
    )
    checks = _checks(doc)
    assert code == 2
    assert checks["vllm_resolution"]["status"] == "fail"
    assert "Selected backend" in checks["vllm_resolution"]["reason"]
    assert checks["attention_backend"]["status"] == "fail"
