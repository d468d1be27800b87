"""The one rule for "this compiler release is too old for the GPU" that nvcc (flashinfer,
deep-gemm, humming, tilelang), triton's ptxas and CuTe DSL's CUTE_DSL_PTXAS_PATH share:
CUDA 12.8 is the first to target 12.0, 12.9 the first for 12.1."""

from __future__ import annotations

import pytest

from sm120kit.remote.lib.jit_toolchain import cannot_target, judge_pair


@pytest.mark.parametrize(
    ("version", "cc", "said"),
    [
        ("12.6.85", (12, 0), "cannot target 12.0: needs CUDA >= 12.8"),
        ("12.8.93", (12, 0), None),
        ("12.8.93", (12, 1), "cannot target 12.1: needs CUDA >= 12.9"),
        ("13.0.88", (12, 1), None),
        ("11.8.89", (9, 0), None),  # no floor recorded for 9.0: nothing is claimed
        ("12.6.85", None, None),
        (None, (12, 0), None),
    ],
)
def test_cannot_target(version: str | None, cc: tuple[int, int] | None, said: str | None) -> None:
    assert cannot_target(version, cc) == said


def test_judge_pair_names_the_nvcc_it_refuses() -> None:
    status, reason = judge_pair("/x/nvcc", "12.6.85", "/x/include", "12.6", (12, 0))
    assert (status, reason) == ("fail", "nvcc 12.6.85 cannot target 12.0: needs CUDA >= 12.8")
