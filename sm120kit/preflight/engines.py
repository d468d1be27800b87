"""The serving engines preflight reads a launch of, as data: one `Engine` per engine (how its
launch is spelled, its option table, its defaults, the in-env resolver that asks the engine
itself). A third engine is one more `Engine` here plus its checks' tables; launch.py and the
probe dispatch on `Engine.name`, not on code paths per engine.

sglang 0.5.23: sglang/srt/arg_groups/fields/*.py (``--tp-size`` alias ``--tensor-parallel-size``,
``--port`` 30000, ``--host`` 127.0.0.1). vLLM 0.33.0 (the released wheel
vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl): vllm/engine/arg_utils.py
(``--model`` l.969, ``--quantization``/``-q`` l.992, ``--attention-backend`` l.1114,
``--pipeline-parallel-size``/``-pp`` l.1171, ``--nnodes``/``-n`` l.1177,
``--tensor-parallel-size``/``-tp`` l.1209, ``--data-parallel-size``/``-dp`` l.1241,
``--gpu-memory-utilization`` l.1389, ``--kv-cache-dtype`` l.1397),
vllm/entrypoints/common/cli_args.py (FrontendArgs: ``host`` None = every interface l.293,
``port`` 8000 l.295), vllm/entrypoints/cli/serve.py (``vllm serve [model_tag] [options]``
l.169: a positional model tag becomes ``args.model`` l.56-57).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: field -> (option spellings, type).
Options = dict[str, tuple[tuple[str, ...], type]]


@dataclass(frozen=True)
class Engine:
    """One serving engine's launch, as data."""

    name: str
    #: ``python -m MODULE`` launchers (and a script path ending in MODULE.py).
    modules: tuple[str, ...]
    #: the console script whose ``serve`` subcommand launches the server (``sglang serve``).
    cli: str
    #: whether ``CLI serve`` takes the model as its first positional word (``vllm serve M``).
    positional_model: bool
    options: Options
    flags: dict[str, str]
    default_port: int
    default_host: str
    #: the in-env resolver (sm120kit/remote/lib/in_target/<resolver>.py).
    resolver: str
    spelling: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        table = {s: name for name, (spellings, _) in self.options.items() for s in spellings}
        object.__setattr__(self, "spelling", table)

    def launchers(self) -> str:
        """The launch shapes, for an error line."""
        mods = ", ".join(f"python -m {m} ARGS" for m in self.modules)
        return f"{mods}, {self.cli} serve ARGS"


SGLANG = Engine(
    name="sglang",
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
    resolver="server_args",
)

VLLM = Engine(
    name="vllm",
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
    flags={},
    default_port=8000,
    # host None: uvicorn binds every interface (FrontendArgs.host).
    default_host="0.0.0.0",
    resolver="vllm_args",
)

#: Every engine, by name; the first is the one a bare ``ARGS`` launch is read as.
ENGINES: dict[str, Engine] = {e.name: e for e in (SGLANG, VLLM)}


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
    """The engine called `name` (a host's chosen stack); sglang when None or not an engine."""
    return ENGINES.get(name or "", SGLANG)
