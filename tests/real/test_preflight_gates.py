"""Arch gates read from the released code (issue 44 class 1): the readers of
sm120kit/stack/catalogue_gates.py over the real flashinfer-python 0.7.2, sglang 0.5.23 and
sgl-deep-gemm 0.2.3.post2 wheels (sglang 0.5.23's lock; read once per session), the shipped
catalogue those readers made, and preflight's refusal of a backend whose path a gate of the
installed release refuses. The reader tables also vary synthetic source text. The real
serving-env run is skipped unless SM120KIT_SERVING_ENV names that env's python (CI has none);
only the GPU is simulated there (the probe's faked 12.0 device and driver stub).
"""

from __future__ import annotations

import ast
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest

from sm120kit.packages.stack import catalogues
from sm120kit.preflight.from_catalogue import gate_refusals
from sm120kit.preflight.rules import (
    ATTENTION_BACKENDS,
    FIELD_TABLES,
    MOE_BACKENDS,
)
from sm120kit.stack.catalogue import ArchGate, Catalogue
from sm120kit.stack.catalogue_gates import (
    arch_gates,
    cpp_gates,
    kernel_source_gates,
    python_gates,
)
from tests.support.real_wheels import real_wheel

FI = ("flashinfer-python", "0.7.2", "flashinfer_python-0.7.2-py3-none-any.whl")
SGLANG = ("sglang", "0.5.23", "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl")
DEEP_GEMM = ("sgl-deep-gemm", "0.2.3.post2", "sgl_deep_gemm-0.2.3.post2-py3-none-manylinux2014_x86_64.whl")  # fmt: skip
FMHA = "flashinfer/data/include/flashinfer/trtllm/fmha/fmhaRunner.cuh:TllmGenFmhaRunner"
BMM = "flashinfer/data/csrc/trtllm_batched_gemm_runner.cu:isArchCompatible"
FP8_SGLANG = (
    "sglang/srt/layers/quantization/fp8_utils.py:_dispatch_explicit_backend:"
    "--fp8-gemm-backend=flashinfer_trtllm"
)


@pytest.fixture(scope="session")
def read() -> dict[str, tuple[ArchGate, ...]]:
    """The gates of each real wheel, read by the catalogue's reader (once)."""
    out = {}
    for dist, version, name in (FI, SGLANG, DEEP_GEMM):
        with zipfile.ZipFile(real_wheel(dist, version, name)) as zf:
            out[dist] = arch_gates(zf, dist, version, ("12.0",))
    return out


def _shipped() -> Catalogue:
    return next(c for c in catalogues() if "sglang-0.5.23" in c.source)


def test_the_shipped_catalogue_holds_the_gates_the_wheels_hold(
    read: dict[str, tuple[ArchGate, ...]],
) -> None:
    """What the reader gets from the real wheels is what locks/sglang-0.5.23 records."""
    cat = _shipped()
    for dist, version, _name in (FI, SGLANG, DEEP_GEMM):
        facts = cat.lookup(dist, version).facts
        assert facts is not None and facts.arch_gates == read[dist], dist


@pytest.mark.parametrize(
    ("dist", "name", "archs", "admits_12"),
    [
        # flashinfer 0.7.2: the trtllm-gen FMHA runner's constructor and the batched-GEMM
        # runner's dispatch admit SM100/103/107 only; its SM120 FMHAv2 module is for 12.x.
        ("flashinfer-python", FMHA, ("10.0", "10.3", "10.7"), False),
        ("flashinfer-python", BMM, ("10.0", "10.3", "10.7"), False),
        (
            "flashinfer-python",
            "flashinfer/jit/gemm/core.py:_trtllm_gen_gemm_nvcc_flags",
            ("10.x",),
            False,
        ),
        (
            "flashinfer-python",
            "flashinfer/jit/attention/modules.py:gen_trtllm_fmha_v2_sm120_module",
            ("12.x",),
            True,
        ),
        # sglang 0.5.23's own refusal of --fp8-gemm-backend=flashinfer_trtllm off SM100, and
        # its explicit cutlass FP8 GEMM, allowed on SM120 only.
        ("sglang", FP8_SGLANG, ("10.x",), False),
        (
            "sglang",
            "sglang/srt/layers/quantization/fp8_utils.py:_dispatch_explicit_backend:"
            "--fp8-gemm-backend=cutlass",
            ("12.x",),
            True,
        ),
        # sgl-deep-gemm 0.2.3.post2 has SM120 kernels (JIT sources per arch).
        (
            "sgl-deep-gemm",
            "deep_gemm/include/deep_gemm/impls:sm*_*",
            ("9.0", "10.0", "12.0"),
            True,
        ),
    ],
)
def test_gates_read_from_the_real_wheels(
    read: dict[str, tuple[ArchGate, ...]],
    dist: str,
    name: str,
    archs: tuple[str, ...],
    admits_12: bool,
) -> None:
    gate = next(g for g in read[dist] if g.name == name)
    assert gate.archs == archs
    assert gate.admits("12.0") is admits_12
    assert ("12.0" in gate.not_on) is not admits_12
    path, _, rest = gate.source.partition(":")
    assert (
        name.startswith(path) and rest.split(" ", 1)[0].isdigit() or gate.kind == "kernel_sources"
    )


def test_the_fmha_gate_quotes_flashinfers_own_check(read: dict[str, tuple[ArchGate, ...]]) -> None:
    gate = next(g for g in read["flashinfer-python"] if g.name == FMHA)
    assert gate.text == (
        'FLASHINFER_CHECK(mSM == kSM_100 || mSM == kSM_103 || mSM == kSM_107, "Unsupported '
        'architecture")'
    )
    assert gate.source.startswith(
        "flashinfer/data/include/flashinfer/trtllm/fmha/fmhaRunner.cuh:"
    ) and gate.source.endswith(" TllmGenFmhaRunner")


def test_every_gate_a_backend_names_is_in_the_release_it_was_read_in() -> None:
    """Each rules.py Backend.gates name exists in the shipped catalogue for the locked
    version (a renamed function would otherwise refuse nothing, silently)."""
    cat = _shipped()
    locked = {"flashinfer-python": "0.7.2", "sglang": "0.5.23"}
    tables = [ATTENTION_BACKENDS, MOE_BACKENDS, *(t for _l, t, _w in FIELD_TABLES.values())]
    named = {g for table in tables for entry in table.values() for g in entry.gates}
    assert named, "no backend names a gate"
    for dist, name in named:
        facts = cat.lookup(dist, locked[dist]).facts
        assert facts is not None and facts.gate(name) is not None, name
        assert not facts.gate(name).admits("12.0"), name  # type: ignore[union-attr]


def test_sglang_calls_flashinfer_trtllm_gen_on_the_dsa_trtllm_path() -> None:
    """The premise of the DSA trtllm verdict, read from sglang 0.5.23's wheel: its
    _forward_trtllm passes backend="trtllm-gen" (so flashinfer's own "auto", which would pick
    its SM120 sparse kernel, never runs), and its 12.x default for an FP8 KV cache is trtllm."""
    with zipfile.ZipFile(real_wheel(*SGLANG)) as zf:
        dsa = ast.parse(zf.read("sglang/srt/layers/attention/dsa_backend.py"))
        overrides = zf.read("sglang/srt/arg_groups/overrides.py").decode()
    func = next(
        n for n in ast.walk(dsa) if isinstance(n, ast.FunctionDef) and n.name == "_forward_trtllm"
    )
    backends = [
        k.value.value
        for n in ast.walk(func)
        if isinstance(n, ast.Call)
        for k in n.keywords
        if k.arg == "backend" and isinstance(k.value, ast.Constant)
    ]
    assert backends == ["trtllm-gen"]
    assert 'default = "trtllm" if major >= 10 else "flashmla_kv"' in overrides


@pytest.mark.parametrize(
    ("versions", "arch", "refused"),
    [
        ({"flashinfer-python": "0.7.2"}, "12.0", 1),
        ({"flashinfer-python": "0.7.2"}, "10.0", 0),
        ({"flashinfer-python": "0.7.2"}, "12.1", 1),
        # A version no catalogue read, or nothing installed: the gate refuses nothing here.
        ({"flashinfer-python": "0.7.3"}, "12.0", 0),
        ({"flashinfer-python": None}, "12.0", 0),
    ],
)
def test_gate_refusals_from_the_shipped_catalogue(
    versions: dict[str, Any], arch: str, refused: int
) -> None:
    lines = gate_refusals([("flashinfer-python", FMHA)], versions, arch, [_shipped()])
    assert len(lines) == refused
    if lines:
        assert "admits 10.0, 10.3, 10.7 only, not " + arch in lines[0] or arch != "12.0"
        assert "read from the catalogue" in lines[0]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ('  FOO_CHECK(mSM == kSM_90 || mSM == kSM_100,\n   "Unsupported architecture");', ("9.0", "10.0")),
        ('TVM_FFI_CHECK(sm == 100 || sm == 103, "Unsupported architecture");', ("10.0", "10.3")),
        # No SM constant in the condition: not an arch gate.
        ('FLASHINFER_CHECK(ok, "Unsupported architecture");', None),
        ('throw std::runtime_error("Unsupported architecture");', None),
    ],
)  # fmt: skip
def test_cpp_check_reader(text: str, found: tuple[str, ...] | None) -> None:
    gates = cpp_gates("pkg/x.cuh", "class Runner {\n public:\n  Runner() {\n" + text + "\n}};")
    assert (gates[0].archs if gates else None) == found
    if gates:
        assert gates[0].name == "pkg/x.cuh:Runner" and gates[0].source == "pkg/x.cuh:4 Runner"


def test_cpp_dispatch_reader() -> None:
    text = (
        "bool isArchCompatible(int v, Arch a) {\n  switch (a) {\n    case A: return v == 100;\n"
        "    case B: return v == 100 || v == 121;\n  }\n}\n"
    )
    (gate,) = cpp_gates("c.cu", text)
    assert (gate.kind, gate.archs, gate.source) == (
        "dispatch",
        ("10.0", "12.1"),
        "c.cu:1 isArchCompatible",
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "def gen():\n    return ctx.get_nvcc_flags_list(supported_major_versions=[10, 11])\n",
            [("p.py:gen", ("10.x", "11.x"))],
        ),
        (
            "def f(b):\n    if not (get_platform().is_sm100 and ok):\n"
            "        raise RuntimeError('needs --x-backend=y on SM100')\n",
            [("p.py:f:--x-backend=y", ("10.x",))],
        ),
        # A raise that names no flag, or a test that is not negated: not read as a gate.
        ("def f():\n    if not is_sm100():\n        raise RuntimeError('no')\n", []),
        ("def f():\n    if is_sm120:\n        raise RuntimeError('bad --x')\n", []),
    ],
)
def test_python_gate_readers(source: str, expected: list[tuple[str, tuple[str, ...]]]) -> None:
    assert [(g.name, g.archs) for g in python_gates("p.py", source.encode())] == expected


def test_kernel_sources_skip_vendored_headers() -> None:
    names = [
        "pkg/include/impls/sm90_gemm.cuh",
        "pkg/include/impls/sm120_gemm.cuh",
        "pkg/include/impls/sm120_attn.cu",
        "pkg/include/cutlass/arch/sm120_mma.cuh",
        "pkg/include/impls/readme.md",
    ]
    (gate,) = kernel_source_gates(names)
    assert gate.name == "pkg/include/impls:sm*_*" and gate.archs == ("9.0", "12.0")
    assert gate.text == "per-arch kernel sources: sm90_* 1, sm120_* 2"


@pytest.mark.skipif(
    not os.environ.get("SM120KIT_SERVING_ENV"),
    reason="needs a real sglang 0.5.23 serving env: set SM120KIT_SERVING_ENV to its python",
)
@pytest.mark.parametrize(
    "flags",
    [
        ["--dsa-prefill-backend", "trtllm", "--dsa-decode-backend", "trtllm"],
        # No DSA flag, an FP8 KV cache: sglang's own 12.x choice is trtllm for both phases.
        ["--kv-cache-dtype", "fp8_e4m3"],
    ],
    ids=["explicit", "fp8-kv-default"],
)
def test_real_env_refuses_dsa_trtllm(flags: list[str]) -> None:
    """Real: the preflight probe runs in this process against the real env (its own
    interpreter lists its distributions, reads the modules' fatbins and runs sglang 0.5.23's
    argument resolution for a faked 12.0 GPU); the verdict refuses both DSA phases quoting
    flashinfer's gate, with the backend that serves 12.0."""
    from sm120kit.preflight.launch import parse_launch
    from sm120kit.preflight.verdicts import judge, probe_request
    from sm120kit.remote.preflight_probe import probe

    model = Path(__file__).parent.parent / "fixtures" / "models" / "deepseek-v32-dsa"
    words = ["python", "-m", "sglang.launch_server", "--model-path", str(model), *flags]
    launch = parse_launch(words)
    request = probe_request(launch, os.environ["SM120KIT_SERVING_ENV"], (12, 0), resolve=True)
    request["timeout"] = 900
    doc = probe(request)
    facts = {"gpu": {"present": True, "driver_version": "580.95.05", "gpus": [
        {"index": 0, "memory_mib": 32607, "memory_used_mib": 0, "processes": []}]}}  # fmt: skip
    verdict = judge(launch, facts, doc, (12, 0), "serving env", catalogues())
    by = {c["check"]: c for c in verdict["checks"]}
    assert by["sglang_resolution"]["status"] == "pass", by["sglang_resolution"]
    assert verdict["resolved"]["dsa_decode_backend"] == "trtllm"
    for phase in ("dsa_prefill_backend", "dsa_decode_backend"):
        if verdict["resolved"][phase] != "trtllm":
            continue
        got = by[phase]
        assert got["status"] == "fail", got
        assert "fmhaRunner.cuh" in got["reason"] and "kSM_100" in got["reason"]
        assert "tilelang" in got["fix"]
    assert not verdict["ok"]


@pytest.mark.parametrize(
    ("version", "arch", "status"),
    [
        ("0.2.3.post2", "12.0", "pass"),  # sm120_*.cuh in the real wheel: a JIT pass
        ("0.2.3.post2", "11.0", "fail"),  # no sm110 sources
        ("0.2.4", "12.0", None),  # a version no catalogue read: the module judges it
        (None, "12.0", None),  # not installed: the module check says so
    ],
)
def test_deep_gemm_is_judged_by_its_kernel_sources(
    version: str | None, arch: str, status: str | None
) -> None:
    from sm120kit.preflight.from_catalogue import kernel_sources
    from sm120kit.preflight.rules import DEEP_GEMM_KERNELS

    got = kernel_sources(DEEP_GEMM_KERNELS, {"sgl-deep-gemm": version}, arch, [_shipped()])
    assert (got[0] if got else None) == status
    if got and status == "pass":
        assert "deep_gemm/include/deep_gemm/impls/sm*_*" in got[1] and "sm120_* 9" in got[1]
