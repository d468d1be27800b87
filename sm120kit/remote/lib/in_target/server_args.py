# Runs inside the serving env's interpreter (python -c), after prelude.py: ARGS, _err, _emit,
# _fake_gpu come from there (sm120kit.remote.lib.targets.target_source).
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
# ARGS: {"cases": [[argv...], ...], "fields": [name, ...], "cc": [12, 0], "memory_mib": int}
# Prints: {"ran": bool, "reason": str|None, "version": str|None, "gpu": str|None,
#          "cases": [{"error": str|None, "backends": {field: value}}]}
import contextlib
import io

# Preflight reads, it never downloads: the model's files must already be local.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

out = {"ran": False, "reason": None, "version": None, "gpu": None, "cases": []}
try:
    import torch

    if not torch.cuda.is_available():
        if ARGS.get("cc"):
            _fake_gpu(ARGS["cc"][0], ARGS["cc"][1], ARGS.get("memory_mib"))
            out["gpu"] = "no GPU: torch.cuda faked as one GPU of capability %d.%d, %s MiB" % (
                ARGS["cc"][0],
                ARGS["cc"][1],
                ARGS.get("memory_mib") or 1024,
            )
        else:
            out["gpu"] = "no GPU and no target arch: sglang sees no CUDA device"
    else:
        out["gpu"] = "the host's GPU: %s (%d.%d)" % (
            (torch.cuda.get_device_name(0),) + tuple(torch.cuda.get_device_capability(0))
        )
    import logging

    logging.disable(logging.CRITICAL)
    import sglang
    from sglang.srt.server_args import prepare_server_args

    out["version"] = getattr(sglang, "__version__", None)
    out["ran"] = True
except BaseException as e:
    out["reason"] = "cannot import sglang's ServerArgs in this env: " + _err(e)
if out["ran"]:
    for argv in ARGS.get("cases") or []:
        case = {"error": None, "backends": {}}
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said):
                args = prepare_server_args(list(argv))
            args.resolve_once()
            resolved = args.resolved_dict()
            for name in ARGS.get("fields") or []:
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
        out["cases"].append(case)
_emit(out)
