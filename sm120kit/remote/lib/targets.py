"""Scripts the extension probe runs inside the target interpreter (the env's python, which may
not be the one running the probe), and how it runs them: each prints one marked JSON line.

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from sm120kit.remote.lib.diagnosis import short_error

MARK = "@@SM120KIT-SMOKE@@"
#: The build record sm120kit writes into the dist-info of every wheel it builds.
PROVENANCE_FILE = "sm120kit-build.json"

_PRELUDE = (
    "import json, os, sys\nMARK = "
    + repr(MARK)
    + "\n"
    + r"""
ARGS = json.loads(sys.argv[1])
def _err(e):
    text = "%s: %s" % (type(e).__name__, e)
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[-1] if len(lines) == 1 else " | ".join(lines[-3:])
def _emit(obj):
    sys.stdout.write("\n" + MARK + json.dumps(obj) + "\n")
    sys.stdout.flush()
"""
)


INSPECT_SRC = (
    _PRELUDE
    + "PROVENANCE_FILE = "
    + repr(PROVENANCE_FILE)
    + "\n"
    + r"""
import re, site, importlib.machinery, importlib.util
import importlib.metadata as md
def norm(n):
    return re.sub(r"[-_.]+", "-", n).lower()
dists = {}
for d in md.distributions():
    try:
        name = d.metadata["Name"]
    except Exception:
        name = None
    if name and norm(name) not in dists:
        dists[norm(name)] = d
out = {"executable": os.path.realpath(sys.executable), "version": sys.version.split()[0],
       "ext_suffixes": list(importlib.machinery.EXTENSION_SUFFIXES), "packages": {},
       "site_packages": [], "torch_dir": None, "torch_dist_version": None}
try:
    out["site_packages"] = list(site.getsitepackages())
except Exception:
    pass
try:
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        out["torch_dir"] = os.path.dirname(os.path.realpath(spec.origin))
    out["torch_dist_version"] = md.version("torch")
except Exception:
    pass
shlib = re.compile(r"\.so(\.\d+)*$")
for name in ARGS["packages"]:
    d = dists.get(norm(name))
    if d is None:
        out["packages"][name] = {"installed": False}
        continue
    files = list(d.files or [])
    libs, tops = [], set()
    for f in files:
        rel = f.as_posix()
        if rel.startswith("..") or ".dist-info/" in rel or "__pycache__" in rel:
            continue
        first = rel.split("/")[0]
        if rel.endswith(".py") or shlib.search(rel):
            tops.add(first[:-3] if first.endswith(".py") else first)
        if not shlib.search(rel):
            continue
        mod = None
        for suf in sorted(out["ext_suffixes"], key=len, reverse=True):
            if rel.endswith(suf):
                mod = rel[: -len(suf)].replace("/", ".")
                break
        libs.append({"path": os.path.realpath(str(f.locate())), "rel": rel, "module": mod})
    top_txt = d.read_text("top_level.txt")
    if top_txt:
        tops = set(t.strip() for t in top_txt.splitlines() if t.strip() and not t.startswith("_")) or tops
    base = os.path.realpath(str(d.locate_file("")))
    top_list = []
    for t in sorted(tops):
        if "." in t or t.endswith(".so") or shlib.search(t):
            continue
        if os.path.isdir(os.path.join(base, t)) or os.path.isfile(os.path.join(base, t + ".py")):
            top_list.append(t)
        elif any(l["module"] == t for l in libs):
            top_list.append(t)
    provenance = None
    try:
        text = d.read_text(PROVENANCE_FILE)
        if text is not None:
            provenance = json.loads(text)
            if not isinstance(provenance, dict):
                provenance = {"error": "%s is not a JSON object" % PROVENANCE_FILE}
    except Exception as e:
        provenance = {"error": "%s unreadable: %s" % (PROVENANCE_FILE, _err(e))}
    out["packages"][name] = {"installed": True, "version": d.version, "requires": list(d.requires or []),
                             "location": base, "top_level": top_list, "libraries": libs,
                             "provenance": provenance}
_emit(out)
"""
)


TORCH_SRC = (
    _PRELUDE
    + r"""
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
"""
)


LOAD_SRC = (
    _PRELUDE
    + r"""
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
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
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
"""
)


# Evaluates an arch-dispatching loader without a GPU: torch.cuda answers with a fake device of
# the requested capability, and every extension load is recorded in order.
LOADER_SRC = (
    _PRELUDE
    + r"""
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
    rec = {"path": os.path.realpath(name) if name else name, "name": None, "error": None, "ctypes": True}
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
"""
)


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


GPU_SRC = (
    _PRELUDE
    + r"""
out = {"error": None}
try:
    exec(compile(ARGS["code"], "<gpu-op>", "exec"), {"__name__": "__sm120kit_gpu_op__"})
except BaseException as e:
    out["error"] = _err(e)
_emit(out)
"""
)


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
