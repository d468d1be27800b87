# Runs inside the vLLM env's interpreter (python -c), after prelude.py: ARGS, _err, _emit,
# _present_gpu come from there (sm120kit.remote.lib.targets.target_source). resolve_server.py
# may follow it (then _SERVE is set and this file only defines functions: the warm server).
#
# Asks vLLM which attention backend and quantization a launch gets: its own parser, engine
# config and backend selector, as `vllm serve` runs them (vllm 0.33.0:
# entrypoints/common/cli_args.py make_arg_parser, engine/arg_utils.py
# AsyncEngineArgs.from_cli_args / create_engine_config, whose VllmConfig._get_quantization_config
# refuses a method below its get_min_capability (config/vllm.py l.916-940);
# v1/attention/selector.py get_attn_backend, which asks the platform's get_attn_backend_cls:
# the --attention-backend given, validated for the device capability, else the first valid one
# of platforms/cuda.py _get_backend_priorities (l.84-185)). Without a GPU, torch.cuda answers as
# one GPU of ARGS["cc"] (_present_gpu) and vLLM's platform is set to its NonNvmlCudaPlatform (which
# reads the capability from torch.cuda, platforms/cuda.py l.1007-1012): NVML, which vLLM's own
# platform detection asks, has no GPU to answer for. Then torch.cuda's lazy init is walled off:
# nothing in a resolution runs on a GPU; a step that reaches one is reported "stopped".
#
# ARGS: {"cases": [[argv...], ...], "cc": [12, 0], "memory_mib": int}
# Prints: {"ran": bool, "reason": str|None, "version": str|None, "gpu": str|None, "engine": "vllm",
#          "cases": [{"error": str|None, "backends": {field: value}, "after": []}]}
import contextlib
import io

# Preflight reads, it never downloads: the model's files must already be local.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# One process: no engine core, no workers, no telemetry.
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


class _GpuWall(BaseException):
    """Raised at the first GPU use (a BaseException: no `except Exception` in vLLM turns it
    into a fallback)."""


def _wall(*a, **k):
    raise _GpuWall("torch.cuda lazy init")


def _setup(args):
    """Import torch and vLLM's parser and configs (faking the GPU and the platform first when
    there is none)."""
    out = {
        "ran": False,
        "reason": None,
        "version": None,
        "gpu": None,
        "cases": [],
        "engine": "vllm",
    }
    try:
        import torch

        out["gpu"], faked = _present_gpu(args, "vLLM")
        if faked:
            out["faked"] = True
        import logging

        logging.disable(logging.CRITICAL)
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
        if faked:
            import vllm.platforms as platforms
            from vllm.platforms.cuda import NonNvmlCudaPlatform

            # Before any module binds `current_platform` (they import it at import time).
            platforms._current_platform = NonNvmlCudaPlatform()
            torch.cuda._lazy_init = _wall
        import vllm
        from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: F401
        from vllm.entrypoints.common.cli_args import make_arg_parser  # noqa: F401
        from vllm.v1.attention.selector import get_attn_backend  # noqa: F401

        out["version"] = getattr(vllm, "__version__", None)
        out["ran"] = True
    except BaseException as e:
        out["reason"] = "cannot import vLLM's engine args in this env: " + _err(e)
    return out


def _backend(config):
    """The attention backend vLLM's selector picks for the model's attention layers (the
    arguments Attention / MLAAttention pass: model_executor/layers/attention/attention.py
    l.350-360, mla_attention.py l.514-521)."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention.selector import get_attn_backend

    mc = config.model_config
    with set_current_vllm_config(config):
        torch.set_default_dtype(mc.dtype)
        cls = get_attn_backend(
            mc.get_head_size(),
            mc.dtype,
            config.cache_config.cache_dtype,
            use_mla=bool(mc.use_mla),
            use_sparse=bool(getattr(mc, "is_deepseek_mla", False) and _sparse(mc)),
            num_heads=mc.get_num_attention_heads(config.parallel_config),
            has_sliding_window=mc.get_sliding_window() is not None,
        )
    return cls.get_name()


def _sparse(mc):
    hf = getattr(mc, "hf_text_config", None) or getattr(mc, "hf_config", None)
    return hasattr(hf, "index_topk")


def _raised_at(e):
    """Where `e` was raised, when outside vLLM's own files (" (raised at PKG/FILE.py:N)"): an
    error of another package's import (flashinfer's cutlass DSL) is the env's, not vLLM's
    judgement of the launch, and the user needs to see whose it is."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return ""
    path = tb.tb_frame.f_code.co_filename
    rel = path.split("site-packages" + os.sep, 1)[-1]
    if rel == path or rel.startswith("vllm" + os.sep):
        return ""
    return " (raised at %s:%d)" % (rel, tb.tb_lineno)


def _run_cases(out, args):
    """Each argv of args["cases"] through vLLM's parser, engine config and backend selector."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    for argv in args.get("cases") or []:
        case = {"error": None, "backends": {}, "after": []}
        said = io.StringIO()
        step = "parser"
        try:
            with contextlib.redirect_stderr(said):
                parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
                ns = parser.parse_args(list(argv))
            if getattr(ns, "model_tag", None):
                ns.model = ns.model_tag  # vllm/entrypoints/cli/serve.py l.56-57
            step = "config"
            with contextlib.redirect_stderr(said):
                config = AsyncEngineArgs.from_cli_args(ns).create_engine_config()
            mc = config.model_config
            case["backends"]["quantization"] = mc.quantization
            case["backends"]["kv_cache_dtype"] = str(config.cache_config.cache_dtype)
            case["backends"]["dtype"] = str(mc.dtype).replace("torch.", "")
            case["backends"]["use_mla"] = bool(mc.use_mla)
            step = "attention"
            with contextlib.redirect_stderr(said):
                case["backends"]["attention_backend"] = _backend(config)
        except ImportError as e:
            out["ran"] = False
            out["reason"] = "vLLM's resolution needs a module this env lacks: " + _err(e)
            out["cases"] = []
            break
        except SystemExit as e:
            lines = [l for l in said.getvalue().splitlines() if l.strip()]
            case["error"] = "vLLM's argument parser refused the launch: %s" % (
                lines[-1] if lines else "exit %s" % (e.code,)
            )
        except _GpuWall as e:
            case["after"].append(
                {
                    "step": step,
                    "by": "vllm",
                    "status": "stopped",
                    "detail": "it reaches the GPU (%s); what follows needs one" % e,
                }
            )
        except BaseException as e:
            where = {
                "config": "vLLM's engine config (AsyncEngineArgs.create_engine_config)",
                "attention": "vLLM's attention backend selector (get_attn_backend)",
            }.get(step, "vLLM")
            case["error"] = "%s refused the launch: %s%s" % (where, _err(e), _raised_at(e))
        out["cases"].append(case)
    return out


if not globals().get("_SERVE"):
    _out = _setup(ARGS)
    if _out["ran"]:
        _run_cases(_out, ARGS)
    _emit(_out)
