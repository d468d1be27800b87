"""Smoke probe: can the installed CUDA extensions of a Python env load and run on this GPU?

Runs on the remote host with only a Python interpreter (no binutils, no CUDA toolkit, no GPU
needed). Stdlib-only, Python 3.8+: the controller sends it on stdin, bundled with the hosts'
library modules it imports (ELF and fatbin readers, the loader's search rules, the demangler,
the load diagnosis, the scripts run inside the target interpreter: `sm120kit.remote.lib`), and
runs ``python - '<json args>'``. Prints exactly one JSON document on stdout. This file holds
the checks.

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
        "not_for_arch": {"flash_ops": "why"}}}}  # modules with no code for those archs

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
          "causes": [{"cause", "reason", "libraries", "symbols", "symbols_total"}]}]}}}

Missing symbols carry ``cause`` and, for torch ones, ``variant`` (the installed torch's
closest definition). Per-file entries in a check's details may have status ``info``.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sm120kit.remote.lib.cudaarch import arch_verdict, cc_text, parse_cc, target_key
from sm120kit.remote.lib.demangle import Demangler
from sm120kit.remote.lib.diagnosis import (
    close_variant,
    drift_line,
    expected_from,
    short_error,
    sort_causes,
    torch_is_cpu_build,
    torch_text,
)
from sm120kit.remote.lib.elf import open_elf
from sm120kit.remote.lib.fatbin import device_targets
from sm120kit.remote.lib.loader import Resolver, system_lib_dirs
from sm120kit.remote.lib.targets import (
    DEFAULT_GPU_OPS,
    GPU_SRC,
    INSPECT_SRC,
    LOAD_SRC,
    LOADER_SRC,
    PROVENANCE_FILE,
    TORCH_SRC,
    resolve_python,
    run_target,
)

PROBE_VERSION = 1
SHLIB_RE = re.compile(r"\.so(\.\d+)*$")
MAX_LISTED_SYMBOLS = 40
#: Read from scanned distributions at most this many missing symbols each (sorting needs all).
MAX_SCANNED_SYMBOLS = 5000
#: Memory one probe subprocess may take: an interpreter that imported torch and a big .so.
JOB_MEMORY = 1 << 30


def default_jobs() -> int:
    """Fresh interpreters at once: one per CPU, as many as the available memory holds."""
    cpus = os.cpu_count() or 1
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return max(1, min(cpus, int(line.split()[1]) * 1024 // JOB_MEMORY))
    except (OSError, ValueError, IndexError):
        pass
    return max(1, min(cpus, 4))


class Context:
    """What every check shares: the target interpreter, torch, the loader's view of the host."""

    def __init__(
        self, args: dict[str, Any], env_info: dict[str, Any], torch_info: dict[str, Any]
    ) -> None:
        self.args = args
        self.python = args["python"]
        self.timeout = float(args.get("timeout") or 300)
        self.jobs = int(args.get("jobs") or default_jobs())
        self.env_info = env_info
        self.torch = torch_info
        self.resolver = Resolver(os.environ.get("LD_LIBRARY_PATH", ""), system_lib_dirs())
        self.demangle = Demangler()
        self.torch_dir = torch_info.get("dir") or env_info.get("torch_dir")
        # What `import torch` loads: torch._C's NEEDED closure, plus the libraries it loads
        # with RTLD_GLOBAL (libtorch_global_deps), plus the nvidia wheels' libraries.
        self.preloaded: dict[str, str] = {}
        self.global_scope: list[str] = []
        exe = env_info.get("executable") or self.python
        exe_found, _ = self.resolver.closure(exe, None)
        self.global_scope = [exe] + list(exe_found.values())
        if self.torch_dir:
            for c in sorted(glob.glob(os.path.join(self.torch_dir, "_C*.so"))):
                found, _ = self.resolver.closure(c, None)
                self.preloaded.update(found)
            gdeps = os.path.join(self.torch_dir, "lib", "libtorch_global_deps.so")
            if os.path.isfile(gdeps):
                found, _ = self.resolver.closure(gdeps, None)
                self.preloaded["libtorch_global_deps.so"] = gdeps
                self.preloaded.update(found)
                self.global_scope += [gdeps] + list(found.values())
            for lib in sorted(
                glob.glob(os.path.join(self.torch_dir, "..", "nvidia", "*", "lib", "*.so*"))
            ):
                self.preloaded.setdefault(os.path.basename(lib), os.path.realpath(lib))
        self.arch_source = "args"
        cc = parse_cc(args.get("arch"))
        if cc is None and torch_info.get("capability"):
            cc = parse_cc(torch_info["capability"])
            self.arch_source = "gpu"
        if cc is None:
            self.arch_source = "none"
        self.cc = cc
        self._torch_tables: list[dict[str, set[str]]] | None = None
        self._provided: dict[str, list[str]] = {}
        self._variants: dict[str, str | None] = {}

    def lib_dirs(self) -> list[str]:
        """Where this env's CUDA libraries can come from: torch's nvidia-* wheels, then the
        loader's own search path."""
        dirs: list[str] = []
        if self.torch_dir:
            dirs += sorted(glob.glob(os.path.join(self.torch_dir, "..", "nvidia", "*", "lib")))
            dirs += sorted(glob.glob(os.path.join(self.torch_dir, "..", "nvidia", "*", "*", "lib")))
        for sp in self.env_info.get("site_packages") or []:
            dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
        dirs += self.resolver.env_dirs + self.resolver.sys_dirs
        out: list[str] = []
        for d in dirs:
            real = os.path.realpath(d)
            if real not in out and os.path.isdir(real):
                out.append(real)
        return out

    def provided(self, base: str) -> list[str]:
        """Sonames of CUDA library ``base`` (``libcudart``) this env has, e.g. libcudart.so.13."""
        if base not in self._provided:
            found: list[str] = []
            for d in self.lib_dirs():
                for path in sorted(glob.glob(os.path.join(d, base + ".so.*"))):
                    m = re.match(r"^(.+\.so\.\d+)", os.path.basename(path))
                    if m and m.group(1) not in found:
                        found.append(m.group(1))
            self._provided[base] = found
        return self._provided[base]

    def torch_tables(self) -> list[dict[str, set[str]]]:
        """Defined dynamic symbols of the installed torch's libraries (for close variants)."""
        if self._torch_tables is None:
            self._torch_tables = []
            if self.torch_dir:
                for path in sorted(glob.glob(os.path.join(self.torch_dir, "lib", "lib*.so*"))):
                    name = os.path.basename(path)
                    if not name.startswith(("libc10", "libtorch")):
                        continue
                    elf = open_elf(path)
                    if elf is not None:
                        self._torch_tables.append(elf.symbols()[1])
        return self._torch_tables

    def variant(self, symbol: dict[str, Any]) -> str | None:
        """The installed torch's closest definition of a missing torch symbol (memoized: the
        same symbol goes missing from many .so files of one package)."""
        if symbol["name"] not in self._variants:
            self._variants[symbol["name"]] = close_variant(
                symbol, self.torch_tables(), self.demangle
            )
        return self._variants[symbol["name"]]


def static_extension(ctx: Context, path: str) -> dict[str, Any]:
    """Static loader view of one .so after torch: NEEDED, missing libraries, symbols, versions."""
    ext: dict[str, Any] = {
        "path": path,
        "needed": [],
        "missing_libs": [],
        "needs_torch_loaded": [],
        "missing_symbols": [],
        "missing_symbols_total": 0,
        "missing_versions": [],
        "sass": [],
        "ptx": [],
        "dlopen_error": None,
        "import_error": None,
        "import_alone_error": None,
        "module": None,
    }
    elf = open_elf(path)
    if elf is None:
        ext["elf_error"] = "not a readable ELF file"
        return ext
    dyn = elf.dynamic()
    ext["needed"] = list(dyn["needed"])
    ext["rpath"] = list(dyn["rpath"])
    ext["runpath"] = list(dyn["runpath"])
    found, missing = ctx.resolver.closure(path, ctx.preloaded)
    ext["missing_libs"] = [name for name, _ in missing]
    _alone, missing_alone = ctx.resolver.closure(path, None)
    ext["needs_torch_loaded"] = [n for n, _ in missing_alone if n not in ext["missing_libs"]]
    ext["sass"], ext["ptx"], ext["has_fatbin"] = device_targets(path)

    undefined, _defined = elf.symbols()
    _defs, needs, _ = elf.versions()
    verfile = {v: f for f, v in needs.values()}
    # Versions each NEEDED file must define (the loader checks these first).
    for fname, vname in sorted(set(needs.values())):
        lib_path = found.get(fname)
        lib = open_elf(lib_path) if lib_path else None
        if lib is not None and vname not in lib.versions()[2]:
            ext["missing_versions"].append({"version": vname, "library": fname, "path": lib_path})
    scope = [path] + ctx.global_scope + list(found.values())
    tables = []
    seen: set[str] = set()
    for p in scope:
        real = os.path.realpath(p)
        if real in seen:
            continue
        seen.add(real)
        obj = open_elf(p)
        if obj is not None:
            tables.append(obj.symbols()[1])
    missing_syms = []
    for name, version, weak in undefined:
        if weak:
            continue
        want = version or ""
        if any(want in vs or "*" in vs for vs in (t.get(name, ()) for t in tables)):
            continue
        missing_syms.append((name, version))
    ext["missing_symbols_total"] = len(missing_syms)
    # Every one is kept until the causes are sorted (check_undefined), then the list is cut.
    for name, version in missing_syms[:MAX_SCANNED_SYMBOLS]:
        dem = ctx.demangle(name)
        ext["missing_symbols"].append(
            {
                "name": name,
                "demangled": dem,
                "version": version,
                "expected_from": expected_from(
                    name, dem, version, ext["needed"], verfile.get(version) if version else None
                ),
            }
        )
    return ext


def exports(path: str, symbol: str) -> bool:
    """Whether the ELF file defines dynamic ``symbol``."""
    elf = open_elf(path)
    return elf is not None and symbol in elf.symbols()[1]


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


def check_import_order(ctx: Context, modules: list[dict[str, Any]]) -> dict[str, Any]:
    """Every module after ``import torch`` and alone."""
    details = {"modules": modules}
    if not modules:
        return {
            "check": "import_order",
            "status": "skip",
            "reason": "no importable modules",
            "details": details,
        }
    terr = ctx.torch.get("error")
    judged = [m for m in modules if not m.get("not_for_arch")]
    failed = [m for m in judged if m["with_torch"]]
    if failed:
        m = failed[0]
        reason = "{} fails even after import torch: {}".format(
            m["module"],
            short_error(m["with_torch"]),
        )
        if terr:
            reason = f"import torch failed: {short_error(terr)}"
        return {"check": "import_order", "status": "fail", "reason": reason, "details": details}
    alone = [m for m in judged if m["alone"]]
    if alone:
        m = alone[0]
        err = short_error(m["alone"])
        hint = " (no RPATH into torch/lib)" if re.search(r"lib(c10|torch)\w*\.so", err) else ""
        reason = "needs torch first: {} alone fails: {}{}".format(m["module"], err, hint)
        return {"check": "import_order", "status": "warn", "reason": reason, "details": details}
    return {
        "check": "import_order",
        "status": "pass",
        "reason": f"{len(modules)} module(s) import alone and after torch",
        "details": details,
    }


def check_undefined(
    ctx: Context,
    exts: list[dict[str, Any]],
    built_for: dict[str, Any] | None,
    not_for_arch: dict[str, str] | None = None,
    first: str | None = None,
) -> dict[str, Any]:
    """Missing libraries, versions and symbols of every shipped .so after torch, sorted into
    causes. A .so the recipe declares not for this arch is listed, not judged."""
    if not exts:
        return {
            "check": "undefined_symbols",
            "status": "skip",
            "reason": "no shared objects",
            "details": {},
        }
    skip = not_for_arch or {}
    bad = []
    for ext in exts:
        problems = (
            ext["missing_libs"]
            or ext["missing_symbols"]
            or ext["missing_versions"]
            or ext["dlopen_error"]
        )
        if problems:
            causes = sort_causes(ext, ctx.torch, built_for, ctx.provided, ctx.variant)
            ext["causes"] = causes
            ext["diagnosis"] = [c["reason"] for c in causes]
            order = {c["cause"]: i for i, c in enumerate(causes)}
            ext["missing_symbols"].sort(key=lambda sym: order.get(sym.get("cause"), len(order)))
            bad.append(ext)
        del ext["missing_symbols"][MAX_LISTED_SYMBOLS:]
    where = cc_text(ctx.cc) if ctx.cc else "this arch"
    judged = [e for e in bad if e["path"] not in skip]
    # The file the package's loader picks first, then extension modules, then the rest.
    judged.sort(key=lambda e: (e["path"] != first, not e.get("module"), e.get("rel") or ""))
    details = {
        "checked": len(exts),
        "failing": [
            {
                "path": e["path"],
                "rel": e.get("rel"),
                "causes": [c["cause"] for c in e.get("causes", [])],
                "diagnosis": e.get("diagnosis", []),
                "dlopen_error": e["dlopen_error"],
            }
            for e in judged
        ],
        "not_judged": [
            {
                "path": e["path"],
                "rel": e.get("rel"),
                "status": "info",
                "reason": f"not for {where} by design, not judged: {skip[e['path']]}",
                "diagnosis": e.get("diagnosis", []),
            }
            for e in bad
            if e["path"] in skip
        ],
    }
    if not judged:
        extra = f" ({len(bad)} not for {where} by design, not judged)" if bad else ""
        return {
            "check": "undefined_symbols",
            "status": "pass",
            "reason": f"{len(exts) - len(bad)} shared object(s) resolve every symbol after torch{extra}",
            "details": details,
        }
    head = judged[0]
    diag = head.get("diagnosis") or ["does not load"]
    more = f" (+{len(judged) - 1} more .so)" if len(judged) > 1 else ""
    reason = "{}: {}{}".format(head.get("rel") or head["path"], "; ".join(diag), more)
    return {"check": "undefined_symbols", "status": "fail", "reason": reason, "details": details}


_RANK = {"pass": 0, "skip": 0, "warn": 1, "fail": 2}


def check_arch(
    ctx: Context,
    exts: list[dict[str, Any]],
    excluded: dict[str, str],
    not_for_arch: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Whether each .so with device code carries SASS (or PTX) for the GPU.

    ``excluded``: variant files the loader does not pick for this capability (not judged);
    ``not_for_arch``: files the recipe declares carry no code for this arch by design (info).
    """
    with_code = [e for e in exts if e["sass"] or e["ptx"]]
    declared = not_for_arch or {}
    details: dict[str, Any] = {
        "arch": cc_text(ctx.cc) if ctx.cc else None,
        "files": [],
        "not_loaded": excluded,
    }
    if not with_code:
        return {
            "check": "arch_coverage",
            "status": "skip",
            "reason": "no device code",
            "details": details,
        }
    if ctx.cc is None:
        targets = sorted({t for e in with_code for t in e["sass"] + e["ptx"]}, key=target_key)
        return {
            "check": "arch_coverage",
            "status": "skip",
            "reason": "no compute capability given (device code for {})".format(", ".join(targets)),
            "details": details,
        }
    where = cc_text(ctx.cc)
    worst = ("pass", "", "")
    infos = []
    for ext in with_code:
        if ext["path"] in excluded:
            continue
        status, reason = arch_verdict(ext["sass"], ext["ptx"], ctx.cc)
        label = ext.get("rel") or ext["path"]
        if ext["path"] in declared:
            have = ", ".join(ext["sass"] + ext["ptx"])
            reason = f"not for {where} by design: {declared[ext['path']]} (has {have})"
            details["files"].append(
                {"path": ext["path"], "rel": label, "status": "info", "reason": reason}
            )
            infos.append(label)
            continue
        details["files"].append(
            {"path": ext["path"], "rel": label, "status": status, "reason": reason}
        )
        if _RANK[status] > _RANK[worst[0]] or not worst[1]:
            worst = (status, reason, label)
    info_text = ""
    if infos:
        names = ", ".join(os.path.basename(i).split(".")[0] for i in infos)
        info_text = f"; {len(infos)} not for {where} by design ({names})"
    if not worst[1]:
        return {
            "check": "arch_coverage",
            "status": "skip",
            "reason": "no device code on the load path" + info_text,
            "details": details,
        }
    n = len(details["files"]) - len(infos)
    if worst[0] == "pass":
        reason = f"{n} .so with device code, all run on {where}"
        if n == 1:
            reason = f"{worst[2]}: {worst[1]}"
    else:
        reason = f"{worst[2]}: {worst[1]}"
    return {
        "check": "arch_coverage",
        "status": worst[0],
        "reason": reason + info_text,
        "details": details,
    }


VARIANT_DIR_RE = re.compile(r"(^|/)sm\d+[a-z]?/[^/]+$")


def variant_libraries(libs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Extension modules living in sm<NN>/ directories: one build per arch family."""
    return [lib for lib in libs if lib.get("module") and VARIANT_DIR_RE.search(lib["rel"])]


def check_loader(
    ctx: Context, info: dict[str, Any], exts: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Which sm*/ variant the package's own loader picks for the capability; its arch verdict."""
    variants = variant_libraries(info["libraries"])
    none: dict[str, str] = {}
    if not variants:
        return {
            "check": "loader",
            "status": "skip",
            "reason": "no per-arch variant directories",
            "details": {},
        }, none
    details: dict[str, Any] = {"variants": [v["rel"] for v in variants]}
    if ctx.cc is None:
        return {
            "check": "loader",
            "status": "skip",
            "reason": "no compute capability given",
            "details": details,
        }, none
    package = variants[0]["rel"].split("/")[0]
    res, err = run_target(
        ctx.python, LOADER_SRC, {"cc": list(ctx.cc), "package": package}, ctx.timeout
    )
    if res is None:
        return {
            "check": "loader",
            "status": "fail",
            "reason": f"loader probe failed: {err}",
            "details": details,
        }, none
    location = info["location"]
    variant_paths = {os.path.realpath(os.path.join(location, v["rel"])): v["rel"] for v in variants}
    pkg_dir = os.path.realpath(os.path.join(location, package)) + os.sep
    attempts = [a for a in res["attempts"] if a.get("path") and a["path"].startswith(pkg_dir)]
    details["capability"] = cc_text(ctx.cc)
    details["attempts"] = [
        {"rel": os.path.relpath(a["path"], location), "error": a["error"]} for a in attempts
    ]
    details["package_import_error"] = res.get("error")
    if not attempts:
        reason = f"the loader tried no file under {package}/ for {cc_text(ctx.cc)}"
        if res.get("error"):
            reason += ": " + short_error(res["error"])
        return {"check": "loader", "status": "fail", "reason": reason, "details": details}, none
    intended = attempts[0]["path"]
    loaded = next((a["path"] for a in attempts if a["error"] is None), None)
    rel = os.path.relpath(intended, location)
    details["chosen"] = rel
    details["loaded"] = os.path.relpath(loaded, location) if loaded else None
    ext = exts.get(intended) or {"sass": [], "ptx": []}
    details["chosen_sass"], details["chosen_ptx"] = ext["sass"], ext["ptx"]
    excluded = {
        p: f"not chosen by the loader for {cc_text(ctx.cc)}" for p in variant_paths if p != intended
    }
    status, why = arch_verdict(ext["sass"], ext["ptx"], ctx.cc)
    if status == "skip":
        status, why = "fail", "it has no device code"
    reason = f"loader picks {rel} for {cc_text(ctx.cc)}: {why}"
    if status != "pass":
        better = [
            variant_paths[p] for p in variant_paths
            if p != intended and arch_verdict(exts.get(p, {}).get("sass", []), [], ctx.cc)[0] == "pass"
        ]  # fmt: skip
        if better:
            reason += (
                f"; {better[0]} would run: this loader maps the GPU to the wrong directory "
                "(a loader patch such as the recipe's 0001-load-utils-sm120.patch makes 12.x "
                "pick the one holding sm_120 code)"
            )
        else:
            reason += f"; no variant here runs on {cc_text(ctx.cc)}: build one for it"
    if loaded != intended:
        first_err = attempts[0]["error"] or "?"
        reason += f"; loading it failed ({short_error(first_err, 120)})"
        status = "fail"
    return {"check": "loader", "status": status, "reason": reason, "details": details}, excluded


def check_gpu(ctx: Context, name: str) -> dict[str, Any]:
    """One tiny real op, only with a working GPU."""
    if not ctx.args.get("gpu"):
        return {
            "check": "gpu_op",
            "status": "skip",
            "reason": "no GPU run requested (gpu=false)",
            "details": {},
        }
    if not ctx.torch.get("cuda_available"):
        return {
            "check": "gpu_op",
            "status": "skip",
            "reason": "torch.cuda.is_available() is False in the target env",
            "details": {},
        }
    ops = dict(DEFAULT_GPU_OPS)
    ops.update(ctx.args.get("gpu_ops") or {})
    code = ops.get(name)
    if not code:
        return {
            "check": "gpu_op",
            "status": "skip",
            "reason": f"no known op for {name}",
            "details": {},
        }
    res, err = run_target(ctx.python, GPU_SRC, {"code": code}, ctx.timeout)
    error = err if res is None else res.get("error")
    if error:
        return {
            "check": "gpu_op",
            "status": "fail",
            "reason": short_error(error),
            "details": {"error": error},
        }
    return {
        "check": "gpu_op",
        "status": "pass",
        "reason": "op ran on {}".format(ctx.torch.get("device_name", "the GPU")),
        "details": {},
    }


def probe_package(
    ctx: Context, name: str, info: dict[str, Any], pool: ThreadPoolExecutor
) -> dict[str, Any]:
    """All checks for one installed distribution."""
    pin = requires_torch(info.get("requires") or [])
    declared = (ctx.args.get("declared") or {}).get(name) or {}
    built_for = package_built_for(name, info, declared)
    libs = info["libraries"]
    exts = {lib["path"]: static_extension(ctx, lib["path"]) for lib in libs}
    for lib in libs:
        exts[lib["path"]]["rel"] = lib["rel"]
    for lib in libs:
        mod = lib.get("module")
        if mod and exports(lib["path"], "PyInit_" + mod.rsplit(".", 1)[-1]):
            exts[lib["path"]]["module"] = mod
        else:
            lib["module"] = None
    skip = not_for_arch(ctx, libs, declared)
    ext_modules = {e["module"] for e in exts.values() if e["module"]}
    tops = [t for t in info.get("top_level") or [] if t not in ext_modules]

    jobs = []
    for t in tops:
        base = {"module": t, "kind": "package"}
        jobs.append(
            (
                "top",
                t,
                True,
                pool.submit(
                    run_target, ctx.python, LOAD_SRC, dict(base, with_torch=True), ctx.timeout
                ),
            )
        )
        jobs.append(
            (
                "top",
                t,
                False,
                pool.submit(
                    run_target, ctx.python, LOAD_SRC, dict(base, with_torch=False), ctx.timeout
                ),
            )
        )
    for path, ext in exts.items():
        if ext.get("elf_error"):
            continue
        base = {"module": ext["module"], "kind": "extension", "path": path}
        jobs.append(
            (
                "so",
                path,
                True,
                pool.submit(
                    run_target,
                    ctx.python,
                    LOAD_SRC,
                    dict(base, with_torch=True, dlopen=path),
                    ctx.timeout,
                ),
            )
        )
        if ext["module"]:
            jobs.append(
                (
                    "so",
                    path,
                    False,
                    pool.submit(
                        run_target, ctx.python, LOAD_SRC, dict(base, with_torch=False), ctx.timeout
                    ),
                )
            )
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
                key, {"module": key, "kind": "package", "with_torch": None, "alone": None}
            )
        mod["with_torch" if with_torch else "alone"] = res.get("import")

    ext_list = list(exts.values())
    loader, excluded = check_loader(ctx, info, exts)
    chosen = (loader.get("details") or {}).get("chosen")
    first = os.path.realpath(os.path.join(info["location"], chosen)) if chosen else None
    checks = [
        check_import_order(ctx, list(modules.values())),
        check_undefined(ctx, ext_list, built_for, skip, first),
        check_arch(ctx, ext_list, excluded, skip),
        loader,
        check_gpu(ctx, name),
    ]
    return {
        "installed": True,
        "version": info.get("version"),
        "requires_torch": pin or None,
        "location": info.get("location"),
        "provenance": info.get("provenance"),
        "built_for": built_for,
        "torch": torch_summary(built_for, ctx.torch),
        "declared": {
            "source": declared.get("source"),
            "not_for_arch": {
                (os.path.relpath(p, info["location"])): why for p, why in sorted(skip.items())
            },
        }
        if declared
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
    return str(version or "").split("+", 1)[0]


def package_built_for(
    name: str, info: dict[str, Any], declared: dict[str, Any]
) -> dict[str, Any] | None:
    """Which torch the package was built for, and what says so.

    The build record sm120kit writes into the wheel wins; then a ``torch`` pin in the wheel's
    Requires-Dist; then the recipe's torch pin for this package version (wheels built
    elsewhere, like PyPI kernel wheels whose metadata pins no torch at all).
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
    return None


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
    env_info, err = run_target(python, INSPECT_SRC, {"packages": packages}, timeout)
    if env_info is None:
        out["error"] = f"cannot inspect {python}: {err}"
        return out
    torch_info, err = run_target(python, TORCH_SRC, {"gpu": bool(args.get("gpu"))}, timeout)
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
    out["arch"] = cc_text(ctx.cc) if ctx.cc else None
    out["arch_source"] = ctx.arch_source
    out["gpu"] = bool(args.get("gpu"))
    with ThreadPoolExecutor(max_workers=max(1, ctx.jobs)) as pool:
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
            out["packages"][name] = probe_package(ctx, name, info, pool)
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
