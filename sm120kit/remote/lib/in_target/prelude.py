# Runs first inside the target interpreter (python -c); the runner defines MARK and
# PROVENANCE_FILE above it (sm120kit.remote.lib.targets.target_source).
import json, os, sys

ARGS = json.loads(sys.argv[1])


def _err(e):
    text = "%s: %s" % (type(e).__name__, e)
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[-1] if len(lines) == 1 else " | ".join(lines[-3:])


def _emit(obj):
    sys.stdout.write("\n" + MARK + json.dumps(obj) + "\n")
    sys.stdout.flush()
