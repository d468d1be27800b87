"""bench/flash_attn_archs.py's own parts that need no compiler: reading the build's ninja file
and rewriting a unit's nvcc command to another arch list.

The benchmark itself compiles real flash-attn units for many minutes and is run by hand
(docs/benchmarks.md). The ninja text below has the shape torch 2.14's BuildExtension writes
for flash-attn (variables, then one cuda_compile edge per unit), cut to two units.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "flash_attn_archs.py"
_spec = importlib.util.spec_from_file_location("flash_attn_archs", BENCH)
assert _spec and _spec.loader
fa_bench = importlib.util.module_from_spec(_spec)
sys.modules["flash_attn_archs"] = fa_bench
_spec.loader.exec_module(fa_bench)

NINJA = """ninja_required_version = 1.3
nvcc = /env/bin/sccache /usr/local/cuda-13.0/bin/nvcc
cuda_cflags = -I/t/csrc/flash_attn -I/env/torch/include -c
cuda_post_cflags = --expt-relaxed-constexpr --compiler-options ''"'"'-fPIC'"'"'' -O3 -gencode arch=compute_120,code=sm_120 --threads 1 -std=c++20

rule cuda_compile
  command = $nvcc -MD -MF $out.d $cuda_cflags -c $in -o $out $cuda_post_cflags

build /t/b/flash_fwd_hdim32_fp16_sm80.o: cuda_compile /t/csrc/flash_attn/src/flash_fwd_hdim32_fp16_sm80.cu
build /t/b/flash_bwd_hdim32_fp16_sm80.o: cuda_compile /t/csrc/flash_attn/src/flash_bwd_hdim32_fp16_sm80.cu
"""


def test_reads_units_and_rewrites_gencodes(tmp_path: Path) -> None:
    ninja = tmp_path / "build.ninja"
    ninja.write_text(NINJA)
    variables, units = fa_bench.read_ninja(ninja)
    assert sorted(units) == ["flash_bwd_hdim32_fp16_sm80.cu", "flash_fwd_hdim32_fp16_sm80.cu"]
    src = units["flash_fwd_hdim32_fp16_sm80.cu"]
    cmd = fa_bench.command(variables, src, "/o.o", fa_bench.DEFAULT_ARCHS)
    assert cmd[0] == "/usr/local/cuda-13.0/bin/nvcc"  # no compile cache in the measurement
    assert cmd.count("-gencode") == 4 and "arch=compute_120,code=sm_120" in cmd
    assert "arch=compute_80,code=sm_80" in cmd and "--compiler-options" in cmd
    # What /bin/sh hands nvcc for torch's quoting (nvcc strips the inner quotes itself).
    assert cmd[cmd.index("--compiler-options") + 1] == "'-fPIC'"
    one = fa_bench.command(variables, src, "/o.o", fa_bench.SM120_ONLY)
    assert [a for a in one if a.startswith("arch=")] == ["arch=compute_120,code=sm_120"]


def test_families() -> None:
    assert fa_bench.family("flash_fwd_split_hdim64_bf16_causal_sm80.cu") == "flash_fwd_split_"
    assert fa_bench.family("flash_fwd_hdim64_bf16_sm80.cu") == "flash_fwd_"
    assert fa_bench.family("flash_bwd_hdim64_bf16_sm80.cu") == "flash_bwd_"
