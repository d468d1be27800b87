"""preflight's data (sm120kit/preflight/rules.py) checked against the real released files it
cites: the sglang 0.5.23, sglang-kernel 0.4.10 and flashinfer-python 0.7.2 wheels installed
--no-deps in a venv (tests/support/sglang_env.py). Nothing is simulated and nothing is
imported from sglang (it needs torch and a GPU): its sources are read and parsed, the
extension modules' fatbins read with the smoke probe's reader.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from sm120kit.preflight.rules import ATTENTION_BACKENDS, DEFAULT_ATTENTION, KINDS, RULES
from sm120kit.remote.lib.fatbin import device_targets
from tests.support.sglang_env import sglang_venv, site_packages


@pytest.fixture(scope="module")
def site() -> Path:
    """site-packages of the venv holding the real wheels."""
    return site_packages(sglang_venv())


def _text(site: Path, rel: str) -> str:
    return (site / rel).read_text(encoding="utf-8")


def _list_literal(source: str, name: str) -> list[str]:
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, list)
            return [str(v) for v in value]
    raise AssertionError(f"{name} not found")


def test_every_backend_sglang_accepts_is_in_the_table(site: Path) -> None:
    """ATTENTION_BACKEND_CHOICES and the registry's names are exactly the table's keys."""
    choices = _list_literal(
        _text(site, "sglang/srt/arg_groups/choices.py"), "ATTENTION_BACKEND_CHOICES"
    )
    registry = _text(site, "sglang/srt/layers/attention/attention_registry.py")
    registered = set(re.findall(r'@register_attention_backend\("([^"]+)"\)', registry))
    assert registered, "no @register_attention_backend in the registry"
    assert set(choices) == set(ATTENTION_BACKENDS), "table and sglang's choices differ"
    # Registered names are accepted choices (aliases registered or resolved elsewhere).
    assert registered <= set(choices)
    for name, entry in ATTENTION_BACKENDS.items():
        assert entry.kind in KINDS, name
        if entry.alias_of:
            assert entry.alias_of in ATTENTION_BACKENDS, name


def test_module_claims_match_the_wheels_sources(site: Path) -> None:
    """What the table says each 'so' backend imports, in sglang's and sgl_kernel's own code."""
    fa = _text(site, "sglang/srt/layers/attention/flashattention_backend.py")
    assert "from sgl_kernel.flash_attn import" in fa
    assert "from sgl_kernel import flash_ops" in _text(site, "sgl_kernel/flash_attn.py")
    mla = _text(site, "sglang/srt/layers/attention/flashmla_backend.py")
    assert "from sglang.kernels.ops.attention.flash_mla_interface import" in mla
    assert "import flash_mla\n" in _text(
        site, "sglang/kernels/ops/attention/flash_mla_interface.py"
    )
    assert "from sgl_kernel import flashmla_ops" in _text(site, "sgl_kernel/flash_mla.py")
    metadata = next(site.glob("sglang-0.5.23.dist-info")) / "METADATA"
    assert "Requires-Dist: sgl-flash-mla==1.0.0" in metadata.read_text()


def test_rule_archs_are_the_wheels_fatbins(site: Path) -> None:
    """The archs the FA3 and FlashMLA rules quote are the sglang-kernel 0.4.10 fatbins'."""
    flash_ops = next(site.glob("sgl_kernel/flash_ops.*.so"))
    flashmla_ops = next(site.glob("sgl_kernel/flashmla_ops.*.so"))
    assert device_targets(str(flash_ops))[:2] == (["sm_80", "sm_86", "sm_90a"], [])
    assert device_targets(str(flashmla_ops))[:2] == (["sm_90a", "sm_100f", "sm_103a"], [])
    rules = {r.id: r for r in RULES}
    assert "sm_80, sm_86, sm_90a only" in rules["fa3-no-sm120"].message
    assert "sm_90a, sm_100f, sm_103a only" in rules["flashmla-no-sm120"].message


def test_rule_quotes_are_in_sglang_and_flashinfer(site: Path) -> None:
    """The messages the rules quote are sglang 0.5.23's and flashinfer 0.7.2's own text."""
    registry = _text(site, "sglang/srt/layers/attention/attention_registry.py")
    assert "FlashAttention v3 Backend requires SM>=80 and SM<=90" in registry
    hook = _text(site, "sglang/srt/arg_groups/attention_hook.py")
    assert 'cfg.kv_cache_dtype == "fp8_e4m3"' in hook
    assert "fp8_e4m3 KV cache or skip-softmax." in hook
    overrides = _text(site, "sglang/srt/arg_groups/overrides.py")
    assert "CuteDSL MLA backend is only supported on Blackwell GPUs (SM100)" in overrides
    assert "TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x)" in overrides
    runner = _text(site, "flashinfer/data/include/flashinfer/trtllm/fmha/fmhaRunner.cuh")
    assert "mSM == kSM_100 || mSM == kSM_103 || mSM == kSM_107" in runner
    comm = "sglang/srt/distributed/device_communicators/"
    assert "_SUPPORTED_WORLD_SIZES = [2, 4, 6, 8]" in _text(site, comm + "custom_all_reduce.py")
    utils = _text(site, comm + "custom_all_reduce_utils.py")
    assert "if world_size > 2 and not full_nvlink:" in utils
    choices = _text(site, "sglang/srt/arg_groups/choices.py")
    assert '"hpc_ops",  # HPC-Ops (https://github.com/Tencent/hpc-ops), Hopper (SM90) only' in (
        choices
    )


def test_default_backend_for_sm120_is_sglangs(site: Path) -> None:
    """get_default_attn_backend on a GPU neither Hopper nor SM100 (12.x): flashinfer for MHA
    (triton with attention sinks), triton for MLA, read from its own source."""
    source = _text(site, "sglang/srt/arg_groups/model_override_base.py")
    start = source.index("def get_default_attn_backend")
    body = source[start : source.index("\ndef ", start + 10)]
    mha, mla = body.split("# MLA architecture")
    assert "has_flashinfer and not model_config.has_attention_sinks" in mha
    assert 'return "flashinfer"\n            return "triton"' in mha
    tail = mla[mla.rindex("else:") :]
    assert 'return "triton"' in tail
    assert DEFAULT_ATTENTION["mha"] == "flashinfer" and DEFAULT_ATTENTION["mla"] == "triton"
