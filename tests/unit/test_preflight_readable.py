"""Issue 44 classes 6 and 7: preflight judges "installed" from the env's own distribution
listing, and its output says each thing once, with a fix, and only the fields that decide.

Table tests over real files written here (a torch/version.py as torch 2.14.1's wheel generates
it), the real verdict functions and the real rich console; the recorded corpus resolution
(tests/fixtures/preflight/public-corpus-resolved.json, the real sglang 0.5.23 env's answer)
where a whole verdict is needed. The env-gated half is
tests/real/test_preflight_corpus_real.py::test_real_serving_env_resolves_the_corpus_like_the_recording
(the real env's listing holds tilelang 0.1.12, which the old fixed list did not ask for).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from sm120kit.output import checks as out_checks
from sm120kit.output import report
from sm120kit.preflight.fixes import is_installed
from sm120kit.preflight.host import stack_check
from sm120kit.preflight.rules import FIELD_TABLES
from sm120kit.preflight.verdicts import backend_verdict
from sm120kit.remote.preflight_probe import torch_cuda
from tests.support.public_corpus import RECORDED, load, verdict

RECORDING = json.loads(RECORDED.read_text())
REPORTS = {r.id: r for r in load()}
DSA_PREFILL = FIELD_TABLES["dsa_prefill_backend"][1]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # torch 2.14.1's generated torch/version.py (the PyPI wheel: no +cu130 tag).
        ("__version__ = '2.14.1'\ndebug = False\ncuda: Optional[str] = '13.0'\n", "13.0"),
        ("cuda = '12.8'\n", "12.8"),
        ('cuda: Optional[str] = "12.9"\n', "12.9"),
        ("cuda: Optional[str] = None\nhip = None\n", "cpu"),
        ("hip: Optional[str] = '6.2'\n", None),
        (None, None),
    ],
)
def test_torch_cuda_is_read_from_the_dists_file(
    tmp_path: Path, text: str | None, want: str | None
) -> None:
    if text is not None:
        (tmp_path / "torch").mkdir()
        (tmp_path / "torch" / "version.py").write_text(text)
    assert torch_cuda(str(tmp_path)) == want


def _sglang(requires: list[str]) -> dict[str, Any]:
    return {"installed": True, "version": "0.5.23", "requires": requires}


@pytest.mark.parametrize(
    ("torch", "cuda", "shown"),
    [
        ("2.14.1", "13.0", "torch 2.14.1 (CUDA 13.0)"),
        ("2.9.1+cu128", None, "torch 2.9.1+cu128 (CUDA 12.8)"),
        ("2.14.1", None, "torch 2.14.1 (its CUDA version not read)"),
    ],
)
def test_kernel_stack_never_says_cuda_none(torch: str, cuda: str | None, shown: str) -> None:
    dists = {"sglang": _sglang([]), "torch": {"installed": True, "version": torch}}
    if cuda:
        dists["torch"]["cuda"] = cuda
    verdict_ = stack_check({"dists": dists}, {"gpu": {"driver_version": "580.95.05"}}, (12, 0))
    assert shown in verdict_["reason"] and "CUDA None" not in verdict_["reason"]


def test_a_torch_build_without_cuda_read_from_version_py_fails() -> None:
    dists = {"sglang": _sglang([]), "torch": {"installed": True, "version": "2.14.1"}}
    dists["torch"]["cuda"] = "cpu"
    got = stack_check({"dists": dists}, {"gpu": {"driver_version": "580.95.05"}}, (12, 0))
    assert got["status"] == "fail" and "CPU build" in got["reason"]


TILELANG_REQ = ["tilelang==0.1.12", "flashinfer_python[cu13]==0.7.2"]


@pytest.mark.parametrize(
    ("installed", "requires", "status", "fix_has", "fix_lacks"),
    [
        # Locked and installed, outside the names the probe asks one by one: not refused (on
        # 12.0 "unknown": TileLang's fixed DSA tiles are not decidable from the files).
        ({"tilelang": "0.1.12", "flashinfer-python": "0.7.2"}, TILELANG_REQ, "unknown", None, None),
        # Missing, and sglang's own Requires-Dist names it: its dependencies are broken.
        (
            {"flashinfer-python": "0.7.2"},
            TILELANG_REQ,
            "fail",
            "sglang 0.5.23 requires tilelang==0.1.12 (its Requires-Dist)",
            "pip install tilelang",
        ),
        # Missing and not sglang's dependency (an extra's is not): installing it is the fix,
        # or a backend the env can run.
        (
            {"flashinfer-python": "0.7.2"},
            ['tilelang==0.1.9; extra == "dev"'],
            "fail",
            "pip install tilelang into the env, or --dsa-prefill-backend flashinfer_sparse_mla",
            "requires",
        ),
    ],
)
def test_missing_is_judged_from_the_envs_listing(
    installed: dict[str, str],
    requires: list[str],
    status: str,
    fix_has: str | None,
    fix_lacks: str | None,
) -> None:
    probe = {"dists": {"sglang": _sglang(requires)}, "installed": installed}
    got = backend_verdict("dsa_prefill", "tilelang", DSA_PREFILL, probe, (12, 0))
    assert got["status"] == status, got
    if fix_has:
        assert fix_has in got["fix"]
    if fix_lacks:
        assert fix_lacks not in got["fix"]


def test_without_a_listing_the_per_name_answer_decides() -> None:
    """A probe of an older tool (no ``installed``) falls back to its per-name answers."""
    assert is_installed({"dists": {"tilelang": {"installed": True}}}, "tilelang")
    assert not is_installed({"dists": {}}, "tilelang")
    assert is_installed({"installed": {"flashinfer-python": "0.7.2"}}, "flashinfer_python")


def test_the_recorded_env_lists_tilelang_and_the_dsa_tilelang_launch_is_not_refused() -> None:
    assert RECORDING["env"]["installed"]["tilelang"] == "0.1.12"
    assert "tilelang" not in RECORDING["env"]["dists"]  # the fixed list never asked for it
    result = verdict(REPORTS["sglang-26087-glm51-dsa-tilelang"], RECORDING)
    prefill = next(c for c in result["checks"] if c["check"] == "dsa_prefill_backend")
    # Not refused: installed, and undecided on 12.0 (its tiles, sgl-project/sglang#37105).
    assert prefill["status"] == "unknown" and "sglang#37105" in prefill["reason"], prefill


@pytest.mark.parametrize(
    ("report", "check", "fix_has", "fix_lacks"),
    [
        (
            "sglang-26087-glm51-dsa-flashmla-sparse",
            "dsa_prefill_backend",
            "--dsa-prefill-backend flashinfer_sparse_mla",
            "triton",
        ),
        ("sglang-26087-glm51-dsa-aiter", "dsa_decode_backend", "--dsa-decode-backend", "triton"),
        ("sglang-26087-glm51-dsa-fa3", "dsa_prefill_backend", "flashinfer_sparse_mla", None),
    ],
)
def test_dsa_refusals_name_a_backend_that_serves(
    report: str, check: str, fix_has: str, fix_lacks: str | None
) -> None:
    result = verdict(REPORTS[report], RECORDING)
    got = next(c for c in result["checks"] if c["check"] == check)
    assert got["status"] == "fail" and fix_has in (got["fix"] or ""), got
    if fix_lacks:
        assert fix_lacks not in got["fix"]


@pytest.mark.parametrize(
    ("report", "shown", "hidden"),
    [
        (
            "sglang-17880-dsv31-nvfp4-trtllm",
            ["attention_backend=trtllm_mla", "moe_runner_backend=flashinfer_trtllm"],
            ["sampling_backend", "mamba_backend", "dsv4_attn_backend"],
        ),
        (
            "sglang-26087-glm51-dsa-trtllm-bf16",
            ["dsa_prefill_backend=trtllm", "dsa_decode_backend=trtllm"],
            ["sampling_backend", "linear_attn_backend", "speculative_dsa_topk_backend"],
        ),
    ],
)
def test_resolution_line_names_the_deciding_backends(
    report: str, shown: list[str], hidden: list[str]
) -> None:
    result = verdict(REPORTS[report], RECORDING)
    res = next(c for c in result["checks"] if c["check"] == "sglang_resolution")
    for field in shown:
        assert field in res["reason"]
    for field in hidden:
        assert field not in res["reason"]
        assert field in res["evidence"]["backends"]  # --json keeps every field
    assert "more fields in --json" in res["reason"]


class _Host:
    def __init__(self, doc: dict[str, Any], error: str | None) -> None:
        self.data = {"preflight": doc}
        self.error = error
        self.status = "failed"


def _rendered(doc: dict[str, Any]) -> str:
    console = Console(record=True, width=400)
    out_checks._render_preflight_host(console, "gpu1", _Host(doc, None))
    return console.export_text()


@pytest.mark.parametrize(
    "report", ["sglang-26087-glm51-dsa-aiter", "sglang-17880-dsv31-nvfp4-trtllm"]
)
def test_each_reason_is_printed_once(report: str) -> None:
    result = verdict(REPORTS[report], RECORDING)
    text = _rendered(result)
    for c in result["checks"]:
        if c["status"] == "fail":
            assert text.count(c["reason"][:80]) <= 1, c["check"]
            assert f"FAILED {c['check']}: fix " in text
    # The recap names the failed checks instead of a third copy of their reasons.
    host = _Host(result, "; ".join(result["failed"]))
    line = report_error_line(host)
    assert line.startswith("preflight refused the launch: ")
    assert all(c["reason"] not in line for c in result["checks"] if c["status"] == "fail")


def test_a_repeated_reason_points_at_its_first_row() -> None:
    doc = {
        "checks": [
            {"check": "a", "status": "fail", "reason": "same words", "fix": "x"},
            {"check": "b", "status": "fail", "reason": "same words", "fix": "y"},
        ],
        "failed": ["a: same words", "b: same words"],
    }
    text = _rendered(doc)
    assert text.count("same words") == 1 and "(as a)" in text


def report_error_line(host: _Host) -> str:
    return report._error_line(host)


def test_other_errors_reach_the_recap_whole() -> None:
    host = _Host({"failed": ["a: x"]}, "ssh: connection refused")
    assert report_error_line(host) == "ssh: connection refused"
