"""Preflight probe: what an SGLang launch would meet on this host, read without starting it.

Runs on the host with only a Python interpreter (stdlib only, Python 3.8+), bundled with the
hosts' library. Nothing is imported from the serving env: its distributions and their
extension modules are listed by the env's own interpreter (the smoke probe's inspect script),
and each module's device code is read from its ``.nv_fatbin`` headers (the smoke probe's
reader). Prints one JSON document.

Arguments (argv[1], JSON)::

    {"python": "/env/bin/python" | "/env" | null,
     "dists": ["sglang", "sglang-kernel", ...],
     "modules": [{"dist": ["<dist>", "<older name>"], "prefix": "<pkg>/<module>."}],
     "port": 30000, "host": "127.0.0.1",
     "model_path": "/models/x" | null, "timeout": 120,
     "resolve": {"cases": [[argv...]], "fields": [...], "cc": [12, 0]} | absent}

Output::

    {"python": path, "error": str | null,
     "dists": {name: {"installed", "version", "location", "requires"[, "cuda"]}},
     "installed": {canonical name: version} (every distribution of the env),
     "modules": [{"dist", "prefix", "installed_dist", "files": [{"rel", "path", "sass", "ptx"}]}],
     "port": {"port", "host", "in_use", "detail"},
     "model": {"path", "local", "exists", "is_dir", "is_file", "form", "bytes", "files", "truncated",
               "config": {"architectures", "model_type", "kv_lora_rank"} | null,
               "config_error": str (form "bad_config": what is wrong with config.json) | absent},
     "resolved": {"ran", "reason", "version", "gpu", "driver",
                  "cases": [{"error", "backends"}]} | absent}

``resolve``: the env's own interpreter runs sglang's argument resolution on each argv
(lib/in_target/server_args.py); it runs only for a local model directory with a config.json,
or a hub id whose config.json is in the host's Hugging Face cache, since sglang's per-model
overrides read it (run offline: nothing is downloaded).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
from typing import Any

from sm120kit.remote.lib import driver_stub, warm
from sm120kit.remote.lib.fatbin import device_targets
from sm120kit.remote.lib.targets import (
    INSPECT_SRC,
    RESOLVERS,
    resolve_python,
    run_target,
)

#: Files counted when sizing a model directory (a checkpoint has hundreds, not millions).
MAX_MODEL_FILES = 200000
CONFIG_KEYS = ("architectures", "model_type", "kv_lora_rank", "num_attention_heads")
#: A model's config.json is a few KB; one larger than this is not read (a wrong file, a hang).
MAX_CONFIG_BYTES = 16 << 20
#: Nesting a config may have: real ones nest 3-5 deep, and json's C decoder raises
#: RecursionError near the interpreter's limit (1000), which a pre-scan keeps it from reaching.
MAX_CONFIG_DEPTH = 64


def json_depth(text: str, limit: int) -> int:
    """How deep `text`'s arrays and objects nest (brackets outside strings), stopping early once
    past `limit`: a scan, not a parse, so no input can recurse."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


def read_config(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """A model's config.json as sglang (transformers' PretrainedConfig) needs it, a UTF-8 JSON
    object, or None and what is wrong with it ("is a directory", "is not JSON: ..."): never
    an exception, whatever the file is (a symlink loop, a FIFO, 100000 nested lists)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return None, "cannot be read: %s" % (exc.strerror or exc)
    if stat.S_ISDIR(st.st_mode):
        return None, "is a directory, not a file"
    if not stat.S_ISREG(st.st_mode):
        return None, "is not a regular file (a device, pipe or socket)"
    if st.st_size > MAX_CONFIG_BYTES:
        return None, "is %d bytes, over the %d a model config has" % (st.st_size, MAX_CONFIG_BYTES)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        return None, "cannot be read: %s" % (exc.strerror or exc)
    if not raw.strip():
        return None, "is empty"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, "is not UTF-8 text (byte %d)" % exc.start
    if json_depth(text, MAX_CONFIG_DEPTH) > MAX_CONFIG_DEPTH:
        return None, "nests arrays/objects deeper than %d levels" % MAX_CONFIG_DEPTH
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return None, "is not JSON: %s" % exc
    except RecursionError:
        return None, "nests arrays/objects too deeply to parse"
    if not isinstance(doc, dict):
        return None, "is a JSON %s, not an object" % type(doc).__name__.replace("dict", "object")
    return doc, None


def port_state(host: str, port: int) -> dict[str, Any]:
    """Whether a server could bind `host`:`port` now (a real bind, released at once)."""
    out: dict[str, Any] = {"port": port, "host": host, "in_use": False, "detail": ""}
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As uvicorn does: a port in TIME_WAIT is free, one somebody listens on is not.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        out["detail"] = "free (bound and released)"
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            out["in_use"] = True
            out["detail"] = "address already in use"
        else:
            out["detail"] = "cannot bind: %s" % (exc.strerror or exc)
            out["error"] = True
    finally:
        sock.close()
    return out


def model_form(path: str, is_dir: bool, is_file: bool) -> str:
    """What sglang 0.5.23 could load from `path`: "hf" (a directory with config.json),
    "mistral" (one with params.json, sglang/srt/arg_groups/model_path_hook.py), "gguf" (a
    file named *.gguf or starting with b"GGUF", sglang/srt/utils/hf_transformers/common.py
    check_gguf_file), else why not: "empty_dir", "no_config", "not_gguf", "special"
    (a device, a pipe: /dev/null)."""
    if is_dir:
        try:
            names = set(os.listdir(path))
        except OSError:
            return "unreadable"
        if "config.json" in names:
            return "hf"
        if "params.json" in names:
            return "mistral"
        return "no_config" if names else "empty_dir"
    if not is_file:
        return "special"
    if path.endswith(".gguf"):
        return "gguf"
    try:
        with open(path, "rb") as fh:
            return "gguf" if fh.read(4) == b"GGUF" else "not_gguf"
    except OSError:
        return "unreadable"


def model_state(path: str) -> dict[str, Any]:
    """A model path as the server would see it: local or a hub id, its size, its config."""
    expanded = os.path.expanduser(path)
    local = expanded.startswith(("/", ".")) or os.path.exists(expanded)
    out: dict[str, Any] = {"path": path, "local": local, "exists": False}
    if not local:
        return out
    out["exists"] = os.path.exists(expanded)
    out["is_dir"] = os.path.isdir(expanded)
    out["is_file"] = os.path.isfile(expanded)
    if not out["exists"]:
        return out
    out["form"] = model_form(expanded, out["is_dir"], out["is_file"])
    total, files, truncated = 0, 0, False
    if out["is_dir"]:
        for root, _dirs, names in os.walk(expanded):
            for name in names:
                files += 1
                try:
                    total += os.path.getsize(os.path.join(root, name))
                except OSError:
                    pass
                if files >= MAX_MODEL_FILES:
                    truncated = True
                    break
            if truncated:
                break
    elif out["is_file"]:
        total, files = os.path.getsize(expanded), 1
    out.update(bytes=total, files=files, truncated=truncated, config=None)
    if out["form"] == "hf":
        doc, problem = read_config(os.path.join(expanded, "config.json"))
        if doc is None:
            out["form"] = "bad_config"
            out["config_error"] = problem
        else:
            sub = doc.get("text_config")
            text: dict[str, Any] = sub if isinstance(sub, dict) else {}
            out["config"] = {k: doc.get(k, text.get(k)) for k in CONFIG_KEYS}
    return out


def module_files(info: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
    """The extension modules of one wanted entry, with the device code each carries."""
    entry = {"dist": wanted["dist"], "prefix": wanted["prefix"], "installed_dist": None}
    entry["files"] = []
    for name in wanted["dist"]:
        pkg = (info.get("packages") or {}).get(name) or {}
        if not pkg.get("installed"):
            continue
        entry["installed_dist"] = name
        entry["version"] = pkg.get("version")
        for lib in pkg.get("libraries") or []:
            if not lib["rel"].startswith(wanted["prefix"]):
                continue
            sass, ptx, has_fatbin = device_targets(lib["path"])
            entry["files"].append(
                {
                    "rel": lib["rel"],
                    "path": lib["path"],
                    "sass": sass,
                    "ptx": ptx,
                    "has_fatbin": has_fatbin,
                }
            )
        break
    return entry


#: torch's build-time CUDA as its generated torch/version.py states it (``cuda: Optional[str] =
#: '13.0'``, ``cuda = None`` for a CPU build): torch 2.14.1 from PyPI has no ``+cu130`` tag.
_TORCH_CUDA = re.compile(r"^cuda\s*(?::[^=]*)?=\s*(?:'([^']*)'|\"([^\"]*)\"|None)", re.M)


def torch_cuda(location: str | None) -> str | None:
    """The CUDA version torch was built with ("13.0"), "cpu" for a CPU build, or None when
    its torch/version.py cannot be read: from the dist's own file, without importing torch."""
    if not location:
        return None
    try:
        with open(os.path.join(location, "torch", "version.py")) as fh:
            text = fh.read(1 << 16)
    except (OSError, UnicodeDecodeError):
        return None
    m = _TORCH_CUDA.search(text)
    if m is None:
        return None
    return m.group(1) or m.group(2) or "cpu"


def probe(args: dict[str, Any]) -> dict[str, Any]:
    """Everything preflight reads on the host; JSON-ready. ``{"stop_warm": true}``: stop this
    user's warm resolution servers instead (lib/warm.py stop_all)."""
    if args.get("stop_warm"):
        return warm.stop_all()
    out: dict[str, Any] = {"error": None, "dists": {}, "modules": []}
    if args.get("port"):
        out["port"] = port_state(args.get("host") or "127.0.0.1", int(args["port"]))
    if args.get("model_path"):
        out["model"] = model_state(str(args["model_path"]))
    python, missing = resolve_python(args.get("python"))
    out["python"] = python
    if missing:
        out["error"] = missing
        return out
    names = list(args.get("dists") or [])
    for wanted in args.get("modules") or []:
        names += [n for n in wanted["dist"] if n not in names]
    info, err = run_target(
        python,
        INSPECT_SRC,
        {"packages": names, "all_dists": True},
        float(args.get("timeout") or 120),
    )
    if info is None:
        out["error"] = "cannot inspect %s: %s" % (python, err)
        return out
    for name in names:
        pkg = (info.get("packages") or {}).get(name) or {}
        out["dists"][name] = {
            "installed": bool(pkg.get("installed")),
            "version": pkg.get("version"),
            "location": pkg.get("location"),
            "requires": pkg.get("requires") or [],
        }
        if name == "torch" and pkg.get("installed"):
            out["dists"][name]["cuda"] = torch_cuda(pkg.get("location"))
    out["installed"] = dict(info.get("installed") or {})
    out["modules"] = [module_files(info, w) for w in args.get("modules") or []]
    if args.get("resolve"):
        site = env_site(info.get("packages") or {})
        request = dict(args["resolve"])
        # What the warm server's imported state depends on (lib/warm.py server_key).
        request["fingerprint"] = sorted(
            (n, d["version"], d["location"]) for n, d in out["dists"].items()
        )
        out["resolved"] = resolve(python, request, out.get("model") or {}, args, site)
    return out


def env_site(packages: dict[str, Any]) -> str | None:
    """The site-packages directory of the env's installed distributions (the one most of
    those inspected are in), whose every compiled module the driver stub serves: the engine's
    own package (sglang, vllm) and all it loads (torch, its kernels), whichever engine runs."""
    counts: dict[str, int] = {}
    for pkg in packages.values():
        if pkg.get("installed") and pkg.get("location"):
            counts[pkg["location"]] = counts.get(pkg["location"], 0) + 1
    return max(sorted(counts), key=lambda k: counts[k]) if counts else None


def hub_cache() -> str:
    """The Hugging Face hub cache directory as huggingface_hub finds it (HF_HUB_CACHE, else
    HF_HOME/hub, else ~/.cache/huggingface/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return os.path.join(home, "hub")


def hub_snapshot(model_id: str) -> tuple[str, str] | None:
    """(snapshot directory, revision) of hub model `model_id` (``org/name``) in the host's
    Hugging Face cache, or None: huggingface_hub's layout,
    ``models--org--name/snapshots/<revision>/config.json``, the revision ``refs/main`` names
    first, else the snapshots in name order."""
    if model_id.count("/") != 1:
        return None
    root = os.path.join(hub_cache(), "models--" + model_id.replace("/", "--"))
    snaps = os.path.join(root, "snapshots")
    revs = []
    try:
        with open(os.path.join(root, "refs", "main")) as fh:
            revs.append(fh.read().strip())
    except OSError:
        pass
    try:
        revs += sorted(os.listdir(snaps))
    except OSError:
        return None
    for rev in revs:
        path = os.path.join(snaps, rev, "config.json")
        if rev and os.path.isfile(path):
            return os.path.join(snaps, rev), rev
    return None


def hub_config(model_id: str) -> str | None:
    """The cached config.json of hub model `model_id` (`hub_snapshot`), or None."""
    found = hub_snapshot(model_id)
    return os.path.join(found[0], "config.json") if found else None


def has_driver() -> bool:
    """Whether this host's dynamic loader finds a CUDA driver (``libcuda.so.1``)."""
    try:
        ctypes.CDLL(driver_stub.SONAME)
        return True
    except OSError:
        return False


def resolve(
    python: str,
    request: dict[str, Any],
    model: dict[str, Any],
    args: dict[str, Any],
    site: str | None = None,
) -> dict[str, Any]:
    """sglang's own resolution of each argv in the env, or why it could not run.

    On a host without a CUDA driver, the env's interpreter runs with a ``libcuda.so.1`` stub
    first on LD_LIBRARY_PATH (lib/driver_stub.py), defining the driver entry points the
    env's modules (`site`: its site-packages) import, in a temporary directory removed after.
    A hub id's config.json comes from the request (``model_config``: ``--model-config`` read
    on the controller), else from the host's Hugging Face cache: sglang is given the cached
    snapshot's directory in place of the hub id, so that nothing in it asks the hub (sglang
    0.5.23's env, given the id with HF_HUB_OFFLINE=1 and a snapshot but no refs/main, refuses:
    "couldn't connect to 'https://huggingface.co'"). ``model_source`` in the answer says which.
    """
    config_dir = None
    model_id = str(model.get("path") or "")
    snapshot = None if model.get("local") else hub_snapshot(model_id)
    if request.get("model_config") is None and snapshot is not None:
        request = dict(request)
        request["cases"] = [
            with_model(argv, model_id, snapshot[0]) for argv in request.get("cases") or []
        ]
        doc = _resolve(python, request, model, args, site, False)
        doc["model_source"] = "config from the host's HF cache (%s)" % snapshot[1]
        return doc
    if request.get("model_config") is not None and not model.get("local"):
        # --model-config: the hub model's config.json from the controller, in a directory
        # sglang reads in place of the hub id (removed after the run).
        config_dir = tempfile.mkdtemp(prefix="sm120kit-model-config-")
        with open(os.path.join(config_dir, "config.json"), "w") as fh:
            json.dump(request["model_config"], fh)
        request = dict(request)
        request["cases"] = [
            with_model(argv, str(model.get("path") or ""), config_dir)
            for argv in request.get("cases") or []
        ]
        request.pop("model_config")
    try:
        doc = _resolve(python, request, model, args, site, config_dir is not None)
        if config_dir is not None:
            doc["model_source"] = "config from --model-config"
        return doc
    finally:
        if config_dir:
            shutil.rmtree(config_dir, ignore_errors=True)


def with_model(argv: list[str], model: str, path: str) -> list[str]:
    """`argv` with its model (``--model-path M``, ``--model M``, ``--model-path=M``) as `path`."""
    out = list(argv)
    for i, word in enumerate(out):
        if word in ("--model-path", "--model") and i + 1 < len(out) and out[i + 1] == model:
            out[i + 1] = path
        elif word in ("--model-path=" + model, "--model=" + model):
            out[i] = word.split("=", 1)[0] + "=" + path
    return out


def _resolve(
    python: str,
    request: dict[str, Any],
    model: dict[str, Any],
    args: dict[str, Any],
    site: str | None,
    given_config: bool,
) -> dict[str, Any]:
    """`resolve` itself; `given_config`: the model's config came with the request."""
    if given_config:
        pass  # --model-config: the directory written by `resolve` is the model sglang reads
    elif not model.get("local"):
        cached = hub_config(str(model.get("path") or ""))
        if cached is None:
            return {
                "ran": False,
                "reason": "the model is a hub id with no config.json in this host's Hugging Face "
                "cache (%s) and no --model-config: preflight does not download" % hub_cache(),
            }
        problem = read_config(cached)[1]
        if problem:
            return {"ran": False, "reason": "the cached %s %s" % (cached, problem)}
    elif model.get("form") != "hf" or not model.get("config"):
        return {"ran": False, "reason": "the model path has no readable config.json"}
    request = dict(request)
    # The engine's resolver (request "resolver", sm120kit/engines.py); sglang's by default.
    resolver = str(request.pop("resolver", None) or "server_args")
    source = RESOLVERS.get(resolver)
    if source is None:
        return {"ran": False, "reason": "no in-env resolver %r on this host's library" % resolver}
    idle = float(request.pop("warm", 0) or 0)
    fingerprint = request.pop("fingerprint", None)
    timeout = float(args.get("timeout") or 120)
    if idle > 0:
        # the warm server keeps the engine's imports (one server per env and resolver)
        doc = warm_resolve(python, request, site, fingerprint, idle, timeout, resolver)
        if doc is not None:
            return doc
    env, stub_dir, driver = driver_env(site)
    try:
        doc, err = run_target(python, source, request, timeout, env=env)
    finally:
        if stub_dir:
            shutil.rmtree(stub_dir, ignore_errors=True)
    if doc is None:
        return {"ran": False, "reason": "the resolution script failed: %s" % err, "driver": driver}
    doc["driver"] = driver
    doc["server"] = "a fresh interpreter"
    return doc


def driver_env(site: str | None) -> tuple[dict[str, str] | None, str | None, str]:
    """(environment, stub directory, what the driver is) for the env's interpreter: on a host
    without a CUDA driver, a libcuda.so.1 stub in a new temporary directory first on
    LD_LIBRARY_PATH (the caller removes it); else the host's own (None, None, ...)."""
    if has_driver():
        return None, None, "the host's libcuda.so.1"
    names = driver_stub.needed_symbols(driver_stub.shared_objects(site)) if site else set()
    try:
        stub_dir = tempfile.mkdtemp(prefix="sm120kit-libcuda-")
        driver_stub.write_stub(stub_dir, names)
    except (OSError, ValueError) as exc:
        return None, None, "no driver and no stub (%s)" % exc
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (stub_dir, env.get("LD_LIBRARY_PATH")) if p)
    driver = (
        "no driver: a libcuda.so.1 stub defining the %d entry points the env's "
        "modules import, each returning CUDA_ERROR_STUB_LIBRARY" % len(names)
    )
    return env, stub_dir, driver


def warm_resolve(
    python: str,
    request: dict[str, Any],
    site: str | None,
    fingerprint: Any,
    idle: float,
    timeout: float,
    resolver: str = "server_args",
) -> dict[str, Any] | None:
    """The answer of the warm server for this env and resolver (lib/warm.py), starting one
    when none listens; None when no server could answer (the caller runs a fresh
    interpreter)."""
    where = warm.socket_dir()
    if where is None:
        return None
    gpu = [request.get("cc"), request.get("memory_mib"), has_driver()]
    path = os.path.join(where, warm.server_key(python, site, fingerprint, gpu, resolver))
    if len(path.encode()) > warm.MAX_SOCKET_PATH:
        return None
    doc = warm.ask(path, request, timeout) if os.path.exists(path) else None
    how = "a child of the warm resolution server (the engine imported before)"
    if doc is None:
        try:
            os.unlink(path)  # a server gone (killed, host rebooted /tmp kept): its stale name
        except OSError:
            pass
        env, stub_dir, driver = driver_env(site)
        if not warm.start(python, path, request, env, stub_dir, driver, idle, timeout, resolver):
            if stub_dir:
                shutil.rmtree(stub_dir, ignore_errors=True)
            return None
        doc = warm.ask(path, request, timeout)
        how = "a child of the warm resolution server, started now"
    if doc is None:
        return None
    doc["server"] = how
    return doc


def main(argv: list[str]) -> int:
    args = json.loads(argv[1]) if len(argv) > 1 else {}
    print(json.dumps(probe(args), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
