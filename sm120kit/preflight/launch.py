"""A launch command, read the way its engine reads it (the options preflight judges; every
other word is kept and ignored). The engines and their option tables: engines.py.

Accepted shapes: ``python -m sglang.launch_server ARGS``, ``sglang serve ARGS``,
``vllm serve [MODEL] ARGS``, ``python -m vllm.entrypoints.openai.api_server ARGS`` or bare
``ARGS`` (the host's engine's: ``--engine``, else its ``stack`` var, else sglang;
`for_engine` reads it again per host). Option names and defaults are sglang 0.5.23's (sglang/srt/arg_groups/fields/*.py:
``--tp-size`` alias ``--tensor-parallel-size``, ``--port`` 30000, ``--host`` 127.0.0.1;
argparse also accepts unambiguous prefixes such as ``--tp``).
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from typing import Any

from ..engines import ENGINES, SGLANG, Engine, engine_named, engine_of
from ..errors import Sm120Error

DEFAULT_PORT = SGLANG.default_port
DEFAULT_HOST = SGLANG.default_host

#: sglang's option table (engines.SGLANG; vLLM's is engines.VLLM).
OPTIONS = SGLANG.options
FLAGS = SGLANG.flags


@dataclass
class Launch:
    """The settings of one launch that preflight judges (None: not given, sglang's default)."""

    words: list[str]
    model_path: str | None = None
    tp: int = 1
    dp: int = 1
    pp: int = 1
    nnodes: int = 1
    port: int = DEFAULT_PORT
    host: str = DEFAULT_HOST
    attention_backend: str | None = None
    prefill_attention_backend: str | None = None
    decode_attention_backend: str | None = None
    moe_runner_backend: str | None = None
    moe_a2a_backend: str | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    mem_fraction_static: float | None = None
    enable_dp_attention: bool = False
    disable_custom_all_reduce: bool = False
    base_gpu_id: int = 0
    gpu_id_step: int = 1
    given: set[str] = field(default_factory=set)
    #: the engine the launch starts (sm120kit/engines.py ENGINES).
    engine: str = SGLANG.name
    #: no launcher word (bare ARGS): the engine is the host's (--engine, var ``stack``), so
    #: the launch is read again per host (`for_engine`).
    bare: bool = False

    def gpus_needed(self) -> int:
        """GPUs one node needs: tp x pp, times dp unless DP attention runs inside the TP group."""
        total = self.tp * self.pp * (1 if self.enable_dp_attention else self.dp)
        return max(1, -(-total // max(1, self.nnodes)))

    def gpu_indices(self) -> list[int]:
        """The GPU indices this node's ranks take (--base-gpu-id, --gpu-id-step), as sglang
        assigns them when CUDA_VISIBLE_DEVICES does not narrow the devices."""
        return [self.base_gpu_id + i * self.gpu_id_step for i in range(self.gpus_needed())]

    def to_dict(self) -> dict[str, Any]:
        """The launch as JSON (the words and every setting preflight read)."""
        doc = {k: v for k, v in self.__dict__.items() if k != "given"}
        doc["given"] = sorted(self.given)
        return doc


def launch_words(option: str | None, argv: list[str] | None = None) -> list[str]:
    """The launch command's words: ``--launch "..."`` split as a shell would, or everything
    after ``--`` on the command line.

    invoke keeps the words after ``--`` only as one space-joined string (its parser's
    ``remainder``, not handed to tasks), which loses the quoting of an argument with spaces; the
    process's own argv still has each word as the shell split it, so they are read from there.
    """
    argv = sys.argv if argv is None else argv
    after = argv[argv.index("--") + 1 :] if "--" in argv else []
    if option is not None:
        if after:
            raise Sm120Error("--launch and words after -- both given: give the launch once")
        try:
            words = shlex.split(option)
        except ValueError as exc:
            raise Sm120Error(f"--launch {_short(option)}: {exc}") from None
        check_no_shell(words, "--launch")
        return words
    check_no_shell(after, "the launch after --")
    return after


#: Words a shell would read as operators, and text it would expand. The launch runs as one
#: program's argument list, never through a shell, so `--model-path m; rm x` would hand sglang
#: the words "m;", "rm", "x": judged as arguments, it would pass preflight and fail at start.
SHELL_WORDS = frozenset({";", "|", "||", "&", "&&", ">", ">>", "<", "<<", "(", ")"})
SHELL_TEXT = (";", "|", "&&", "\n", "`", "$(")


def check_no_shell(words: list[str], where: str) -> None:
    """Refuse a launch holding shell syntax (an operator, a newline, a command substitution):
    one line naming the word and the operator."""
    for word in words:
        found = word if word in SHELL_WORDS else next((t for t in SHELL_TEXT if t in word), None)
        if found is not None:
            shown = "a newline" if found == "\n" else repr(found)
            raise Sm120Error(
                f"{where}: shell syntax {shown} in {_short(word)}: the launch is one command's "
                "arguments, not run by a shell; give one command, without ; | && || ` $( or "
                "newlines"
            )


def _short(text: str) -> str:
    shown = repr(text)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def server_args(words: list[str], default: str | None = None) -> list[str]:
    """The server's own arguments: the words after the launcher (python -m ..., sglang serve,
    vllm serve; ``vllm serve M`` gives ``--model M``, as vllm/entrypoints/cli/serve.py reads a
    positional model tag)."""
    return _split(words, default)[1]


def _split(words: list[str], default: str | None) -> tuple[Engine, list[str]]:
    found = engine_of(words)
    if found is None:
        if words and not words[0].startswith("-"):
            shapes = "; ".join(e.launchers() for e in ENGINES.values())
            raise Sm120Error(
                f"launch command {' '.join(words[:4])!r}...: expected {shapes} or the server's ARGS"
            )
        return engine_named(default), list(words)
    engine, start = found
    args = list(words[start:])
    if (
        engine.positional_model
        and start > 0
        and words[start - 1] == "serve"
        and args
        and not args[0].startswith("-")
    ):
        args = ["--model", args[0]] + args[1:]
    return engine, args


def parse_launch(words: list[str], default: str | None = None) -> Launch:
    """Read a launch command; Sm120Error (one line naming the option) for a value it cannot be.
    The engine is the launcher's (``vllm serve``, ``python -m sglang.launch_server``...); a bare
    ARGS launch is `default`'s (a host's chosen stack), sglang without one."""
    if not words:
        raise Sm120Error(
            "no launch command: give it after --, e.g. invoke preflight -H H -- "
            "python -m sglang.launch_server --model-path M --tp 2"
        )
    engine, args = _split(list(words), default)
    launch = Launch(
        words=list(words),
        engine=engine.name,
        port=engine.default_port,
        host=engine.default_host,
        bare=engine_of(list(words)) is None,
    )
    i = 0
    while i < len(args):
        word = args[i]
        name, value = word, None
        if word.startswith("--") and "=" in word:
            name, value = word.split("=", 1)
        if name in engine.flags:
            setattr(launch, engine.flags[name], True)
            launch.given.add(engine.flags[name])
        elif name in engine.spelling:
            key = engine.spelling[name]
            if value is None:
                if i + 1 >= len(args):
                    raise Sm120Error(f"launch option {name}: missing its value")
                i += 1
                value = args[i]
            setattr(launch, key, _convert(name, value, engine.options[key][1]))
            launch.given.add(key)
        i += 1
    _check(launch)
    return launch


def for_engine(launch: Launch, engine: str) -> Launch:
    """`launch` as `engine` reads it: a bare ARGS launch read again with that engine's parser
    (a host whose engine is not the one the controller assumed); a launch that names its
    launcher is its launcher's engine, returned as it is."""
    if not launch.bare or launch.engine == engine:
        return launch
    return parse_launch(launch.words, default=engine)


def check_engine(launch: Launch, engine: str | None) -> None:
    """Refuse ``--engine`` naming another engine than the launch's own launcher (one line)."""
    if engine and not launch.bare and launch.engine != engine:
        raise Sm120Error(
            f"--engine {engine}: the launch {' '.join(launch.words[:3])!r}... is "
            f"{launch.engine}'s; give its ARGS alone, or drop --engine"
        )


def _convert(name: str, value: str, kind: type) -> Any:
    try:
        return kind(value)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise Sm120Error(f"launch option {name} {value!r}: expected {what}") from None


def _check(launch: Launch) -> None:
    if launch.base_gpu_id < 0:
        raise Sm120Error(f"launch option --base-gpu-id {launch.base_gpu_id}: must be >= 0")
    for key in ("tp", "dp", "pp", "nnodes", "gpu_id_step"):
        if getattr(launch, key) < 1:
            name = "--" + key.replace("_", "-")
            raise Sm120Error(f"launch option {name}: must be at least 1")
    if not 0 < launch.port < 65536:
        raise Sm120Error(f"launch option --port {launch.port}: not a TCP port")
    frac = launch.mem_fraction_static
    if frac is not None and not 0 < frac <= 1:
        raise Sm120Error(f"launch option --mem-fraction-static {frac}: must be in (0, 1]")
