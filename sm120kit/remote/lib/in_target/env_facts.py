# Runs inside the managed env's python (python -c), run by remote/make_env.py's ``inspect``
# step, on its own (no prelude): prints one JSON line, what the build and the cache key need
# to know about the env's interpreter and torch.
import json, sys, sysconfig

info = {
    "python": sys.executable,
    "python_version": "%d.%d.%d" % sys.version_info[:3],
    "python_abi": "cp%d%d" % sys.version_info[:2],
    "platform": sysconfig.get_platform().replace("-", "_").replace(".", "_"),
}
try:
    import torch

    info["torch_version"] = torch.__version__
    info["torch_cuda"] = torch.version.cuda
    info["cxx11_abi"] = bool(torch._C._GLIBCXX_USE_CXX11_ABI)
    flags = getattr(torch._C, "_cuda_getArchFlags", None)
    info["torch_arch_list"] = (flags() or "").split() if flags and torch.version.cuda else []
except Exception as exc:
    info["torch_error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(info, sort_keys=True))
