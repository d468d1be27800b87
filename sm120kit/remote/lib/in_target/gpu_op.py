# Runs inside the target interpreter (python -c), after prelude.py: ARGS, _err, _emit, MARK
# and PROVENANCE_FILE come from there (sm120kit.remote.lib.targets.target_source).
out = {"error": None}
try:
    exec(compile(ARGS["code"], "<gpu-op>", "exec"), {"__name__": "__sm120kit_gpu_op__"})
except BaseException as e:
    out["error"] = _err(e)
_emit(out)
