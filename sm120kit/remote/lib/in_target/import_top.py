# Runs inside the target interpreter (python -c), after prelude.py: ARGS, _err, _emit, MARK
# and PROVENANCE_FILE come from there (sm120kit.remote.lib.targets.target_source).
#
# Imports a serving stack's top-level package (sglang) as a server start would. With
# ARGS["stub"] (no GPU here), torch.cuda first answers as one GPU of capability ARGS["cc"]
# (_fake_gpu, the driver stub): import-time code that asks for the device gets an answer,
# and nothing runs on it.
import importlib

out = {"error": None, "first_line": None, "missing_module": None, "stub": None, "version": None}
if ARGS.get("stub"):
    try:
        _fake_gpu(*ARGS["cc"])
        out["stub"] = "torch.cuda faked as one GPU of capability %d.%d" % tuple(ARGS["cc"])
    except BaseException as e:
        out["stub"] = "no stub: " + _err(e)
try:
    mod = importlib.import_module(ARGS["module"])
    out["version"] = getattr(mod, "__version__", None)
except BaseException as e:
    out["error"] = _err(e)
    text = "%s: %s" % (type(e).__name__, e)
    out["first_line"] = (text.strip().splitlines() or [type(e).__name__])[0]
    if isinstance(e, ModuleNotFoundError):
        out["missing_module"] = e.name
_emit(out)
