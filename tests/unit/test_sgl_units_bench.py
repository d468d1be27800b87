"""bench/sgl_units.py's own arithmetic: the SM120-only command and the whole-build projection.

The benchmark itself compiles real sgl-kernel units for many minutes and is run by hand
(docs/benchmarks.md); these tests check only the parts that need no compiler.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "sgl_units.py"
_spec = importlib.util.spec_from_file_location("sgl_units", BENCH)
assert _spec and _spec.loader
sgl_units = importlib.util.module_from_spec(_spec)
sys.modules["sgl_units"] = sgl_units
_spec.loader.exec_module(sgl_units)

UPSTREAM = [
    "nvcc",
    "-O3",
    "-gencode=arch=compute_90,code=sm_90",
    "--threads=1",
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_120a,code=sm_120a",
    "--compress-mode=size",
    "-gencode=arch=compute_90a,code=sm_90a",
    "-c",
    "x.cu",
    "-o",
    "x.o",
]


def test_sm120_only_swaps_the_gencodes_and_nothing_else() -> None:
    out = sgl_units.sm120_only(UPSTREAM)
    assert sgl_units.gencodes(out) == ["-gencode=arch=compute_120a,code=sm_120a"]
    assert [a for a in out if not a.startswith("-gencode")] == [
        a for a in UPSTREAM if not a.startswith("-gencode")
    ]
    assert out.index("-gencode=arch=compute_120a,code=sm_120a") == 2  # where the list began


#: sgl-kernel 0.3.21's compile_commands.json: units per target, gencodes of the FA3/FlashMLA ones.
COUNTS = {
    "common_ops_sm90_build": 78,
    "common_ops_sm100_build": 78,
    "spatial_ops": 2,
    "flash_ops": 184,
    "flashmla_ops": 14,
}
GEN = {"flash_ops": 3, "flashmla_ops": 2}


def run(unit: str, build: str, gencodes: int, cpu: float) -> object:
    return sgl_units.Run(unit, build, gencodes, cpu * 1.5, cpu, 1000)


def test_projection_model() -> None:
    """t = base + per_gencode x gencodes, fitted from sm100 (7) and sm_120a alone (1)."""
    runs = [
        run("a.cu", "sm120", 1, 10.0),
        run("a.cu", "sm90", 7, 70.0),
        run("a.cu", "sm100", 7, 70.0),  # base 0, 10 s per gencode
        run("b.cu", "sm120", 1, 30.0),
        run("b.cu", "sm90", 7, 90.0),
        run("b.cu", "sm100", 7, 90.0),  # base 20, 10 s per gencode
    ]
    upstream, sm120, parts = sgl_units.project(runs, COUNTS, GEN, "cpu_s")
    assert (parts["base"], parts["per_gencode"]) == pytest.approx((10.0, 10.0))
    assert parts["flash_ops"] == pytest.approx(184 * 40.0)
    assert parts["flashmla_ops"] == pytest.approx(14 * 30.0)
    assert upstream == pytest.approx(78 * 80 * 2 + 2 * 80 + 184 * 40 + 14 * 30)
    assert sm120 == pytest.approx(80 * 20.0)


def test_measured_strata_replace_the_model() -> None:
    """An FA3 stratum with a measured unit is costed at its mean; the other strata by the
    model, host-only files at its base."""
    runs = [
        run("a.cu", "sm120", 1, 10.0),
        run("a.cu", "sm90", 7, 70.0),
        run("a.cu", "sm100", 7, 70.0),
        run("b.cu", "sm120", 1, 30.0),
        run("b.cu", "sm90", 7, 90.0),
        run("b.cu", "sm100", 7, 90.0),  # model: 10 s + 10 s x gencodes
        run("flash_fwd_x_sm90.cu", "flash_ops/sm90", 3, 500.0),
        run("flash_fwd_y_sm90.cu", "flash_ops/sm90", 3, 300.0),
    ]
    strata = {
        "flash_ops": {"flash_ops/sm90": 60, "flash_ops/sm80": 120, "flash_ops/host": 4},
        "flashmla_ops": {"flashmla_ops/other": 14},
    }
    _, _, parts = sgl_units.project(runs, COUNTS, GEN, "cpu_s", strata)
    assert parts["flash_ops"] == pytest.approx(60 * 400.0 + 120 * 40.0 + 4 * 10.0)
    assert parts["flashmla_ops"] == pytest.approx(14 * 30.0)
    assert parts["modelled_units"] == 120 + 4 + 14


def test_strata_of_compile_commands() -> None:
    def entry(target: str, file: str) -> dict[str, str]:
        return {"file": file, "command": f"nvcc -o CMakeFiles/{target}.dir/x.o -c {file}"}

    entries = [
        entry("flash_ops", "/s/hopper/instantiations/flash_fwd_hdim64_bf16_sm90.cu"),
        entry("flash_ops", "/s/hopper/instantiations/flash_fwd_hdim64_bf16_sm80.cu"),
        entry("flash_ops", "/s/hopper/flash_prepare_scheduler.cu"),
        entry("flash_ops", "/s/hopper/flash_api.cpp"),
        entry("flashmla_ops", "/s/csrc/sm90/decode/splitkv_mla.cu"),
        entry("common_ops_sm100_build", "/s/csrc/gemm/a.cu"),
    ]
    assert sgl_units.strata_of(entries) == {
        "flash_ops": {
            "flash_ops/sm90": 1,
            "flash_ops/sm80": 1,
            "flash_ops/other": 1,
            "flash_ops/host": 1,
        },
        "flashmla_ops": {"flashmla_ops/other": 1},
    }


def test_sources_are_required(monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("SM120KIT_REAL_SOURCES", raising=False)
    assert sgl_units.main([]) == 1
    assert "pass --sources DIR or set SM120KIT_REAL_SOURCES" in capsys.readouterr().err
