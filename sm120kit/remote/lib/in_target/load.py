# Runs inside the target interpreter (python -c), after prelude.py: ARGS, _err, _emit, MARK
# and PROVENANCE_FILE come from there (sm120kit.remote.lib.targets.target_source).
out = {"torch": None, "import": None, "dlopen": None}
if ARGS["with_torch"]:
    try:
        import torch
    except BaseException as e:
        out["torch"] = _err(e)
if ARGS.get("module"):
    try:
        import importlib, importlib.util

        if ARGS["kind"] == "extension":
            spec = importlib.util.spec_from_file_location(ARGS["module"], ARGS["path"])
            try:  # an extension module's init runs in module_from_spec
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            except ModuleNotFoundError:
                # A Python module the extension imports that only its own package puts on the
                # path (tilelang's cython wrapper imports tvm from tilelang/3rdparty): import
                # it as a user does, its packages first. A missing library (ImportError) is
                # not retried, so "needs torch first" still shows.
                importlib.import_module(ARGS["module"])
        else:
            importlib.import_module(ARGS["module"])
    except BaseException as e:
        out["import"] = _err(e)
if ARGS.get("dlopen"):
    import ctypes

    try:
        ctypes.CDLL(ARGS["dlopen"], mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    except OSError as e:
        out["dlopen"] = str(e)
_emit(out)
