"""Scripts the extension probe runs inside the target interpreter (the env's python, which may
not be the one running the probe), and how it runs them: each prints one marked JSON line.

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

from sm120kit.remote.lib.diagnosis import short_error
from sm120kit.remote.lib.files import module_text
from sm120kit.remote.lib.names import PROVENANCE_FILE

MARK = "@@SM120KIT-SMOKE@@"

#: The scripts in ``in_target/`` (listed, as literals, so the hosts' bundle carries their text).
__bundle__ = (
    "sm120kit.remote.lib.in_target.server_args",
    "sm120kit.remote.lib.in_target.vllm_args",
    "sm120kit.remote.lib.in_target.prelude",
    "sm120kit.remote.lib.in_target.inspect_env",
    "sm120kit.remote.lib.in_target.torch_info",
    "sm120kit.remote.lib.in_target.load",
    "sm120kit.remote.lib.in_target.loader_eval",
    "sm120kit.remote.lib.in_target.gpu_op",
    "sm120kit.remote.lib.in_target.import_top",
    "sm120kit.remote.lib.in_target.fork_server",
    "sm120kit.remote.lib.in_target.resolve_server",
)


def _text(name: str) -> str:
    return module_text("sm120kit.remote.lib.in_target." + name)


#: The in-env resolvers, one per engine (sm120kit/engines.py `Engine.resolver`): the bundled
#: ``in_target/`` scripts that define ``_setup(args)`` (the imports, once) and ``_run_cases(out,
#: args)`` (one request); each runs them unless ``_SERVE`` is set (resolve_server.py then serves
#: requests from one warm interpreter). Read from the scripts, so a third engine's resolver is
#: its script in `__bundle__` and nothing else.
RESOLVER_NAMES = tuple(
    name
    for name in (module.rsplit(".", 1)[1] for module in __bundle__)
    if "\ndef _run_cases(" in _text(name)
)


def script_text(name: str) -> str:
    """The text of ``in_target/<name>.py`` alone (a fork server runs it after its prelude)."""
    return _text(name)


def target_source(name: str) -> str:
    """The program ``python -c`` runs for ``in_target/<name>.py``: constants, prelude, script."""
    head = "MARK = %r\nPROVENANCE_FILE = %r\n" % (MARK, PROVENANCE_FILE)
    return head + _text("prelude") + _text(name)


INSPECT_SRC = target_source("inspect_env")
TORCH_SRC = target_source("torch_info")
LOAD_SRC = target_source("load")
LOADER_SRC = target_source("loader_eval")
GPU_SRC = target_source("gpu_op")
IMPORT_TOP_SRC = target_source("import_top")
SERVER_ARGS_SRC = target_source("server_args")
#: The in-env resolver per engine, by `Engine.resolver` name.
RESOLVERS = {name: target_source(name) for name in RESOLVER_NAMES}
#: The warm resolution server per resolver (lib/warm.py): its functions, then the loop.
RESOLVE_SERVERS = {
    name: "MARK = %r\nPROVENANCE_FILE = %r\n_SERVE = True\n" % (MARK, PROVENANCE_FILE)
    + _text("prelude")
    + _text(name)
    + _text("resolve_server")
    for name in RESOLVER_NAMES
}

DEFAULT_GPU_OPS = {
    # The bundled sample kernel: add one to a CUDA tensor through its torch op.
    "minikernel": r"""
import torch, minikernel
x = torch.arange(1024, device="cuda", dtype=torch.float32)
fn = getattr(minikernel, "add_one", None)
if fn is None:
    fn = torch.ops.minikernel.add_one
y = fn(x)
torch.cuda.synchronize()
assert torch.equal(y.cpu(), x.cpu() + 1), "wrong result"
""",
}


def run_target(
    python: str, src: str, args: dict[str, Any], timeout: float, env: dict[str, str] | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    """Run ``src`` under ``python``; (its JSON result, None) or (None, one-line failure)."""
    try:
        proc = subprocess.run(
            [python, "-c", src, json.dumps(args)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f}s"
    except OSError as e:
        return None, f"cannot run {python}: {e}"
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARK):
            try:
                return json.loads(line[len(MARK) :]), None
            except ValueError:
                break
    if proc.returncode < 0:
        return None, f"killed by signal {-proc.returncode}"
    return None, short_error(proc.stderr or proc.stdout or f"exit {proc.returncode}")


def resolve_python(given: str | None) -> tuple[str, str | None]:
    """(interpreter path, None) for a python path, a venv/prefix directory or a command name;
    (what was given, one-line reason) when no interpreter is there."""
    if not given:
        return sys.executable, None
    path = os.path.expanduser(given)
    if os.sep not in path:
        found = shutil.which(path)
        if not found:
            return given, f"no Python interpreter '{given}' on PATH"
        path = found
    if os.path.isdir(path):
        for name in ("bin/python", "bin/python3"):
            candidate = os.path.join(path, name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate, None
        if not os.path.exists(os.path.join(path, "bin")):
            return given, f"{given} is a directory without bin/python (not a venv)"
        return given, f"{given}/bin has no python executable"
    if not os.path.exists(path):
        return given, f"no Python interpreter at {given} (does not exist)"
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return given, f"{given} is not an executable file"
    return path, None
