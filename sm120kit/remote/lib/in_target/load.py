# Runs inside the target interpreter (python -c), after prelude.py: ARGS, _err, _emit, MARK
# and PROVENANCE_FILE come from there (sm120kit.remote.lib.targets.target_source).
out = {"torch": None, "import": None, "dlopen": None}
if ARGS["with_torch"]:
    try:
        import torch
    except BaseException as e:
        out["torch"] = _err(e)
if ARGS.get("torch_first"):
    # An import alone of a package that imports torch before any library of its own is, from
    # that point on, the import after torch: stop there and say so (the probe then takes the
    # import after torch for it). When anything else was loaded before torch than the
    # interpreter's own extension modules and system libraries (a library of the package or
    # of another distribution), the import runs to its end as before.
    def _mapped():
        with open("/proc/self/maps") as fh:
            return set(l.split(None, 5)[5].strip() for l in fh if len(l.split(None, 5)) == 6)

    _before = _mapped()
    # The interpreter's own extension modules, and system libraries (not a system Python's
    # packages under /usr/lib/python3*).
    _dynload = os.path.join(os.path.dirname(os.__file__), "lib-dynload") + os.sep
    _system = ("/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/")

    def _own(p):
        return p.startswith(_dynload) or (p.startswith(_system) and "/python" not in p)

    class _TorchFirst(object):
        def find_spec(self, name, path=None, target=None):
            if name == "torch":
                new = [p for p in _mapped() - _before if p.startswith("/") and not _own(p)]
                if not new:
                    out["torch_first"] = True
                    _emit(out)
                    sys.stdout.flush()
                    os._exit(0)
                sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
            return None

    sys.meta_path.insert(0, _TorchFirst())
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
