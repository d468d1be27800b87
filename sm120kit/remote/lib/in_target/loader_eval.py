# Runs inside the target interpreter (python -c), after prelude.py: ARGS, _err, _emit, MARK
# and PROVENANCE_FILE come from there (sm120kit.remote.lib.targets.target_source).
#
# Evaluates an arch-dispatching loader without a GPU: torch.cuda answers with a fake device of
# the requested capability, and every extension load is recorded in order.
import importlib, importlib.machinery

out = {"attempts": [], "error": None, "torch_error": None}
major, minor = ARGS["cc"]
try:
    _fake_gpu(major, minor)
except BaseException as e:
    out["torch_error"] = _err(e)
_orig = importlib.machinery.ExtensionFileLoader.create_module


def _create(self, spec):
    rec = {"path": os.path.realpath(spec.origin), "name": spec.name, "error": None}
    out["attempts"].append(rec)
    try:
        return _orig(self, spec)
    except BaseException as e:
        rec["error"] = _err(e)
        raise


importlib.machinery.ExtensionFileLoader.create_module = _create
import ctypes

_cdll_init = ctypes.CDLL.__init__


def _cdll(self, name, *a, **k):
    rec = {
        "path": os.path.realpath(name) if name else name,
        "name": None,
        "error": None,
        "ctypes": True,
    }
    out["attempts"].append(rec)
    try:
        return _cdll_init(self, name, *a, **k)
    except BaseException as e:
        rec["error"] = _err(e)
        raise


ctypes.CDLL.__init__ = _cdll
try:
    importlib.import_module(ARGS["package"])
except BaseException as e:
    out["error"] = _err(e)
_emit(out)
