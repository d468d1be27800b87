"""The serving engines as data: one typed `Engine` per engine, read by every layer that meets
one (the recipe's stack line it picks, smoke's import and JIT rules, preflight's launch reading,
in-env resolver and verdicts, serve-check's server argv).

A third engine is one more `Engine` given to `register` plus its stack line
(``recipes/shared/stacks.toml``, offered under a line's ``engines``), its lock, its in-env
resolver (``sm120kit/remote/lib/in_target/<resolver>.py``) and, for a table-judged engine,
its capability tables (``sm120kit/preflight/vllm_checks.TABLES``, the table judge's): no code path names an
engine (tests/fleet/test_engine_descriptor.py registers one from data and walks plan and preflight
parsing with it).

Everything else about an engine's env is read elsewhere: its pins from the top-level
distribution's own Requires-Dist (remote/lib/probe_stack.py `check_pins`), its compiled
modules' device code from the release catalogue (``locks/<top>-<version>/catalogue.toml``), the
JIT lookup rules from ``remote/lib/jit_toolchain.py``.

A host or group picks an engine with the inventory var ``stack`` (`STACK_VAR`), or a run with
``--engine`` (which wins); a recipe's stack line offers it under ``engines`` (docs/vllm.md).

The facts, from the released files:

- sglang 0.5.23: sglang/srt/arg_groups/fields/*.py (``--tp-size`` alias
  ``--tensor-parallel-size``, ``--port`` 30000, ``--host`` 127.0.0.1); sglang/launch_server.py.
- vLLM 0.33.0 (vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl): `vllm serve` is the console
  script vllm = vllm.entrypoints.cli.main:main (vllm-0.33.0.dist-info/entry_points.txt; the
  module ends in ``if __name__ == "__main__": main()``, so ``python -m vllm.entrypoints.cli.main
  serve`` is the same program); vllm/engine/arg_utils.py (``--model`` l.969,
  ``--quantization``/``-q`` l.992, ``--attention-backend`` l.1114,
  ``--pipeline-parallel-size``/``-pp`` l.1171, ``--nnodes``/``-n`` l.1177,
  ``--tensor-parallel-size``/``-tp`` l.1209, ``--data-parallel-size``/``-dp`` l.1241,
  ``--gpu-memory-utilization`` l.1389, ``--kv-cache-dtype`` l.1397),
  vllm/entrypoints/common/cli_args.py (FrontendArgs: ``host`` None = every interface l.293,
  ``port`` 8000 l.295), vllm/entrypoints/cli/serve.py (``vllm serve [model_tag] [options]``
  l.169: a positional model tag becomes ``args.model`` l.56-57).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.utils import canonicalize_name

from .errors import Sm120Error

#: The inventory var naming a host's engine (``stack: vllm``).
STACK_VAR = "stack"

#: field -> (option spellings, type): the launch options preflight reads.
Options = dict[str, tuple[tuple[str, ...], type]]

#: How an engine's launch is judged: "sglang" (preflight/verdicts.py: sglang's resolution plus
#: the catalogue's kernel tables) or "tables" (preflight/vllm_checks.py: the engine's own
#: resolution plus its capability tables in preflight/vllm_checks.TABLES).
VERDICTS = ("sglang", "tables")


@dataclass(frozen=True)
class Engine:
    """One serving engine, every layer's part of it.

    Stack side: `distribution` (the stack's top-level distribution), `module` (what smoke
    imports), `jit` (``{distribution: (rule, source)}``: packages its env compiles through at
    run time beyond the stack descriptors', each with its ``remote/lib/jit_toolchain.RULES``
    rule and the files it was read from).

    Launch side: `modules` (``python -m MODULE`` launchers, and a script path ending in
    MODULE.py), `cli` (the console script whose ``serve`` subcommand launches it),
    `positional_model` (``CLI serve M``), `options`/`flags` (what preflight reads of a launch),
    the defaults, `resolver` (the in-env resolver script), `probe_dists` (the distributions a
    table-judged engine's probe reports), `serve_argv` (what follows the env's python when serve-check
    starts it), `verdicts` (one of `VERDICTS`)."""

    name: str
    distribution: str
    module: str
    source: str
    modules: tuple[str, ...]
    cli: str
    positional_model: bool
    options: Options
    default_port: int
    default_host: str
    resolver: str
    serve_argv: tuple[str, ...]
    verdicts: str = "tables"
    #: how the engine's resolution is named in a verdict ("vllm 0.33.0 engine config ...")
    resolver_by: str = "argument resolution"
    #: the engine's name as its project writes it, in a verdict's words
    title: str = ""
    probe_dists: tuple[str, ...] = ()
    flags: dict[str, str] = field(default_factory=dict)
    jit: dict[str, tuple[str, str]] = field(default_factory=dict)
    spelling: dict[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.verdicts not in VERDICTS:
            raise ValueError(f"engine {self.name}: verdicts {self.verdicts!r} not in {VERDICTS}")
        table = {s: name for name, (spellings, _) in self.options.items() for s in spellings}
        object.__setattr__(self, "spelling", table)
        if not self.title:
            object.__setattr__(self, "title", self.name)

    def launchers(self) -> str:
        """The launch shapes, for an error line."""
        mods = ", ".join(f"python -m {m} ARGS" for m in self.modules)
        return f"{mods}, {self.cli} serve ARGS"


SGLANG = Engine(
    name="sglang",
    distribution="sglang",
    module="sglang",
    source="sglang 0.5.23 sglang/launch_server.py, sglang/srt/arg_groups/fields/*.py",
    modules=("sglang.launch_server",),
    cli="sglang",
    positional_model=False,
    options={
        "model_path": (("--model-path", "--model"), str),
        "tp": (("--tp-size", "--tensor-parallel-size", "--tp"), int),
        "dp": (("--dp-size", "--data-parallel-size", "--dp"), int),
        "pp": (("--pp-size", "--pipeline-parallel-size", "--pp"), int),
        "nnodes": (("--nnodes",), int),
        "port": (("--port",), int),
        "host": (("--host",), str),
        "attention_backend": (("--attention-backend",), str),
        "prefill_attention_backend": (("--prefill-attention-backend",), str),
        "decode_attention_backend": (("--decode-attention-backend",), str),
        "moe_runner_backend": (("--moe-runner-backend",), str),
        "moe_a2a_backend": (("--moe-a2a-backend",), str),
        "kv_cache_dtype": (("--kv-cache-dtype",), str),
        "quantization": (("--quantization",), str),
        "mem_fraction_static": (("--mem-fraction-static",), float),
        "base_gpu_id": (("--base-gpu-id",), int),
        "gpu_id_step": (("--gpu-id-step",), int),
    },
    flags={
        "--enable-dp-attention": "enable_dp_attention",
        "--disable-custom-all-reduce": "disable_custom_all_reduce",
    },
    default_port=30000,
    default_host="127.0.0.1",
    # its probe's distributions are the kernel stack's (preflight/rules.py DISTRIBUTIONS)
    resolver="server_args",
    serve_argv=("-m", "sglang.launch_server"),
    verdicts="sglang",
    resolver_by="ServerArgs",
)

VLLM = Engine(
    name="vllm",
    distribution="vllm",
    module="vllm",
    source="vllm 0.33.0 vllm-0.33.0.dist-info/entry_points.txt, "
    "vllm/entrypoints/openai/api_server.py",
    modules=("vllm.entrypoints.openai.api_server",),
    cli="vllm",
    positional_model=True,
    options={
        "model_path": (("--model",), str),
        "tp": (("--tensor-parallel-size", "-tp"), int),
        "dp": (("--data-parallel-size", "-dp"), int),
        "pp": (("--pipeline-parallel-size", "-pp"), int),
        "nnodes": (("--nnodes", "-n"), int),
        "port": (("--port",), int),
        "host": (("--host",), str),
        "attention_backend": (("--attention-backend",), str),
        "kv_cache_dtype": (("--kv-cache-dtype",), str),
        "quantization": (("--quantization", "-q"), str),
        # the fraction of each GPU's memory vLLM claims, as sglang's --mem-fraction-static
        "mem_fraction_static": (("--gpu-memory-utilization",), float),
    },
    default_port=8000,
    # host None: uvicorn binds every interface (FrontendArgs.host).
    default_host="0.0.0.0",
    resolver="vllm_args",
    probe_dists=("vllm", "torch", "flashinfer-python", "triton", "transformers"),
    serve_argv=("-m", "vllm.entrypoints.cli.main", "serve"),
    resolver_by="engine config and attention selector",
    title="vLLM",
    jit={
        "triton": (
            "triton",
            "triton/backends/nvidia/compiler.py get_ptxas(); triton/knobs.py "
            "env_nvidia_tool (triton 3.8.0, the lock's)",
        ),
    },
)

#: Every engine, by name, the default first (`register` adds one).
ENGINES: dict[str, Engine] = {e.name: e for e in (SGLANG, VLLM)}

#: The engine of a recipe whose stack names none (every stack before engines were data), and
#: of a bare ARGS launch on a host that chose none.
DEFAULT = SGLANG.name


def register(engine: Engine) -> Engine:
    """Add `engine` (a third one, as data); ValueError when its name or distribution is taken."""
    for other in ENGINES.values():
        if engine.name == other.name or find(engine.distribution) is not None:
            raise ValueError(f"engine {engine.name}: its name or distribution is {other.name}'s")
    ENGINES[engine.name] = engine
    return engine


def names() -> tuple[str, ...]:
    """Every engine's name, the default first."""
    return tuple(ENGINES)


def find(name: str) -> Engine | None:
    """The engine called `name` (or whose top-level distribution is `name`), or None."""
    key = str(canonicalize_name(name))
    return next(
        (e for e in ENGINES.values() if key in (e.name, str(canonicalize_name(e.distribution)))),
        None,
    )


def for_top(top: str) -> Engine | None:
    """The engine a stack's ``top`` (``vllm==0.33.0``) locks, or None."""
    name = top.split("==", 1)[0].split("[", 1)[0].strip()
    return find(name)


def check_name(name: str | None, where: str) -> Engine | None:
    """The engine `name` given at `where` (``--engine``), None when not given; Sm120Error, one
    line naming `where`, for a name no engine has."""
    if name is None:
        return None
    found = ENGINES.get(str(name).strip())
    if found is None:
        raise Sm120Error(f"{where} {name!r}: unknown engine; known: {', '.join(names())}")
    return found


def probe_engines() -> list[dict[str, object]]:
    """The smoke probe's ``engines`` argument: per engine its top-level distribution, the
    module to import and its extra JIT rules; the probe checks the first one installed."""
    return [
        {
            "top": e.distribution,
            "module": e.module,
            "jit": {d: {"rule": r, "source": s} for d, (r, s) in e.jit.items()},
        }
        for e in ENGINES.values()
    ]


def engine_of(words: list[str]) -> tuple[Engine, int] | None:
    """(the engine, the index of its first own argument) of a launch spelled with an engine's
    launcher; None for a launch with none (bare ARGS, or an unknown program)."""
    for i, word in enumerate(words):
        for engine in ENGINES.values():
            if word == "-m" and i + 1 < len(words) and words[i + 1] in engine.modules:
                return engine, i + 2
            if any(word.endswith((m, m + ".py")) for m in engine.modules):
                return engine, i + 1
            if word == "serve" and i > 0 and words[i - 1].rsplit("/", 1)[-1] == engine.cli:
                return engine, i + 1
    return None


def engine_named(name: str | None) -> Engine:
    """The engine called `name` (a host's chosen stack, checked where it was chosen); the
    default when None or empty."""
    return ENGINES.get(name or "", ENGINES[DEFAULT])
