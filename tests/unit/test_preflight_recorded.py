"""Preflight's verdicts on what sglang's own resolution really answered, recorded.

tests/fixtures/preflight/sglang-0.5.23-resolved.json holds real outputs, recorded by hand on
2026-12-03: sm120kit/remote/lib/in_target/server_args.py run by the real sglang 0.5.23
serving env (torch 2.14.1+cu130, lock sglang-0.5.23 cp311, host `stk`, no GPU: torch.cuda
faked as one 12.0 GPU, libcuda.so.1 the tool's stub) over the tiny configs of
tests/fixtures/models/ (an MHA Llama, an MLA DeepSeek-V2, a DSA DeepSeek-V3.2, GPT-OSS MXFP4,
a hybrid Qwen3-Next), and that env's distributions and module fatbins as the preflight probe
read them. CI has no such env: these table tests judge the recorded answers with the
shipped catalogue (locks/*/catalogue.toml). The real env run is
tests/real/test_preflight_recorded_real.py, skipped unless SM120KIT_SERVING_ENV names that
env's python.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sm120kit.packages.stack import catalogues
from sm120kit.preflight.launch import parse_launch
from sm120kit.preflight.verdicts import judge
from sm120kit.remote.preflight_probe import model_state

FIXTURES = Path(__file__).parent.parent / "fixtures"
MODELS = FIXTURES / "models"
RECORDED = json.loads((FIXTURES / "preflight" / "sglang-0.5.23-resolved.json").read_text())
FACTS: dict[str, Any] = {
    "gpu": {
        "present": True,
        "driver_version": "580.95.05",
        "gpus": [{"index": 0, "memory_mib": 32607, "memory_used_mib": 0, "processes": []}],
    }
}


def _argv(argv: list[str]) -> list[str]:
    return [str(MODELS / w[1:]) if w.startswith("@") else w for w in argv]


def _case(words: str) -> dict[str, Any]:
    for case in RECORDED["cases"]:
        if " ".join(case["argv"]) == words:
            return case
    raise KeyError(words)


def _verdict(words: str) -> dict[str, Any]:
    case = _case(words)
    argv = _argv(case["argv"])
    launch = parse_launch(["python", "-m", "sglang.launch_server", *argv])
    probe: dict[str, Any] = {"error": None, "python": "/env/bin/python", **RECORDED["env"]}
    probe["model"] = model_state(argv[1])
    probe["resolved"] = {"ran": True, "version": RECORDED["version"], "gpu": RECORDED["gpu"]}
    probe["resolved"]["cases"] = [case]
    return judge(launch, FACTS, probe, (12, 0), "serving env", catalogues())


def _statuses(verdict: dict[str, Any]) -> dict[str, str]:
    return {c["check"]: c["status"] for c in verdict["checks"]}


#: (the recorded launch, {check: status}) as preflight judges sglang's real answer.
TABLE = [
    # MHA: sglang's default on 12.0 is flashinfer (JIT); fa3 has no 12.0 SASS.
    ("--model-path @llama-mha", {"attention_backend": "pass", "sglang_resolution": "pass"}),
    (
        "--model-path @llama-mha --attention-backend fa3",
        {"attention_backend": "fail", "rule:fa3-no-sm120": "fail"},
    ),
    # On 12.x sglang's trtllm_mha runs flashinfer's FMHAv2 prefill and XQA decode (JIT), whose
    # arch gates (jit/attention/modules.py gen_fmha_v2_module [9, 12], jit/xqa.py [9, 10, 12])
    # admit 12.0: a pass quoting them (it was "unknown" when judged as trtllm-gen cubins).
    ("--model-path @llama-mha --attention-backend trtllm_mha", {"attention_backend": "pass"}),
    ("--model-path @gpt-oss-mxfp4 --attention-backend trtllm_mha", {"attention_backend": "pass"}),
    ("--model-path @llama-mha --fp8-gemm-backend cutlass", {"fp8_gemm_runner_backend": "pass"}),
    (
        "--model-path @llama-mha --fp8-gemm-backend deep_gemm",
        # sgl-deep-gemm 0.2.3.post2 ships SM120 kernel sources (JIT): the catalogue says so.
        {"fp8_gemm_runner_backend": "pass"},
    ),
    (
        "--model-path @llama-mha --fp4-gemm-backend flashinfer_trtllm",
        # flashinfer's trtllm-gen GEMM runner dispatches to sm100/103/107 cubins only.
        {"fp4_gemm_runner_backend": "fail"},
    ),
    (
        "--model-path @llama-mha --speculative-algorithm EAGLE --speculative-draft-model-path "
        "@llama-mha --speculative-draft-attention-backend fa3",
        {"speculative_draft_attention_backend": "fail", "attention_backend": "pass"},
    ),
    (
        "--model-path @llama-mha --speculative-algorithm EAGLE --speculative-draft-model-path "
        "@llama-mha --speculative-draft-attention-backend triton",
        {"speculative_draft_attention_backend": "pass"},
    ),
    # The flag's old spelling: sglang's own parser refuses it, and so does preflight.
    (
        "--model-path @llama-mha --fp8-gemm-runner-backend deep_gemm --quantization fp8",
        {"sglang_resolution": "fail"},
    ),
    # MLA: triton by default; flashmla / trtllm_mla / deep_gemm refused.
    ("--model-path @deepseek-v2-mla", {"attention_backend": "pass", "moe_backend": "skip"}),
    (
        "--model-path @deepseek-v2-mla --attention-backend flashmla",
        {"attention_backend": "fail", "rule:flashmla-no-sm120": "fail"},
    ),
    (
        "--model-path @deepseek-v2-mla --attention-backend trtllm_mla",
        {"attention_backend": "fail", "rule:trtllm-mla-sm120": "fail"},
    ),
    (
        "--model-path @deepseek-v2-mla --moe-runner-backend deep_gemm",
        # The rule was verified below 0.5.23 (whose files disprove it): a warning here.
        {"moe_backend": "pass", "rule:deep-gemm-sm120": "warn"},
    ),
    (
        "--model-path @deepseek-v2-mla --moe-runner-backend flashinfer_cutlass",
        {"moe_backend": "pass"},
    ),
    # DSA: sglang picks dsa with trtllm phases on 12.0; flashmla_sparse/_kv have no 12.0 code.
    (
        "--model-path @deepseek-v32-dsa",
        {
            "attention_backend": "skip",
            # sglang calls flashinfer with backend="trtllm-gen": its FMHA runner refuses 12.0.
            "dsa_prefill_backend": "fail",
            "dsa_decode_backend": "fail",
            "dsa_topk_backend": "pass",
            "dsa_paged_mqa_logits_backend": "pass",
        },
    ),
    (
        "--model-path @deepseek-v32-dsa --dsa-prefill-backend flashmla_sparse "
        "--dsa-decode-backend flashmla_kv",
        {"dsa_prefill_backend": "fail", "dsa_decode_backend": "fail"},
    ),
    (
        "--model-path @deepseek-v32-dsa --dsa-prefill-backend fa3 --dsa-decode-backend fa3",
        {"dsa_prefill_backend": "fail", "dsa_decode_backend": "fail"},
    ),
    (
        "--model-path @deepseek-v32-dsa --dsa-prefill-backend flashinfer_sparse_mla "
        "--dsa-decode-backend flashinfer_sparse_mla",
        # JIT kernels for 12.0, and sglang's own validator refuses them off GLM DSA
        # (kernels/ops/attention/flash_mla_sm120.py:678 _validate_flashinfer_sparse_mla_backend).
        {"dsa_prefill_backend": "pass", "dsa_decode_backend": "pass", "sglang_checks": "fail"},
    ),
    # GLM DSA (GlmMoeDsaForCausalLM): sglang 0.5.23 picks flashinfer_sparse_mla on 12.x.
    (
        "--model-path @glm-moe-dsa --kv-cache-dtype fp8_e4m3",
        {"dsa_prefill_backend": "pass", "dsa_decode_backend": "pass", "sglang_checks": "pass"},
    ),
    (
        "--model-path @glm-moe-dsa --kv-cache-dtype fp8_e4m3 --dsa-prefill-backend trtllm "
        "--dsa-decode-backend trtllm",
        {"dsa_prefill_backend": "fail", "sglang_checks": "fail"},
    ),
    # EAGLE's draft backend init calls the CUDA driver: the stub's error is "stopped", never
    # sglang's refusal (remote/lib/in_target/server_args.py _from_stub_driver).
    (
        "--model-path @llama-mha --speculative-algorithm EAGLE --speculative-draft-model-path "
        "@llama-mha",
        {"sglang_checks": "pass", "attention_backend": "pass"},
    ),
    (
        "--model-path @deepseek-v32-dsa --dsa-prefill-backend tilelang --dsa-decode-backend "
        "tilelang",
        # tilelang 0.1.12 is installed (the probe lists every dist; the 12-03 recording had no
        # "installed" list, so it read "not installed"); its fixed tiles on 12.x are undecided.
        {"dsa_prefill_backend": "unknown", "dsa_decode_backend": "unknown"},
    ),
    (
        "--model-path @deepseek-v32-dsa --dsa-paged-mqa-logits-backend cutedsl "
        "--dsa-topk-backend flashinfer",
        {"dsa_paged_mqa_logits_backend": "warn", "dsa_topk_backend": "pass"},
    ),
    (
        "--model-path @deepseek-v32-dsa --dsa-prefill-backend triton_sparse_mla "
        "--dsa-decode-backend triton",
        {"sglang_resolution": "fail"},
    ),
    # GPT-OSS: sglang's override gives triton attention and flashinfer_mxfp4 MoE on 12.0.
    ("--model-path @gpt-oss-mxfp4", {"attention_backend": "pass", "moe_backend": "pass"}),
    ("--model-path @gpt-oss-mxfp4 --attention-backend fa3", {"attention_backend": "fail"}),
    (
        "--model-path @gpt-oss-mxfp4 --moe-runner-backend flashinfer_trtllm",
        {"moe_backend": "fail"},
    ),
    # Hybrid linear attention.
    ("--model-path @qwen3-next-hybrid", {"attention_backend": "pass"}),
    (
        "--model-path @qwen3-next-hybrid --linear-attn-backend cutedsl",
        {"linear_attn_backend": "pass"},
    ),
    (
        "--model-path @qwen3-next-hybrid --mamba-backend flashinfer --attention-backend fa3",
        {"mamba_backend": "pass", "attention_backend": "fail"},
    ),
    (
        "--model-path @qwen3-next-hybrid --linear-attn-backend flashinfer",
        {"sglang_resolution": "fail"},
    ),
]


@pytest.mark.parametrize(("words", "expected"), TABLE, ids=[w for w, _ in TABLE])
def test_recorded_resolution_is_judged(words: str, expected: dict[str, str]) -> None:
    verdict = _verdict(words)
    got = _statuses(verdict)
    assert {k: got.get(k) for k in expected} == expected, verdict["checks"]
    assert verdict["resolved_by"] == "sglang 0.5.23 ServerArgs"
    # No verdict passes over an empty list (issue 32: "SASS " with nothing after it).
    for c in verdict["checks"]:
        assert "(SASS )" not in c["reason"]


def test_refusals_cite_the_module_and_where_it_was_read() -> None:
    verdict = _verdict("--model-path @deepseek-v2-mla --attention-backend flashmla")
    reason = next(c["reason"] for c in verdict["checks"] if c["check"] == "attention_backend")
    assert "flash_mla/_C_legacy.abi3.so (sgl-flash-mla 1.0.0" in reason
    assert "read from the catalogue locks/sglang-0.5.23/catalogue.toml" in reason
    mha = _verdict("--model-path @llama-mha --attention-backend trtllm_mha")
    attn = next(c for c in mha["checks"] if c["check"] == "attention_backend")
    assert "FMHAv2 prefill and XQA decode" in attn["reason"]
    assert "flashinfer/jit/attention/modules.py:2602 gen_fmha_v2_module" in attn["reason"]
    assert "flashinfer/jit/xqa.py:140 gen_xqa_module" in attn["reason"]
    assert "read from the catalogue locks/sglang-0.5.23/catalogue.toml" in attn["reason"]
    dsa = _verdict("--model-path @deepseek-v32-dsa")
    prefill = next(c for c in dsa["checks"] if c["check"] == "dsa_prefill_backend")
    # The gate as flashinfer 0.7.2 writes it, where, and the backend that serves 12.0.
    assert (
        "flashinfer-python 0.7.2 flashinfer/data/include/flashinfer/trtllm/fmha/fmhaRunner.cuh:"
        in prefill["reason"]
    )
    assert "mSM == kSM_100 || mSM == kSM_103 || mSM == kSM_107" in prefill["reason"]
    assert "tilelang" in prefill["fix"] and "flashinfer_sparse_mla" in prefill["fix"]


def test_the_recording_covers_every_model_with_and_without_flags() -> None:
    models = {c["argv"][1] for c in RECORDED["cases"]}
    assert models == {"@" + p.name for p in MODELS.iterdir()}
    for model in models:
        runs = [c for c in RECORDED["cases"] if c["argv"][1] == model]
        assert any(len(c["argv"]) == 2 for c in runs) and any(len(c["argv"]) > 2 for c in runs)


def test_cubin_sets_are_judged_with_the_catalogues_cubin_facts() -> None:
    """Cubin sets judged with the catalogue's facts (docs/catalogue.md "Cubin sets"): a set
    with no cubin for the arch fails naming it, one whose cubins are downloaded at run time is
    unknown (flashinfer-python 0.7.2's, in the shipped catalogue), one with a cubin there
    passes. The catalogue here is built in the test from the real types."""
    from sm120kit.preflight.from_catalogue import cubin_coverage
    from sm120kit.stack.catalogue import Catalogue, CubinSet, ReleaseFacts, WheelFacts

    sets = (
        CubinSet("TRTLLM_GEN_FMHA", "fmha/", False, archs=("sm_100f",), not_on={"12.0": "no"}),
        CubinSet("TRTLLM_GEN_GEMM", "gemm/", False, unknown={"12.0": "downloaded at run time"}),
        CubinSet("DEEPGEMM", "dg/", True, archs=("sm_120a",), archs_from="e_flags"),
    )
    wheel = WheelFacts("0.7.2", "flashinfer_python-0.7.2.whl", "0" * 64)
    release = ReleaseFacts("flashinfer-python", ("0.7.2",), (wheel,), cubin_sets=sets)
    cat = Catalogue((release,), source="c.toml")
    fi = "flashinfer-python"
    assert cubin_coverage(fi, "0.7.2", ["TRTLLM_GEN_FMHA"], "12.0", [cat]) == (
        "fail",
        "flashinfer-python 0.7.2 cubin sets (c.toml): TRTLLM_GEN_FMHA: no",
    )
    assert cubin_coverage(fi, "0.7.2", ["TRTLLM_GEN_GEMM"], "12.0", [cat])[0] == "unknown"
    assert cubin_coverage(fi, "0.7.2", ["DEEPGEMM"], "12.0", [cat]) == (
        "pass",
        "flashinfer-python 0.7.2 cubin sets (c.toml): DEEPGEMM: cubins for sm_120a (e_flags)",
    )
    assert cubin_coverage(fi, "0.7.2", ["OTHER"], "12.0", [cat])[0] == "unknown"
    # A version no catalogue read: unknown, never a pass.
    assert cubin_coverage(fi, "0.7.3", ["DEEPGEMM"], "12.0", [cat])[0] == "unknown"
    assert cubin_coverage(fi, None, ["DEEPGEMM"], "12.0", [cat]) == (
        "unknown",
        "flashinfer-python is not installed in the env",
    )
    # The shipped 0.5.23 catalogue: flashinfer 0.7.2's trtllm-gen FMHA is downloaded at run
    # time, so its coverage of 12.0 is unknown, and the verdict says where it comes from.
    status, why = cubin_coverage(fi, "0.7.2", ["TRTLLM_GEN_FMHA"], "12.0", catalogues())
    assert status == "unknown" and "cubins downloaded at run time from https://" in why


def test_a_backend_judged_by_its_gates_needs_every_gate_read() -> None:
    """`Backend.by_gates` (trtllm_mha on 12.x): a pass only when the catalogue read every gate
    for the installed version and they admit the GPU; a gate not read, or a version no
    catalogue read, leaves it undecided (None), never a pass. Built from the real types."""
    from sm120kit.preflight.from_catalogue import gate_admissions
    from sm120kit.stack.catalogue import ArchGate, Catalogue, ReleaseFacts, WheelFacts

    fmha = ArchGate(
        "m.py:gen_fmha_v2_module", "nvcc_majors", ("9.x", "12.x"), "m.py:1 g", "[9, 12]"
    )
    xqa = ArchGate("x.py:gen_xqa_module", "nvcc_majors", ("9.x", "10.x", "12.x"), "x.py:2 g", "t")
    wheel = WheelFacts("0.7.2", "flashinfer_python-0.7.2.whl", "0" * 64)
    both = ReleaseFacts("flashinfer-python", ("0.7.2",), (wheel,), arch_gates=(fmha, xqa))
    cat = Catalogue((both,), source="c.toml")
    gates = [("flashinfer-python", fmha.name), ("flashinfer-python", xqa.name)]
    got = gate_admissions(gates, {"flashinfer-python": "0.7.2"}, "12.0", [cat])
    assert got is not None and len(got) == 2 and "m.py:1 g: [9, 12] admits 12.0" in got[0]
    one = ReleaseFacts("flashinfer-python", ("0.7.2",), (wheel,), arch_gates=(fmha,))
    only_one = Catalogue((one,), source="c.toml")
    assert gate_admissions(gates, {"flashinfer-python": "0.7.2"}, "12.0", [only_one]) is None
    assert gate_admissions(gates, {"flashinfer-python": "0.7.3"}, "12.0", [cat]) is None
    assert gate_admissions(gates, {}, "12.0", [cat]) is None
