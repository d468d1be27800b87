"""The serving engines: what is specific to one engine (its top-level distribution, the module
smoke imports, the modules that launch its server, the JIT packages it reaches that the stack
descriptors do not list for every env) in one table, so that a third engine is one
`Engine` here plus its stack lines (``recipes/shared/stacks.toml``) and lock.

Everything else about an engine's env is data read elsewhere: its pins from the top-level
distribution's own Requires-Dist (remote/lib/probe_stack.py `check_pins`), its compiled
modules' device code from the release catalogue (``locks/<top>-<version>/catalogue.toml``,
read from the locked wheels), the JIT lookup rules from ``remote/lib/jit_toolchain.py``.

A host or group picks an engine with the inventory var ``stack`` (`STACK_VAR`), or a run with
``--engine``; a recipe's stack line offers it under ``engines`` (docs/vllm.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.utils import canonicalize_name

#: The inventory var naming a host's engine (``stack: vllm``).
STACK_VAR = "stack"


@dataclass(frozen=True)
class Engine:
    """One serving engine. `jit` is ``{distribution: (rule, source)}``: packages its env
    compiles through at run time beyond the stack descriptors' (`packages.released`), each
    with the ``remote/lib/jit_toolchain.RULES`` rule it follows and the files it was read from."""

    name: str
    distribution: str
    module: str
    launch: tuple[str, ...]
    source: str
    jit: dict[str, tuple[str, str]] = field(default_factory=dict)


ENGINES: tuple[Engine, ...] = (
    Engine(
        "sglang",
        distribution="sglang",
        module="sglang",
        launch=("sglang.launch_server",),
        source="sglang 0.5.23 sglang/launch_server.py",
    ),
    Engine(
        "vllm",
        distribution="vllm",
        module="vllm",
        # `vllm serve` is the console script vllm = vllm.entrypoints.cli.main:main
        # (vllm-0.33.0.dist-info/entry_points.txt); python -m vllm.entrypoints.openai.api_server
        # is the module form.
        launch=("vllm.entrypoints.cli.main", "vllm.entrypoints.openai.api_server"),
        source="vllm 0.33.0 vllm-0.33.0.dist-info/entry_points.txt, "
        "vllm/entrypoints/openai/api_server.py",
        jit={
            "triton": (
                "triton",
                "triton/backends/nvidia/compiler.py get_ptxas(); triton/knobs.py "
                "env_nvidia_tool (triton 3.8.0, the lock's)",
            ),
        },
    ),
)

#: The engine of a recipe whose stack names none (every stack before engines were data).
DEFAULT = "sglang"


def names() -> tuple[str, ...]:
    """Every engine's name, the default first."""
    return tuple(e.name for e in ENGINES)


def find(name: str) -> Engine | None:
    """The engine called `name` (or whose top-level distribution is `name`), or None."""
    key = str(canonicalize_name(name))
    return next(
        (e for e in ENGINES if key in (e.name, str(canonicalize_name(e.distribution)))), None
    )


def for_top(top: str) -> Engine | None:
    """The engine a stack's ``top`` (``vllm==0.33.0``) locks, or None."""
    name = top.split("==", 1)[0].split("[", 1)[0].strip()
    return find(name)


def probe_engines() -> list[dict[str, object]]:
    """The smoke probe's ``engines`` argument: per engine its top-level distribution, the
    module to import and its extra JIT rules; the probe checks the first one installed."""
    return [
        {
            "top": e.distribution,
            "module": e.module,
            "jit": {d: {"rule": r, "source": s} for d, (r, s) in e.jit.items()},
        }
        for e in ENGINES
    ]
