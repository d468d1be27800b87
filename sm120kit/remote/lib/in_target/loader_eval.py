# Runs inside the target interpreter (python -c), after prelude.py: ARGS, _err, _emit, MARK
# and PROVENANCE_FILE come from there (sm120kit.remote.lib.targets.target_source).
#
# Evaluates an arch-dispatching loader without a GPU: torch.cuda answers with a fake device of
# the requested capability, and every extension load is recorded in order.
import importlib, importlib.machinery

out = {"attempts": [], "error": None, "torch_error": None}
major, minor = ARGS["cc"]
try:
    import torch

    class _Props(object):
        pass

    props = _Props()
    props.major, props.minor, props.name = major, minor, "sm120kit fake GPU %d.%d" % (major, minor)
    props.multi_processor_count, props.total_memory = 1, 1 << 30
    c = torch.cuda
    c.is_available = lambda: True
    c.device_count = lambda: 1
    c.current_device = lambda: 0
    c.set_device = lambda *a, **k: None
    c.get_device_capability = lambda *a, **k: (major, minor)
    c.get_device_properties = lambda *a, **k: props
    c.get_device_name = lambda *a, **k: props.name
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
