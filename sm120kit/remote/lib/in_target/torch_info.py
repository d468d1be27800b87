# Runs inside the target interpreter (python -c), after prelude.py: ARGS, _err, _emit, MARK
# and PROVENANCE_FILE come from there (sm120kit.remote.lib.targets.target_source).
out = {}
try:
    import torch

    out["version"] = torch.__version__
    abi = getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None)
    out["cxx11_abi"] = None if abi is None else bool(abi)
    out["cuda"] = getattr(torch.version, "cuda", None)
    out["dir"] = os.path.dirname(os.path.realpath(torch.__file__))
    out["cuda_available"] = None
    if ARGS.get("gpu"):
        out["cuda_available"] = bool(torch.cuda.is_available())
        if out["cuda_available"]:
            cap = torch.cuda.get_device_capability(0)
            out["capability"] = "%d.%d" % (cap[0], cap[1])
            out["device_name"] = torch.cuda.get_device_name(0)
except BaseException as e:
    out["error"] = _err(e)
_emit(out)
