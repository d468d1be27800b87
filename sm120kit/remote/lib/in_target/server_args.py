# Runs inside the serving env's interpreter (python -c), after prelude.py: ARGS, _err, _emit,
# _present_gpu come from there (sm120kit.remote.lib.targets.target_source). resolve_server.py may
# follow it (then _SERVE is set and this file only defines functions).
#
# Asks sglang which backends a launch gets: its own parser and resolution, as `sglang serve`
# runs them (sglang 0.5.23 sglang/srt/server_args.py: prepare_server_args(argv) parses with
# ServerArgs.add_cli_args; ServerArgs.resolve_once() runs arg_groups/pipeline.py
# run_resolution_pipeline, the per-model overrides from the model's config.json included;
# resolved_dict() reads the result). Without a GPU, torch.cuda first answers as one GPU of
# ARGS["cc"] (_fake_gpu, the driver stub smoke uses) with ARGS["memory_mib"] of memory (sglang's
# memory hook asks nvidia-smi, then torch.cuda.mem_get_info): nothing runs on it. On a host
# without a driver the probe puts a libcuda.so.1 stub on LD_LIBRARY_PATH (lib/driver_stub.py):
# the resolution imports sgl_kernel, whose common_ops needs one to load.
#
# Then sglang's own checks past resolution, in the order a launch meets them (_after): each is
# sglang's function called as the launch calls it; the first GPU use (torch.cuda's lazy init,
# which every CUDA tensor, stream and event goes through) stops a step, never runs.
#
# ARGS: {"cases": [[argv...], ...], "fields": [name, ...], "cc": [12, 0], "memory_mib": int}
# Prints: {"ran": bool, "reason": str|None, "version": str|None, "gpu": str|None,
#          "cases": [{"error": str|None, "backends": {field: value},
#                     "after": [{"step", "by", "status", "detail"}]}]}
#   status: "ran" (passed), "refused" (sglang raised: detail is its words), "stopped" (it needs
#   the GPU, the loaded model or its memory pools: detail says which), "skipped" (not this launch's).
import contextlib
import io

# Preflight reads, it never downloads: the model's files must already be local.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class _GpuWall(BaseException):
    """Raised at the first GPU use after resolution (a BaseException: no `except Exception` in
    sglang turns it into a fallback)."""


def _setup(args):
    """Import torch and sglang's ServerArgs (faking the GPU first when there is none)."""
    out = {"ran": False, "reason": None, "version": None, "gpu": None, "cases": []}
    try:
        out["gpu"], faked = _present_gpu(args, "sglang")
        if faked:
            out["faked"] = True
        import logging

        logging.disable(logging.CRITICAL)
        import sglang
        from sglang.srt.server_args import prepare_server_args  # noqa: F401

        # What resolve_once imports on first use (the pipeline, model configs, quantization):
        # imported here so a forked child (resolve_server.py) starts past them.
        import sglang.srt.arg_groups.pipeline  # noqa: F401

        out["version"] = getattr(sglang, "__version__", None)
        out["ran"] = True
    except BaseException as e:
        out["reason"] = "cannot import sglang's ServerArgs in this env: " + _err(e)
    return out


def _step(after, name, by, fn, needs=None):
    """Run one of sglang's checks; record ran / refused (its words) / stopped (what it needs)."""
    item = {"step": name, "by": by, "status": "ran", "detail": None}
    after.append(item)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return fn()
    except _GpuWall as e:
        item["status"] = "stopped"
        item["detail"] = "it reaches the GPU (%s); what follows needs one" % e
    except AttributeError as e:
        runner = needs.get("runner") if needs else None
        if runner is not None and getattr(e, "obj", None) is runner:
            item["status"] = "stopped"
            item["detail"] = (
                "it reads ModelRunner.%s, which the loaded model and its memory pools set"
                % getattr(e, "name", "?")
            )
        else:
            item["status"], item["detail"] = "refused", _err(e)
    except ImportError as e:
        item["status"], item["detail"] = "stopped", "it imports a module this env lacks: " + _err(e)
    except BaseException as e:
        if _from_stub_driver(e):
            # Not sglang's refusal: the CUDA driver here is the stub (no GPU on this host).
            item["status"] = "stopped"
            item["detail"] = "it calls the CUDA driver, which is the stub here (%s)" % _err(e)
        else:
            item["status"], item["detail"] = "refused", _err(e)
    return None


#: How the CUDA runtime and driver name the stub library's error (CUDA_ERROR_STUB_LIBRARY,
#: cudaErrorStubLibrary; torch: "CUDA driver is a stub library").
_STUB_WORDS = ("stub library", "cudaErrorStubLibrary", "CUDA_ERROR_STUB_LIBRARY")


def _from_stub_driver(e):
    """Whether `e` (or what caused it) is the driver stub answering, not the code checked."""
    seen = 0
    while e is not None and seen < 8:
        if any(w in str(e) for w in _STUB_WORDS):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def _after(args, server_args, faked):
    """sglang 0.5.23's checks past resolve_once, as a launch meets them, each sglang's own
    function: Engine._launch_subprocesses' check_server_args (srt/entrypoints/engine.py), the
    scheduler's publish and ModelConfig.from_server_args (managers/scheduler.py,
    managers/tp_worker.py), ModelRunner's check_quantized_moe_compatibility
    (model_runner_components/moe_ep_setup.py) and configure_kv_cache_dtype
    (mem_cache/kv_cache_dtype.py), the DSA backend's launch validators (layers/attention/
    dsa_backend.py, kernels/ops/attention/flash_mla_sm120.py) and the attention backend
    factories (model_runner_components/attention_backend_setup.py, attention_registry.py) up
    to the first GPU use, on a ModelRunner without a model."""
    after = []
    import torch

    _step(after, "check_server_args", "ServerArgs.check_server_args", server_args.check_server_args)
    from sglang.srt.runtime_context import (
        SpawnRanks,
        get_model,
        get_parallel,
        get_schedule,
        get_spec,
        publish,
    )

    ok = _step(
        after,
        "publish",
        "runtime_context.publish(role='scheduler')",
        lambda: (
            publish(
                server_args,
                role="scheduler",
                ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0),
            )
            or True
        ),
    )
    if not ok and after[-1]["status"] != "ran":
        return after
    from sglang.srt.configs.model_config import AttentionArch, ModelConfig

    mc = _step(
        after,
        "model_config",
        "ModelConfig.from_server_args",
        lambda: ModelConfig.from_server_args(server_args, model_path=get_model().model_path),
    )
    if mc is None:
        return after
    par = get_parallel()
    from sglang.srt.model_executor.model_runner_components.moe_ep_setup import (
        check_quantized_moe_compatibility,
    )

    _step(
        after,
        "quantized_moe",
        "moe_ep_setup.check_quantized_moe_compatibility",
        lambda: check_quantized_moe_compatibility(
            model_config=mc,
            tp_size=par.tp_size,
            moe_ep_size=par.moe_ep_size,
            moe_dp_size=par.moe_dp_size,
        ),
    )
    from sglang.srt.mem_cache.kv_cache_dtype import configure_kv_cache_dtype

    # model=None: the checkpoint's kv_cache_quant_algo is read from the loaded model (not here).
    kv = _step(
        after,
        "kv_cache_dtype",
        "kv_cache_dtype.configure_kv_cache_dtype (model not loaded)",
        lambda: configure_kv_cache_dtype(
            server_args_kv_cache_dtype=get_model().kv_cache_dtype,
            model=None,
            model_dtype=mc.dtype,
            is_draft_worker=False,
            is_dflash=False,
            speculative_draft_attention_backend=None,
            speculative_draft_kv_cache_dtype=get_spec().speculative_draft_kv_cache_dtype,
        ),
    )
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.model_executor.model_runner_components import attention_backend_setup

    runner = ModelRunner.__new__(ModelRunner)
    runner.model_config, runner.server_args = mc, server_args
    runner.is_draft_worker, runner.draft_attention_backend = False, None
    runner.use_mla_backend = mc.attention_arch == AttentionArch.MLA
    runner.device, runner.gpu_id, runner.init_new_workspace, runner.dtype = (
        "cuda",
        0,
        False,
        mc.dtype,
    )
    runner.page_size = get_schedule().page_size  # as ModelRunner.__init__ sets it
    if kv is not None:
        runner.kv_cache_dtype_str = kv[0] or get_model().kv_cache_dtype
        runner.kv_cache_dtype = kv[1]
    needs = {"runner": runner}
    pair = _step(
        after,
        "attention_backends",
        "attention_backend_setup.resolve_attention_backend_strs",
        lambda: attention_backend_setup.resolve_attention_backend_strs(model_runner=runner),
        needs,
    )
    if pair is None:
        return after
    runner.prefill_attention_backend_str = pair.prefill
    runner.decode_attention_backend_str = pair.decode
    if "dsa" in (pair.prefill, pair.decode) or "nsa" in (pair.prefill, pair.decode):
        _dsa_checks(after, mc, kv, needs)
    if not faked:
        # A real GPU may be serving: preflight allocates nothing on it.
        after.append(
            {
                "step": "attention_backend_init",
                "by": "attention_registry",
                "status": "stopped",
                "detail": "the host's GPU is real: preflight builds no backend on it",
            }
        )
        return after

    def wall(*a, **k):
        raise _GpuWall("torch.cuda lazy init")

    lazy_init = torch.cuda._lazy_init
    torch.cuda._lazy_init = wall
    try:
        for name in dict.fromkeys([pair.prefill, pair.decode]):
            _step(
                after,
                "attention_backend_init:" + name,
                "attention_registry.ATTENTION_BACKENDS[%r](runner)" % name,
                lambda name=name: attention_backend_setup._build_full_attention_backend_from_str(
                    model_runner=runner, backend_str=name, init_new_workspace=False
                ),
                needs,
            )
    finally:
        torch.cuda._lazy_init = lazy_init
    return after


def _dsa_checks(after, mc, kv, needs):
    """The DSA backend's launch validators (DeepseekSparseAttnBackend.__init__ calls them after
    its first CUDA allocation, so they are called here with the values it passes)."""
    import torch
    from sglang.srt.runtime_context import get_exec, get_parallel

    exec_ = get_exec()
    prefill, decode = exec_.kernel.dsa_prefill_backend, exec_.kernel.dsa_decode_backend
    sm_major = torch.cuda.get_device_capability()[0]
    if kv is None:
        return
    from sglang.kernels.ops.attention.flash_mla_sm120 import (
        _validate_flashinfer_sparse_mla_backend,
    )

    _step(
        after,
        "dsa_flashinfer_sparse_mla",
        "flash_mla_sm120._validate_flashinfer_sparse_mla_backend",
        lambda: _validate_flashinfer_sparse_mla_backend(
            model_arch=(mc.hf_config.architectures or [""])[0],
            device_sm_major=sm_major,
            kv_cache_dtype=kv[1],
            prefill_impl=prefill,
            decode_impl=decode,
        ),
        needs,
    )
    if prefill == "triton_sparse_mla":
        from sglang.srt.layers.attention import dsa_backend

        _step(
            after,
            "dsa_triton_sparse_mla",
            "dsa_backend._validate_triton_sparse_mla_backend",
            lambda: dsa_backend._validate_triton_sparse_mla_backend(
                device_sm_major=sm_major,
                num_q_heads=mc.num_attention_heads // get_parallel().attn_tp_size,
                union=dsa_backend._resolve_dsa_triton_union(
                    union=exec_.kernel.dsa_triton_union,
                    deterministic=exec_.deterministic.enable_deterministic_inference,
                ),
                index_kpool=dsa_backend.get_dsa_index_kpool(mc.hf_config),
            ),
            needs,
        )


def _run_cases(out, args):
    """Each argv of args["cases"] through sglang's parser, resolution and later checks."""
    from sglang.srt.server_args import prepare_server_args

    for argv in args.get("cases") or []:
        case = {"error": None, "backends": {}, "after": []}
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said):
                server_args = prepare_server_args(list(argv))
            server_args.resolve_once()
            resolved = server_args.resolved_dict()
            for name in args.get("fields") or []:
                if name in resolved:
                    value = resolved[name]
                    case["backends"][name] = value if value is None else str(value)
        except ImportError as e:
            # A module sglang's resolution imports is missing from the env (transformers,
            # torchvision...): the env cannot answer, which is not sglang refusing the launch.
            out["ran"] = False
            out["reason"] = "sglang's resolution needs a module this env lacks: " + _err(e)
            out["cases"] = []
            break
        except SystemExit as e:
            # argparse refuses a flag ("invalid choice"): sglang would exit the same way.
            lines = [l for l in said.getvalue().splitlines() if l.strip()]
            case["error"] = "sglang's argument parser refused the launch: %s" % (
                lines[-1] if lines else "exit %s" % (e.code,)
            )
        except BaseException as e:
            case["error"] = "sglang's resolution refused the launch: " + _err(e)
        if case["error"] is None and args.get("after", True):
            try:
                case["after"] = _after(args, server_args, bool(out.get("faked")))
            except BaseException as e:
                case["after"].append(
                    {"step": "after", "by": "preflight", "status": "stopped", "detail": _err(e)}
                )
        out["cases"].append(case)
    return out


if not globals().get("_SERVE"):
    _out = _setup(ARGS)
    if _out["ran"]:
        _run_cases(_out, ARGS)
    _emit(_out)
