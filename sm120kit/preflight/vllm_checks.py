"""vLLM preflight as data: what vLLM 0.33.0's own code says about a device capability, and the
verdicts of a vLLM launch from it and from vLLM's own resolution in the env
(remote/lib/in_target/vllm_args.py).

Every fact below is read from the released wheel vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl
(paths inside it, lines of that release); docs/preflight.md "vLLM" lists them. A third engine
adds its Engine (engines.py) and tables like these; `judge_engine` is the same for every one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..remote.lib.cudaarch import cc_text
from .engines import VLLM
from .host import (
    CC,
    Check,
    check,
    gpu_count_check,
    gpu_memory_check,
    mem_fraction_check,
    model_check,
    port_check,
)
from .launch import Launch, server_args
from .sglang_checks import overall

VERSION = "0.33.0"
_B = "vllm/v1/attention/backends/"


@dataclass(frozen=True)
class VllmBackend:
    """One attention backend: which capabilities its ``supports_compute_capability`` accepts."""

    name: str
    accepts: Callable[[CC], bool]
    #: the accepting code, as vLLM writes it
    rule: str
    source: str


def _major(*majors: int) -> Callable[[CC], bool]:
    return lambda cc: cc[0] in majors


VLLM_ATTENTION: dict[str, VllmBackend] = {
    b.name: b
    for b in (
        VllmBackend(
            "FLASH_ATTN", lambda cc: cc >= (8, 0), "capability >= 8.0", _B + "flash_attn.py:458"
        ),
        VllmBackend(
            "FLASHINFER",
            lambda cc: (8, 0) <= cc <= (12, 1),
            "8.0 <= capability <= 12.1",
            _B + "flashinfer.py:696-703",
        ),
        VllmBackend("TRITON_ATTN", lambda cc: True, "True", _B + "triton_attn.py:405"),
        VllmBackend(
            "FLEX_ATTENTION",
            lambda cc: True,
            "True (AttentionBackend's default)",
            "vllm/v1/attention/backend.py:260",
        ),
        VllmBackend(
            "B12X",
            lambda cc: cc in ((12, 0), (12, 1)),
            "capability in (12.0, 12.1)",
            _B + "b12x.py:216-219",
        ),
        VllmBackend(
            "TRITON_FLASH_ATTN",
            _major(9),
            "capability.major == 9 (Hopper only)",
            _B + "triton_flash_attn.py:21-26",
        ),
        VllmBackend("TRITON_MLA", lambda cc: True, "True", _B + "mla/triton_mla.py:140"),
        VllmBackend(
            "FLASHINFER_MLA_SPARSE_SM120",
            _major(12),
            "capability.major == 12",
            _B + "mla/flashinfer_mla_sparse.py:192",
        ),
        VllmBackend(
            "FLASHINFER_MLA", _major(10), "capability.major == 10", _B + "mla/flashinfer_mla.py:220"
        ),
        VllmBackend(
            "CUTLASS_MLA", _major(10), "capability.major == 10", _B + "mla/cutlass_mla.py:65"
        ),
        VllmBackend(
            "TOKENSPEED_MLA", _major(10), "capability.major == 10", _B + "mla/tokenspeed_mla.py:125"
        ),
        VllmBackend(
            "FLASHINFER_MLA_SPARSE",
            _major(10),
            "capability.major == 10",
            _B + "mla/flashinfer_mla_sparse.py:105",
        ),
        VllmBackend(
            "FLASHMLA", _major(9, 10), "capability.major in [9, 10]", _B + "mla/flashmla.py:73"
        ),
        VllmBackend(
            "FLASHMLA_SPARSE",
            _major(9, 10),
            "capability.major in [9, 10]",
            _B + "mla/flashmla_sparse.py:203",
        ),
        VllmBackend(
            "FLASH_ATTN_MLA", _major(9), "capability.major == 9", _B + "mla/flashattn_mla.py:69"
        ),
        VllmBackend(
            "FLASH_ATTN_MLA_SPARSE",
            _major(9),
            "capability.major == 9",
            _B + "mla/flashattn_mla_sparse.py:82",
        ),
        VllmBackend(
            "FLASHINFER_MLA_SPARSE_SM90",
            _major(9),
            "capability.major == 9",
            _B + "mla/flashinfer_mla_sparse_sm90.py:189",
        ),
    )
}

#: What vLLM tries, in order, when no --attention-backend is given, on capability major 12
#: (vllm/platforms/cuda.py _get_backend_priorities: MLA l.134-138, otherwise l.166-179; the
#: first whose validate_configuration passes wins, get_valid_backends l.377-417).
DEFAULT_ORDER_12 = {
    "mla": ("TRITON_MLA", "FLASHINFER_MLA_SPARSE_SM120"),
    "mha": ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "TURBOQUANT"),
}
PRIORITY_SOURCE = "vllm/platforms/cuda.py:84-185 (_get_backend_priorities)"

_Q = "vllm/model_executor/layers/quantization/"
#: --quantization METHOD -> (get_min_capability, its source). vLLM refuses a method whose
#: minimum is above the GPU's (major*10+minor) in VllmConfig._get_quantization_config
#: (vllm/config/vllm.py:929-935).
QUANT_MIN_CAPABILITY: dict[str, tuple[int, str]] = {
    "auto_awq": (75, _Q + "auto_awq.py:233-234"),
    "auto_gptq": (60, _Q + "auto_gptq.py:182-183"),
    "experts_int8": (80, _Q + "experts_int8.py:42-43"),
    "fbgemm_fp8": (80, _Q + "fbgemm_fp8.py:66-67"),
    "fp8": (75, _Q + "fp8.py:146-147"),
    "fp_quant": (100, _Q + "fp_quant.py:63-64"),
    "humming": (75, _Q + "humming.py:167-168"),
    "modelopt": (80, _Q + "modelopt.py:449-450"),
    "modelopt_fp4": (75, _Q + "modelopt.py:772-773"),
    "moe_wna16": (70, _Q + "moe_wna16.py:110-111"),
    "mxfp4": (80, _Q + "mxfp4.py:71-72"),
    "torchao": (75, _Q + "torchao.py:160-161"),
}
QUANT_CHECK_SOURCE = "vllm/config/vllm.py:929-935"

#: vLLM 0.33.0 reads no VLLM_ATTENTION_BACKEND (no file of the wheel names it): the backend is
#: --attention-backend (vllm/engine/arg_utils.py:1114) or --attention-config's backend.
RETIRED_ENV = "VLLM_ATTENTION_BACKEND"

DISTRIBUTIONS = ("vllm", "torch", "flashinfer-python", "triton", "transformers")
RESOLVE_TIMEOUT = 300.0
FAKE_MEMORY_MIB = 32 * 1024


def probe_request(
    launch: Launch,
    python: str | None,
    cc: CC | None = None,
    resolve: bool = False,
    memory_mib: int | None = None,
) -> dict[str, Any]:
    """The preflight probe's arguments for a vLLM launch; with `resolve`, vLLM's own resolution
    runs in the env (remote/lib/in_target/vllm_args.py)."""
    out: dict[str, Any] = {
        "python": python,
        "dists": list(DISTRIBUTIONS),
        "modules": [],
        "port": launch.port,
        "host": launch.host,
        "model_path": launch.model_path,
    }
    if resolve:
        out["timeout"] = RESOLVE_TIMEOUT
        out["resolve"] = {
            "cases": [server_args(launch.words, VLLM.name)],
            "cc": list(cc) if cc else None,
            "memory_mib": memory_mib or FAKE_MEMORY_MIB,
            "resolver": VLLM.resolver,
        }
    return out


def env_check(probe: Mapping[str, Any], python_source: str) -> Check:
    """The env answers and holds vLLM."""
    if probe.get("error"):
        return check("serving_env", "fail", f"{python_source}: {probe['error']}")
    got = (probe.get("dists") or {}).get("vllm") or {}
    if not got.get("version"):
        return check(
            "serving_env",
            "fail",
            f"{python_source} {probe.get('python')}: vllm is not installed in it",
            None,
            "invoke provision with the host's stack: vllm, or --python PATH of a vLLM env",
        )
    return check("serving_env", "pass", f"{python_source}: vllm {got['version']}", got)


def backend_check(name: str | None, cc: CC | None, chosen_by: str) -> Check:
    """An attention backend against its supports_compute_capability (the table above)."""
    if not name or name == "None":
        return check("attention_backend", "skip", "no backend named or resolved")
    entry = VLLM_ATTENTION.get(name.upper())
    if entry is None or cc is None:
        why = "no target arch" if cc is None else f"vLLM {VERSION}'s table here has no {name}"
        return check("attention_backend", "unknown", f"{name} ({chosen_by}): {why}")
    evidence = {
        "backend": entry.name,
        "rule": entry.rule,
        "source": f"vllm {VERSION} {entry.source}",
    }
    if entry.accepts(cc):
        return check(
            "attention_backend",
            "pass",
            f"{entry.name} ({chosen_by}) accepts {cc_text(cc)}: {entry.rule} ({entry.source})",
            evidence,
        )
    order = DEFAULT_ORDER_12["mla" if "MLA" in entry.name else "mha"] if cc[0] == 12 else ()
    valid = [n for n in order if n in VLLM_ATTENTION and VLLM_ATTENTION[n].accepts(cc)]
    fix = "drop --attention-backend (vLLM then picks by " + PRIORITY_SOURCE + ")"
    if valid:
        fix += " or give one of: " + ", ".join(valid)
    return check(
        "attention_backend",
        "fail",
        f"{entry.name} ({chosen_by}) has no code for {cc_text(cc)}: vLLM {VERSION} "
        f"supports_compute_capability is {entry.rule} ({entry.source})",
        evidence,
        fix,
    )


def quantization_check(method: str | None, cc: CC | None) -> Check:
    """--quantization against its get_min_capability, as VllmConfig checks it."""
    if not method or method == "None":
        return check("quantization", "skip", "no quantization method")
    entry = QUANT_MIN_CAPABILITY.get(method)
    if entry is None or cc is None:
        why = "no target arch" if cc is None else f"vLLM {VERSION}'s table here has no {method}"
        return check("quantization", "unknown", f"{method}: {why}")
    need, source = entry
    have = cc[0] * 10 + cc[1]
    evidence = {"method": method, "min_capability": need, "source": f"vllm {VERSION} {source}"}
    if have >= need:
        return check(
            "quantization",
            "pass",
            f"{method}: minimum capability {need} <= {have} ({source})",
            evidence,
        )
    return check(
        "quantization",
        "fail",
        f"The quantization method {method} is not supported for the current GPU. Minimum "
        f"capability: {need}. Current capability: {have}. (vLLM {VERSION} {QUANT_CHECK_SOURCE}, "
        f"minimum from {source})",
        evidence,
        "a checkpoint in a method whose minimum capability is at most " + str(have),
    )


def resolution(probe: Mapping[str, Any]) -> dict[str, Any]:
    """What vLLM's own resolution said: {"by", "backends", "error", "reason", "gpu"}."""
    doc = probe.get("resolved")
    if not doc:
        return {"by": "the tool's tables (vLLM's resolution was not asked)", "backends": None}
    if not doc.get("ran"):
        why = doc.get("reason") or "no reason given"
        return {
            "by": f"the tool's tables (vLLM's resolution could not run: {why})",
            "backends": None,
            "reason": why,
        }
    case = (doc.get("cases") or [{}])[0]
    return {
        "by": f"vllm {doc.get('version')} engine config and attention selector",
        "backends": case.get("backends") or None,
        "error": case.get("error"),
        "after": case.get("after") or [],
        "gpu": doc.get("gpu"),
        "driver": doc.get("driver"),
    }


def resolution_check(res: Mapping[str, Any]) -> Check:
    """vLLM's answer as a check (fail: vLLM itself refuses the launch, its words quoted)."""
    if res.get("error"):
        return check(
            "vllm_resolution",
            "fail",
            f"resolved by: {res['by']}: {res['error']}",
            {"gpu": res.get("gpu")},
            "fix what vLLM names",
        )
    stopped = [a for a in res.get("after") or [] if a.get("status") == "stopped"]
    if res.get("backends") is None:
        status = "unknown" if stopped else "skip"
        detail = f": {stopped[0]['detail']}" if stopped else ""
        return check("vllm_resolution", status, f"resolved by: {res['by']}{detail}")
    chosen = ", ".join(f"{k}={v}" for k, v in sorted(res["backends"].items()))
    return check(
        "vllm_resolution",
        "pass",
        f"resolved by: {res['by']} ({res.get('gpu')}): {chosen}",
        {"backends": res["backends"], "gpu": res.get("gpu"), "driver": res.get("driver")},
    )


def judge(
    launch: Launch,
    facts: Mapping[str, Any],
    probe: Mapping[str, Any],
    cc: CC | None,
    python_source: str = "serving env",
    strict: bool = False,
) -> dict[str, Any]:
    """Every preflight verdict of a vLLM launch on one host (the shape verdicts.judge returns)."""
    res = resolution(probe)
    backends = res.get("backends") or {}
    checks = [env_check(probe, python_source), resolution_check(res)]
    chosen_by = res["by"] if backends.get("attention_backend") else "--attention-backend"
    name = backends.get("attention_backend") or launch.attention_backend
    if res.get("error") and launch.attention_backend:
        name, chosen_by = launch.attention_backend, "--attention-backend"
    checks.append(backend_check(name, cc, chosen_by))
    checks.append(quantization_check(backends.get("quantization") or launch.quantization, cc))
    checks += [
        gpu_count_check(launch, facts),
        gpu_memory_check(launch, facts),
        mem_fraction_check(launch, facts),
        port_check(probe),
        model_check(launch, probe),
    ]
    summary = overall(checks, strict)
    return {
        "ok": not summary["failed"],
        "verdict": summary["verdict"],
        "unknown": summary["unknown"],
        "arch": cc_text(cc) if cc else None,
        "engine": VLLM.name,
        "attention": {"backend": name, "how": chosen_by},
        "resolved_by": res["by"],
        "resolved": res.get("backends"),
        "checks": checks,
        "failed": summary["failed"],
    }
