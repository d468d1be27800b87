"""Planners as tables: the env Step planner (sm120kit/ops/pyenv.env_steps, torch_sources) and
build parallelism (packages/base.plan_parallelism). The env planner: what a
host's env needs in, the ops in order out. No host: the steps are what remote/make_env.py
would be sent, and what `plan` would show (sm120kit.steps.commands)."""

from __future__ import annotations

import pytest

from sm120kit.ops import pyenv
from sm120kit.packages.base import plan_parallelism
from sm120kit.steps import commands

CU130 = "https://download.pytorch.org/whl/cu130"


def spec(torch_cuda: str = "13.0", index: str = CU130) -> pyenv.EnvSpec:
    return pyenv.EnvSpec("r580", "3.11", "2.9.1", index, torch_cuda, "/w/envs/x", ("ninja",))


#: (case, rebuild, exists, tools, the ops in order)
ENV_ROWS = [
    ("fresh env", True, False, ["ninja"], ["run", "select", "run", "install_torch", "inspect", "marker"]),
    ("env rebuilt over an old one", True, True, ["ninja"], ["remove", "run", "select", "run", "install_torch", "inspect", "marker"]),
    ("fresh env, no tools", True, False, [], ["run", "select", "install_torch", "inspect", "marker"]),
    ("only a missing tool", False, True, ["cmake"], ["run", "inspect", "marker"]),
    ("nothing to add: inspect and mark", False, True, [], ["inspect", "marker"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rebuild", "exists", "tools", "ops"), [r[1:] for r in ENV_ROWS], ids=[r[0] for r in ENV_ROWS]
)
def test_env_steps(rebuild: bool, exists: bool, tools: list[str], ops: list[str]) -> None:
    steps = pyenv.env_steps(spec(), "python3", {}, rebuild=rebuild, exists=exists, tools=tools)
    assert [s.op for s in steps] == ops
    # torch's file is chosen (or refused) before any tool goes in.
    if "select" in ops:
        assert ops.index("select") < ops.index("install_torch")
    assert len(commands(steps)) >= len(steps) - 1  # every step renders for `plan`


#: (case, torch cuda, index, extra pip args, the index arguments tried in order)
SOURCE_ROWS = [
    ("CUDA torch from its index", "13.0", CU130, [], [["--index-url", CU130]]),
    ("CUDA torch from PyPI", "13.0", "pypi", [], [[]]),
    ("CPU torch from PyPI, then the CPU index", "cpu", "pypi", [], [[], ["--extra-index-url", pyenv.CPU_INDEX]]),
    ("CPU torch from a given index", "cpu", "https://idx/cpu", [], [["--extra-index-url", "https://idx/cpu"]]),
    ("offline: the host's own arguments only", "13.0", CU130, ["--no-index"], [[]]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("cuda", "index", "extra", "want"),
    [r[1:] for r in SOURCE_ROWS],
    ids=[r[0] for r in SOURCE_ROWS],
)
def test_torch_sources(cuda: str, index: str, extra: list[str], want: list[list[str]]) -> None:
    assert pyenv.torch_sources(spec(cuda, index), extra) == want


GIB = 1024**3

#: (case, cpus, memory, nvcc threads by default, GB per thread, overrides, (jobs, threads))
PARALLEL_ROWS = [
    ("2 cores, 24 GiB, single-threaded nvcc", 2, 24 * GIB, 1, 4.0, {}, (2, 1)),
    ("64 cores, memory-bound", 64, 24 * GIB, 1, 4.0, {}, (6, 1)),
    ("flash-attn's formula: cpus // 2 and budget // 4", 64, 256 * GIB, 4, 2.25, {}, (28, 4)),
    ("threads shrink before jobs reach zero", 2, 1 * GIB, 4, 4.0, {}, (1, 1)),
    ("cpu-bound, 4 threads each", 16, 64 * GIB, 4, 4.0, {}, (4, 4)),
    ("overrides win", 16, 64 * GIB, 4, 4.0, {"jobs_override": 3, "threads_override": 2}, (3, 2)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("cpus", "mem", "threads", "gb", "over", "want"),
    [r[1:] for r in PARALLEL_ROWS],
    ids=[r[0] for r in PARALLEL_ROWS],
)
def test_plan_parallelism(
    cpus: int, mem: int, threads: int, gb: float, over: dict[str, int], want: tuple[int, int]
) -> None:
    got = plan_parallelism(cpus, mem, threads_default=threads, gb_per_thread=gb, **over)
    assert (got.jobs, got.threads) == want
    assert f"{cpus} CPUs" in got.reason
