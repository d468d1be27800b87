"""Smoke probe: can the installed CUDA extensions of a Python env load and run on this GPU?

Runs on the remote host with only a Python interpreter (no binutils, no CUDA toolkit, no GPU
needed). Stdlib-only, Python 3.8+: the controller sends it on stdin, bundled with the hosts'
library modules it imports (ELF and fatbin readers, the loader's search rules, the demangler,
the load diagnosis, the scripts run inside the target interpreter: `sm120kit.remote.lib`), and
runs ``python - '<json args>'``. Prints exactly one JSON document on stdout. This file holds
the per-package flow and the verdict document; the checks are in ``lib/probe_checks.py``, the
env's view in ``lib/probe_env.py``, the serving stack's checks in ``lib/probe_stack.py`` and
``lib/jit_toolchain.py``.

Arguments (one JSON document, argv[1])::

    {"python": "/path/to/python" | null,   # env to check: a python, a venv dir or a command
                                            # name on PATH; null: the interpreter running this
     "packages": ["minikernel", ...],       # distribution names
     "arch": "12.0" | null,                 # compute capability to judge for
     "gpu": false,                          # run one tiny real op per package when CUDA works
     "gpu_ops": {"pkg": "python code"},     # optional: override/add the op per package
     "jobs": 4, "timeout": 300,             # optional: parallel subprocesses (default: one
                                            # per CPU, memory permitting), seconds each
     "declared": {"pkg": {                  # optional, from the recipe (docs/smoke.md):
        "recipe": "r580", "source": "recipe r580", "version": "0.3.21",
        "arch": ["12.0"],                   # the recipe's target archs
        "torch": "==2.9.1",                 # its torch pin for this package version
        "not_for_arch": {"flash_ops": "why"}}},  # modules with no code for those archs
     # optional, from the package descriptors and packages/stack.py:
     "distributions": {"pkg": ["pkg-new-name"]},   # other published names
     "facts": {"pkg": {"loader": {...},                   # LoaderChoice.to_json()
                              "module_archs": [{"module", "sass", "versions", "reason"}]}},
     "discover": ["sgl-flash-mla", ...],    # check these too when installed
     "jit": {"flashinfer-python": {"rule": "flashinfer", "source": ...}, ...},  # JIT rules
     "top": "sglang",                       # import it (driver stub without a GPU), its pins
     "engines": [{"top": "vllm", "module": "vllm", "jit": {...}}, ...]}  # optional: the
                                            # first installed is the top (sm120kit/engines.py)

Checks per distribution: import order (after ``import torch`` and alone), undefined symbols
(dlopen RTLD_NOW after torch, plus a static ELF read with the loader's search rules; every
missing library, version and symbol sorted into causes), arch coverage (the ``.nv_fatbin``
headers; modules declared not for the arch are ``info``), the arch-dispatching loader
(``sm90/``, ``sm100/`` style variant directories, evaluated with a faked capability), and a
GPU op. The wheel's build record (``sm120kit-build.json`` in its dist-info) says which torch
it was built for; else a Requires-Dist pin; else the recipe's pin.

Output::

    {"probe_version": 1, "python": path, "python_version": "3.11.7",
     "arch": "12.0" | null, "arch_source": "args" | "gpu" | "none", "gpu": bool,
     "torch": {"version", "cxx11_abi", "cuda", "cuda_available", "capability", "error"},
     "error": "..." (only when the env could not be inspected),
     "missing_python": true (only when no interpreter is at "python"; "error" says why),
     "packages": {name: {"installed", "version", "requires_torch": "==2.9.1" | "" | null,
        "location", "provenance": {...} | null, "built_for": {"torch", "cuda", "source"} | null,
        "torch": {"built_for", "built_for_source", "installed", "installed_cuda", "cpu_build",
        "summary"}, "declared": {"source", "not_for_arch": {rel: why}} | null,
        "checks": [{"check": "import_order" | "undefined_symbols" |
        "arch_coverage" | "loader" | "gpu_op", "status": "pass" | "warn" | "fail" | "skip",
        "reason": one line, "details": {...}}],
        "extensions": [{"path", "rel", "module", "needed", "rpath", "runpath", "missing_libs",
          "needs_torch_loaded", "missing_symbols": [{"name", "demangled", "expected_from",
          "version"}], "missing_symbols_total", "missing_versions": [{"version", "library",
          "path"}], "sass": ["sm_120", "sm_120a"], "ptx": ["compute_120"], "has_fatbin",
          "dlopen_error", "import_error", "import_alone_error", "diagnosis": [...],
          "causes": [{"cause", "reason", "libraries", "symbols", "symbols_total"}]}]}},
     "discovered": ["sgl-flash-mla", ...],  # packages of "discover" found and checked
     "stack": null | {"top", "version", "packages": {name: {"distribution", "version",
        "location"}}, "checks": [{"check": "import" | "pins" | "jit_toolchain", ...}],
        "jit": {"status", "reason", "arch", "packages": {name: {"rule", "version", "status",
        "reason", "nvcc", "nvcc_version", "headers", "headers_version", ...}}}}}

Missing symbols carry ``cause`` and, for torch ones, ``variant`` (the installed torch's
closest definition). Per-file entries in a check's details may have status ``info``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sm120kit.remote.lib.cudaarch import cc_text, parse_cc
from sm120kit.remote.lib.diagnosis import drift_line, torch_is_cpu_build, torch_text
from sm120kit.remote.lib.forks import Servers
from sm120kit.remote.lib.names import dist_name
from sm120kit.remote.lib.probe_checks import (
    check_arch,
    check_gpu,
    check_import_order,
    check_loader,
    check_undefined,
    without_driver,
)
from sm120kit.remote.lib.probe_env import Context, catalogued, env_marker, exports, static_extension
from sm120kit.remote.lib.probe_stack import facts_not_for_arch, facts_source, stack_section
from sm120kit.remote.lib.targets import (
    INSPECT_SRC,
    LOAD_SRC,
    PROVENANCE_FILE,
    TORCH_SRC,
    resolve_python,
    run_target,
)

PROBE_VERSION = 1


def requires_torch(requires: list[str]) -> str | None:
    """'==2.9.1' from a Requires-Dist list, '' when torch is required without a version."""
    for req in requires:
        m = re.match(
            r"^\s*torch(?![\w.-])\s*(?:\[[^\]]*\])?\s*\(?\s*([^;)]*)\)?\s*(;.*)?$", req, re.I
        )
        if m:
            spec = m.group(1).strip().replace(" ", "")
            return spec or ""
    return None


def probe_package(
    ctx: Context, name: str, info: dict[str, Any], pool: ThreadPoolExecutor
) -> dict[str, Any]:
    """All checks for one installed distribution."""
    pin = requires_torch(info.get("requires") or [])
    declared = (ctx.args.get("declared") or {}).get(name) or {}
    facts = (ctx.args.get("facts") or {}).get(name) or {}
    built_for = package_built_for(name, info, declared, released_torch(ctx.marker, info, facts))
    libs = info["libraries"]
    # Device code the catalogue read from the very wheel installed is not read again.
    known = catalogued(ctx.marker, info, facts)
    exts = {lib["path"]: static_extension(ctx, lib["path"], known.get(lib["path"])) for lib in libs}
    for lib in libs:
        exts[lib["path"]]["rel"] = lib["rel"]
    for lib in libs:
        mod = lib.get("module")
        if mod and exports(lib["path"], "PyInit_" + mod.rsplit(".", 1)[-1]):
            exts[lib["path"]]["module"] = mod
        else:
            lib["module"] = None
    # The recipe's declaration when it is about this version and declares any; else what the
    # descriptor read from this exact release; else the recipe's (a build of another version).
    # An entry with no table (a stack's release taken from its lock) says nothing to win with.
    skip: dict[str, str] = {}
    about_this = _public(declared.get("version")) == _public(info.get("version"))
    if not (about_this and declared.get("not_for_arch")):
        skip = facts_not_for_arch(ctx, exts, facts, info.get("version"))
    facts_used = bool(skip)
    skip = skip or not_for_arch(ctx, libs, declared)
    ext_modules = {e["module"] for e in exts.values() if e["module"]}
    tops = [t for t in info.get("top_level") or [] if t not in ext_modules]
    # A package whose every extension module is not for this arch (sgl-deep-ep on 12.0) may
    # refuse to import without a device it supports: that is the same gap, reported, not judged.
    with_code = [p for p, e in exts.items() if e.get("module")]
    top_skip = (
        f"every extension module of {name} is not for this arch: {skip[with_code[0]]}"
        if with_code and all(p in skip for p in with_code)
        else None
    )

    jobs = []
    for t in tops:
        base = {"module": t, "kind": "package"}
        for with_torch in (True, False):
            args = dict(base, with_torch=with_torch)
            if not with_torch and ctx.servers is not None and ctx.servers.torch is not None:
                args["torch_first"] = True  # see in_target/load.py
            jobs.append(("top", t, with_torch, pool.submit(ctx.target, "load", LOAD_SRC, args)))
    for path, ext in exts.items():
        if ext.get("elf_error"):
            continue
        base = {"module": ext["module"], "kind": "extension", "path": path}
        args = dict(base, with_torch=True, dlopen=path)
        jobs.append(("so", path, True, pool.submit(ctx.target, "load", LOAD_SRC, args)))
        if ext["module"]:
            args = dict(base, with_torch=False)
            jobs.append(("so", path, False, pool.submit(ctx.target, "load", LOAD_SRC, args)))
    modules: dict[str, dict[str, Any]] = {}
    for kind, key, with_torch, fut in jobs:
        res, err = fut.result()
        if res is None:
            res = {"import": f"probe subprocess failed: {err}", "dlopen": None, "torch": None}
        if kind == "so":
            ext = exts[key]
            if with_torch:
                ext["dlopen_error"] = res.get("dlopen")
                ext["import_error"] = res.get("import") if ext["module"] else None
            else:
                ext["import_alone_error"] = res.get("import")
            if not ext["module"]:
                continue
            mod = modules.setdefault(
                key,
                {
                    "module": ext["module"],
                    "kind": "extension",
                    "path": key,
                    "with_torch": None,
                    "alone": None,
                    "not_for_arch": skip.get(key),
                },
            )
        else:
            mod = modules.setdefault(
                key,
                {
                    "module": key,
                    "kind": "package",
                    "with_torch": None,
                    "alone": None,
                    "not_for_arch": top_skip,
                },
            )
        mod["with_torch" if with_torch else "alone"] = res.get("import")
        if res.get("torch_first"):
            mod["torch_first"] = True
    for mod in modules.values():
        if mod.pop("torch_first", False):
            # It imports torch before any library of its own: alone is the import after torch.
            mod["alone"] = mod["with_torch"]
            mod["alone_is"] = (
                "the import after torch: it imports torch before any library of its own"
            )

    ext_list = list(exts.values())
    loader, excluded = check_loader(ctx, info, exts, facts.get("loader"))
    chosen = (loader.get("details") or {}).get("chosen")
    first = os.path.realpath(os.path.join(info["location"], chosen)) if chosen else None
    checks = [
        check_import_order(ctx, list(modules.values())),
        check_undefined(ctx, ext_list, built_for, skip, first),
        check_arch(ctx, ext_list, excluded, skip),
        loader,
        check_gpu(ctx, name),
    ]
    without_driver(ctx, checks, ext_list)
    return {
        "installed": True,
        "distribution": info.get("distribution"),
        "version": info.get("version"),
        "requires_torch": pin or None,
        "location": info.get("location"),
        "provenance": info.get("provenance"),
        "built_for": built_for,
        "torch": torch_summary(built_for, ctx.torch),
        "declared": {
            "source": "{} (module_archs of {} {})".format(
                facts_source(facts, info.get("version")), name, info.get("version")
            )
            if facts_used
            else declared.get("source"),
            "not_for_arch": {
                (os.path.relpath(p, info["location"])): why for p, why in sorted(skip.items())
            },
        }
        if declared or facts_used
        else None,
        "checks": checks,
        "extensions": ext_list,
    }


def torch_summary(built_for: dict[str, Any] | None, torch_info: dict[str, Any]) -> dict[str, Any]:
    """Which torch the package was built for and which this env has, side by side."""
    spec = str((built_for or {}).get("torch") or "")
    return {
        "built_for": (spec[2:] if spec.startswith("==") else spec) or None,
        "built_for_source": (built_for or {}).get("source"),
        "installed": torch_info.get("version"),
        "installed_cuda": torch_info.get("cuda"),
        "cpu_build": torch_is_cpu_build(torch_info),
        "summary": drift_line(built_for, torch_info)
        if built_for
        else "built for an unknown torch (no build record, wheel pin or recipe pin), this env has "
        + torch_text(torch_info),
    }


def _public(version: Any) -> str:
    """The public part of a version (no local ``+cu130``)."""
    return str(version or "").split("+", 1)[0]


def released_torch(
    marker: dict[str, Any], info: dict[str, Any], facts: dict[str, Any]
) -> dict[str, Any] | None:
    """The torch a release catalogue says this very wheel was locked beside: the installed
    wheel's sha256 (its direct_url.json, else the env's install marker) looked up in
    ``facts["wheels"]`` (every shipped catalogue, not only the host's stack)."""
    sha = info.get("wheel_sha256")
    if not sha:
        pkg = (marker.get("packages") or {}).get(dist_name(str(info.get("distribution") or "")))
        sha = pkg.get("sha256") if isinstance(pkg, dict) else None
    wheel = (facts.get("wheels") or {}).get(sha) if sha else None
    if not wheel or not wheel.get("torch"):
        return None
    return {
        "torch": "==" + str(wheel["torch"]),
        "cuda": wheel.get("torch_cuda"),
        "source": "{}: this wheel (sha256 {}) is locked beside torch {}".format(
            wheel.get("torch_source") or wheel.get("source") or "catalogue",
            str(sha)[:12],
            wheel["torch"],
        ),
    }


def package_built_for(
    name: str,
    info: dict[str, Any],
    declared: dict[str, Any],
    released: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Which torch the package was built for, and what says so.

    The build record sm120kit writes into the wheel wins; then a ``torch`` pin in the wheel's
    Requires-Dist; then the recipe's torch pin for this package version (wheels built
    elsewhere, like PyPI kernel wheels whose metadata pins no torch at all); then `released`,
    the torch a shipped lock pins beside this very wheel (`released_torch`), for a wheel no
    recipe of the host pins (an older stack's kernel wheel beside today's torch).
    """
    prov = info.get("provenance")
    if isinstance(prov, dict) and isinstance(prov.get("torch"), dict):
        version = prov["torch"].get("version")
        if version:
            return {
                "torch": "==" + str(version),
                "cuda": prov["torch"].get("cuda"),
                "source": f"build record {PROVENANCE_FILE}",
            }
    pin = requires_torch(info.get("requires") or [])
    if pin:
        return {"torch": pin, "cuda": None, "source": f"wheel metadata: Requires-Dist torch{pin}"}
    spec = declared.get("torch")
    if spec and _public(declared.get("version")) == _public(info.get("version")):
        return {
            "torch": str(spec),
            "cuda": None,
            "source": "recipe pin for {} {}".format(name, declared.get("version")),
            "recipe": declared.get("recipe"),
        }
    return released


def not_for_arch(
    ctx: Context, libs: list[dict[str, Any]], declared: dict[str, Any]
) -> dict[str, str]:
    """{path: reason} of the .so files the recipe declares carry no code for the judged arch.

    A declaration applies only when the capability judged is one the recipe targets. Keys are
    module names (``flash_ops``, ``pkg.flash_ops``) or paths inside the distribution.
    """
    table = declared.get("not_for_arch") or {}
    if not table or ctx.cc is None:
        return {}
    targets = set()
    for arch in declared.get("arch") or []:
        m = re.match(r"^(\d+)\.(\d+)", str(arch))
        if m:
            targets.add((int(m.group(1)), int(m.group(2))))
    if ctx.cc not in targets:
        return {}
    out: dict[str, str] = {}
    for lib in libs:
        rel = lib["rel"]
        stem = os.path.basename(rel).split(".")[0]
        dotted = rel.rsplit("/", 1)[0].replace("/", ".") + "." + stem if "/" in rel else stem
        for key, why in table.items():
            if key in (stem, dotted, rel) or dotted.endswith("." + key):
                out[lib["path"]] = str(why)
                break
    return out


def probe(args: dict[str, Any]) -> dict[str, Any]:
    """Run every check; the JSON-ready result."""
    python, missing = resolve_python(args.get("python"))
    args = dict(args, python=python)
    packages = list(args.get("packages") or [])
    out: dict[str, Any] = {"probe_version": PROBE_VERSION, "python": python, "packages": {}}
    if missing:
        out["error"] = missing
        out["missing_python"] = True
        return out
    timeout = float(args.get("timeout") or 300)
    stack_names = [args["top"]] if args.get("top") else []
    stack_names += list(args.get("discover") or []) + list(args.get("jit") or {})
    for engine in args.get("engines") or []:  # each engine's top and its own JIT packages
        stack_names += [engine["top"], *(engine.get("jit") or {})]
    inspect = {
        "packages": list(dict.fromkeys(packages + stack_names)),
        "distributions": args.get("distributions") or {},
    }
    # The fork servers start first: importing torch there overlaps the env's inspection.
    servers = Servers(python, timeout, enabled=args.get("fork", True) is not False)
    try:
        return _probe(args, out, inspect, servers)
    finally:
        servers.close()


def _probe(
    args: dict[str, Any], out: dict[str, Any], inspect: dict[str, Any], servers: Servers
) -> dict[str, Any]:
    python, timeout = args["python"], float(args.get("timeout") or 300)
    packages = list(args.get("packages") or [])
    env_info, err = run_target(python, INSPECT_SRC, inspect, timeout)
    fresh = 1
    if env_info is None:
        out["error"] = f"cannot inspect {python}: {err}"
        return out
    ready = servers.torch.wait_ready() if servers.torch is not None else None
    if ready is not None and ready.get("torch_info") is not None and not args.get("gpu"):
        torch_info = ready["torch_info"]  # the server's import, the same script, gpu=false
    else:
        torch_info, err = run_target(python, TORCH_SRC, {"gpu": bool(args.get("gpu"))}, timeout)
        fresh += 1
    if torch_info is None:
        torch_info = {"error": err}
    out["python_version"] = env_info.get("version")
    out["torch"] = {
        k: torch_info.get(k)
        for k in ("version", "cxx11_abi", "cuda", "cuda_available", "capability", "error")
    }
    if out["torch"]["version"] is None and env_info.get("torch_dist_version"):
        out["torch"]["version"] = env_info["torch_dist_version"]
    ctx = Context(args, env_info, torch_info)
    ctx.servers = servers
    ctx.marker = env_marker(env_info.get("prefix"))
    out["arch"] = cc_text(ctx.cc) if ctx.cc else None
    out["arch_source"] = ctx.arch_source
    out["gpu"] = bool(args.get("gpu"))
    # Every package's checks and the stack's are started at once, each in its own thread,
    # and share one pool of `jobs` interpreters (children of the fork servers, or fresh): no
    # package waits for the one before it to finish its slowest import.
    seen = set()
    todo = []
    for name in packages:
        info = env_info["packages"].get(name) or {"installed": False}
        if not info.get("installed"):
            out["packages"][name] = {
                "installed": False,
                "version": None,
                "requires_torch": None,
                "provenance": None,
                "built_for": None,
                "torch": None,
                "checks": [],
                "extensions": [],
            }
            continue
        out["packages"][name] = None  # its place in the order asked; filled below
        seen.add(info.get("distribution"))
        todo.append((name, info))
    # The serving stack's other packages this env holds: checked as if named, once per
    # distribution (a package asked for may be installed under its newer name).
    out["discovered"] = []
    for name in args.get("discover") or []:
        info = env_info["packages"].get(name) or {}
        if name in out["packages"] or not info.get("installed"):
            continue
        if info.get("distribution") in seen or not info.get("libraries"):
            continue
        seen.add(info.get("distribution"))
        out["discovered"].append(name)
        out["packages"][name] = None
        todo.append((name, info))
    pool = ThreadPoolExecutor(max_workers=max(1, ctx.jobs))
    with pool, ThreadPoolExecutor(max_workers=len(todo) + 1) as each:
        stack = each.submit(stack_section, ctx, env_info, args)
        started = [(name, each.submit(probe_package, ctx, name, info, pool)) for name, info in todo]
        for name, fut in started:
            out["packages"][name] = fut.result()
        out["stack"] = stack.result()
    runs = servers.counts()
    out["runs"] = dict(runs, interpreters=runs["interpreters"] + fresh)
    return out


def main(argv: list[str]) -> int:
    """Entry point: argv[1] is the JSON arguments; prints one JSON document."""
    try:
        args = json.loads(argv[1]) if len(argv) > 1 else {}
        if not isinstance(args, dict):
            raise ValueError("arguments must be a JSON object")
        parse_cc(args.get("arch"))
        if not isinstance(args.get("packages", []), list):
            raise ValueError("'packages' must be a list of distribution names")
    except ValueError as e:
        print(json.dumps({"probe_version": PROBE_VERSION, "error": f"bad arguments: {e}"}))
        return 2
    result = probe(args)
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
