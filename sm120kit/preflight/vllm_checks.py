"""The table judge: the verdicts of a launch of a table-judged engine (`Engine.verdicts ==
"tables"`, sm120kit/engines.py) from its own resolution in the env and its capability tables
(`Tables`, one per engine in `TABLES`); and vLLM's tables, what vLLM 0.33.0's own code says about
a device capability (its resolver: remote/lib/in_target/vllm_args.py).

Every vLLM fact below is read from the released wheel vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl
(paths inside it, lines of that release); docs/preflight.md "vLLM" lists them. A third engine
adds its Engine (sm120kit/engines.py) and a `Tables` here; the functions are the same for every
one (an engine without tables gets every backend and method "unknown").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..engines import VLLM, Engine, engine_named
from ..remote.lib.cudaarch import cc_text
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
from .verdicts import WARM_IDLE_S, resolution

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

RESOLVE_TIMEOUT = 300.0
FAKE_MEMORY_MIB = 32 * 1024


@dataclass(frozen=True)
class Tables:
    """One table-judged engine's capability tables, as its own code writes them."""

    #: the engine release the tables were read from
    version: str
    #: the engine as its project writes it, and its distribution (a verdict's words)
    title: str = "the engine"
    project: str = "engine"
    #: backend name -> which capabilities it accepts
    attention: Mapping[str, VllmBackend] = field(default_factory=dict)
    #: "mla"/"mha" -> what the engine tries, in order, with no backend given, on a 12.x GPU
    default_order_12: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    priority_source: str = ""
    #: quantization method -> (minimum capability major*10+minor, its source)
    quant: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    quant_check_source: str = ""
    #: the engine's own refusal of a method below its minimum ({method}, {need}, {have})
    quant_refusal: str = "{method} needs capability {need}, this GPU is {have}"


VLLM_TABLES = Tables(
    version=VERSION,
    title="vLLM",
    project="vllm",
    attention=VLLM_ATTENTION,
    default_order_12=DEFAULT_ORDER_12,
    priority_source=PRIORITY_SOURCE,
    quant=QUANT_MIN_CAPABILITY,
    quant_check_source=QUANT_CHECK_SOURCE,
    # VllmConfig._get_quantization_config's ValueError (vllm/config/vllm.py:929-935)
    quant_refusal="The quantization method {method} is not supported for the current GPU. "
    "Minimum capability: {need}. Current capability: {have}.",
)

#: engine name -> its tables (`register` a third engine's here, beside its Engine).
TABLES: dict[str, Tables] = {VLLM.name: VLLM_TABLES}


def tables_of(engine: Engine) -> Tables:
    """The engine's tables; empty ones (every backend "unknown") for an engine without."""
    return TABLES.get(engine.name) or Tables(version="?", title=engine.title, project=engine.name)


def probe_request(
    launch: Launch,
    python: str | None,
    cc: CC | None = None,
    resolve: bool = False,
    memory_mib: int | None = None,
) -> dict[str, Any]:
    """The preflight probe's arguments for a table-judged engine's launch; with `resolve`, the
    engine's own resolution runs in the env (its `Engine.resolver`), warm after the first."""
    engine = engine_named(launch.engine)
    out: dict[str, Any] = {
        "python": python,
        "dists": list(engine.probe_dists or (engine.distribution,)),
        "modules": [],
        "port": launch.port,
        "host": launch.host,
        "model_path": launch.model_path,
    }
    if resolve:
        out["timeout"] = RESOLVE_TIMEOUT
        out["resolve"] = {
            "cases": [server_args(launch.words, engine.name)],
            "cc": list(cc) if cc else None,
            "memory_mib": memory_mib or FAKE_MEMORY_MIB,
            "resolver": engine.resolver,
            "warm": WARM_IDLE_S,
        }
    return out


def env_check(probe: Mapping[str, Any], python_source: str, engine: Engine = VLLM) -> Check:
    """The env answers and holds the engine."""
    if probe.get("error"):
        return check("serving_env", "fail", f"{python_source}: {probe['error']}")
    got = (probe.get("dists") or {}).get(engine.distribution) or {}
    if not got.get("version"):
        return check(
            "serving_env",
            "fail",
            f"{python_source} {probe.get('python')}: {engine.distribution} is not installed in it",
            None,
            f"invoke provision with the host's stack: {engine.name} (or --engine {engine.name}), "
            f"or --python PATH of a {engine.title} env",
        )
    return check(
        "serving_env", "pass", f"{python_source}: {engine.distribution} {got['version']}", got
    )


def backend_check(
    name: str | None, cc: CC | None, chosen_by: str, tables: Tables = VLLM_TABLES
) -> Check:
    """An attention backend against its supports_compute_capability (the engine's table)."""
    if not name or name == "None":
        return check("attention_backend", "skip", "no backend named or resolved")
    entry = tables.attention.get(name.upper())
    title, project = tables.title, tables.project
    if entry is None or cc is None:
        why = (
            "no target arch"
            if cc is None
            else f"{title} {tables.version}'s table here has no {name}"
        )
        return check("attention_backend", "unknown", f"{name} ({chosen_by}): {why}")
    evidence = {
        "backend": entry.name,
        "rule": entry.rule,
        "source": f"{project} {tables.version} {entry.source}",
    }
    if entry.accepts(cc):
        return check(
            "attention_backend",
            "pass",
            f"{entry.name} ({chosen_by}) accepts {cc_text(cc)}: {entry.rule} ({entry.source})",
            evidence,
        )
    order = (
        tables.default_order_12.get("mla" if "MLA" in entry.name else "mha", ())
        if cc[0] == 12
        else ()
    )
    valid = [n for n in order if n in tables.attention and tables.attention[n].accepts(cc)]
    fix = "drop --attention-backend (" + title + " then picks by " + tables.priority_source + ")"
    if valid:
        fix += " or give one of: " + ", ".join(valid)
    return check(
        "attention_backend",
        "fail",
        f"{entry.name} ({chosen_by}) has no code for {cc_text(cc)}: {title} {tables.version} "
        f"supports_compute_capability is {entry.rule} ({entry.source})",
        evidence,
        fix,
    )


def quantization_check(method: str | None, cc: CC | None, tables: Tables = VLLM_TABLES) -> Check:
    """--quantization against its get_min_capability, as the engine's config checks it."""
    if not method or method == "None":
        return check("quantization", "skip", "no quantization method")
    entry = tables.quant.get(method)
    title, project = tables.title, tables.project
    if entry is None or cc is None:
        why = (
            "no target arch"
            if cc is None
            else f"{title} {tables.version}'s table here has no {method}"
        )
        return check("quantization", "unknown", f"{method}: {why}")
    need, source = entry
    have = cc[0] * 10 + cc[1]
    evidence = {
        "method": method,
        "min_capability": need,
        "source": f"{project} {tables.version} {source}",
    }
    if have >= need:
        return check(
            "quantization",
            "pass",
            f"{method}: minimum capability {need} <= {have} ({source})",
            evidence,
        )
    words = tables.quant_refusal.format(method=method, need=need, have=have)
    return check(
        "quantization",
        "fail",
        f"{words} ({title} {tables.version} {tables.quant_check_source}, minimum from {source})",
        evidence,
        "a checkpoint in a method whose minimum capability is at most " + str(have),
    )


def resolution_check(res: Mapping[str, Any], engine: Engine = VLLM) -> Check:
    """The engine's answer as a check (fail: the engine itself refuses the launch, its words
    quoted)."""
    name = f"{engine.name}_resolution"
    if res.get("error"):
        return check(
            name,
            "fail",
            f"resolved by: {res['by']}: {res['error']}",
            {"gpu": res.get("gpu")},
            f"fix what {engine.title} names",
        )
    stopped = [a for a in res.get("after") or [] if a.get("status") == "stopped"]
    if not res.get("backends"):
        status = "unknown" if stopped else "skip"
        detail = f": {stopped[0]['detail']}" if stopped else ""
        return check(name, status, f"resolved by: {res['by']}{detail}")
    chosen = ", ".join(f"{k}={v}" for k, v in sorted(res["backends"].items()))
    return check(
        name,
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
    """Every preflight verdict of a table-judged engine's launch on one host (the shape
    verdicts.judge returns)."""
    engine = engine_named(launch.engine)
    tables = tables_of(engine)
    res = resolution(probe, engine)
    backends = res.get("backends") or {}
    checks = [env_check(probe, python_source, engine), resolution_check(res, engine)]
    chosen_by = res["by"] if backends.get("attention_backend") else "--attention-backend"
    name = backends.get("attention_backend") or launch.attention_backend
    if res.get("error") and launch.attention_backend:
        name, chosen_by = launch.attention_backend, "--attention-backend"
    checks.append(backend_check(name, cc, chosen_by, tables))
    checks.append(
        quantization_check(backends.get("quantization") or launch.quantization, cc, tables)
    )
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
        "engine": engine.name,
        "attention": {"backend": name, "how": chosen_by},
        "resolved_by": res["by"],
        "resolved": res.get("backends"),
        "checks": checks,
        "failed": summary["failed"],
    }
