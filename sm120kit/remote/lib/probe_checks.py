"""The smoke probe's checks of one distribution: import order, undefined symbols (sorted into
causes), arch coverage, the arch-dispatching loader and the GPU op.

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8. Each check
returns ``{"check", "status", "reason", "details"}`` (docs/smoke.md).
"""

from __future__ import annotations

import os
import re
from typing import Any

from sm120kit.remote.lib.cudaarch import arch_verdict, cc_text, target_key
from sm120kit.remote.lib.diagnosis import short_error, sort_causes
from sm120kit.remote.lib.probe_env import MAX_LISTED_SYMBOLS, Context
from sm120kit.remote.lib.targets import DEFAULT_GPU_OPS, GPU_SRC, LOADER_SRC


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
    skipped = [m for m in modules if m.get("not_for_arch") and (m["with_torch"] or m["alone"])]
    extra = f" ({len(skipped)} not for this arch fail to import, not judged)" if skipped else ""
    return {
        "check": "import_order",
        "status": "pass",
        "reason": f"{len(modules) - len(skipped)} module(s) import alone and after torch{extra}",
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
    with_code = [e for e in exts if e["sass"] or e["ptx"] or e.get("relocatable")]
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
        stranded = [t for t in ext.get("relocatable") or [] if t not in ext["sass"] + ext["ptx"]]
        if status == "skip" and stranded:
            status, reason = "fail", f"no loadable device code for {where}"
        if status != "pass" and stranded:
            reason += (
                f"; {', '.join(stranded)} only as relocatable device code (__nv_relfatbin, "
                "the device link's input), which the runtime does not load"
            )
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


def declared_choice(
    loader: dict[str, Any] | None, cc: tuple[int, int] | None, variants: list[dict[str, Any]]
) -> str | None:
    """The variant file (rel path) the package descriptor's loader rule picks for `cc`."""
    if not loader:
        return None
    cap = cc_text(cc) if cc else None
    directory = (
        (loader.get("by_capability") or {}).get(cap, loader.get("otherwise"))
        if cap
        else loader.get("without_gpu")
    )
    prefix = "{}/{}/{}.".format(loader.get("package"), directory, loader.get("module"))
    return next((v["rel"] for v in variants if v["rel"].startswith(prefix)), None)


def check_loader(
    ctx: Context,
    info: dict[str, Any],
    exts: dict[str, dict[str, Any]],
    loader: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Which sm*/ variant the package's own loader picks for the capability; its arch verdict.

    `loader`: the package descriptor's rule (``LoaderChoice``, read from the released
    loader): what the loader should pick, said beside what it did, and used when the loader
    cannot run here (no torch, or torch fails to import)."""
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
    res, err = ctx.target("loader_eval", LOADER_SRC, {"cc": list(ctx.cc), "package": package})
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
    expected = declared_choice(loader, ctx.cc, variants)
    if loader:
        details["declared"] = {"chosen": expected, "source": loader.get("source")}
    if not attempts:
        reason = f"the loader tried no file under {package}/ for {cc_text(ctx.cc)}"
        if res.get("error"):
            reason += ": " + short_error(res["error"])
        if expected is None:
            return {"check": "loader", "status": "fail", "reason": reason, "details": details}, none
        # The loader did not run here: its released rule names the file it would load.
        exp_path = os.path.realpath(os.path.join(location, expected))
        ext = exts.get(exp_path) or {"sass": [], "ptx": []}
        _st, why = arch_verdict(ext["sass"], ext["ptx"], ctx.cc)
        details["chosen"], details["chosen_by"] = expected, "descriptor"
        reason += (
            f"; by its rule ({loader.get('source') if loader else ''}) it picks {expected}: {why}"
        )
        excluded = {
            p: f"not chosen by the loader for {cc_text(ctx.cc)}"
            for p in variant_paths
            if p != exp_path
        }
        return {"check": "loader", "status": "fail", "reason": reason, "details": details}, excluded
    intended = attempts[0]["path"]
    loaded = next((a["path"] for a in attempts if a["error"] is None), None)
    rel = os.path.relpath(intended, location)
    details["chosen"] = rel
    if expected is not None and expected != rel:
        details["declared_mismatch"] = True
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
    if details.get("declared_mismatch"):
        # The released loader's rule (the descriptor) and this one disagree: a patched or newer
        # loader. Said, not judged: the file actually picked was judged above.
        reason += f"; the package's released loader rule picks {expected} instead"
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
    res, err = ctx.target("gpu_op", GPU_SRC, {"code": code})
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


#: The NVIDIA driver's own library: a GPU-less host (a build box) has none by design.
DRIVER_LIB = "libcuda.so.1"
#: The checks a missing driver can fail on its own: a module that needs libcuda.so.1 cannot
#: load without it, so neither its import nor the loader's pick can be tried there.
DRIVER_BOUND = ("import_order", "undefined_symbols", "loader")


def without_driver(ctx: Context, checks: list[dict[str, Any]], exts: list[dict[str, Any]]) -> None:
    """On a host without a GPU whose loader finds no NVIDIA driver, a check that fails only
    because a module needs the driver becomes a warning that says so: nothing that needs
    libcuda.so.1 can be loaded there, which says nothing about the GPU host the env is for.
    A failure with any other cause stays a failure (an import error that names neither the
    driver nor a module needing it, a symbol another library should have given). On a host
    with a GPU it changes nothing: a missing driver there is a broken host."""
    if ctx.args.get("gpu"):
        return
    needs = [e for e in exts if DRIVER_LIB in (e.get("missing_libs") or [])]
    if not needs:
        return
    # Examples from the modules that are judged first (not those not for this arch).
    skipped = {n["path"] for c in checks for n in (c.get("details") or {}).get("not_judged") or []}
    needs.sort(key=lambda e: (e["path"] in skipped, e.get("rel") or e["path"]))
    names = [e.get("rel") or e["path"] for e in needs]
    bases = [os.path.basename(e["path"]) for e in needs]
    only = {
        e["path"] for e in needs if {c["cause"] for c in e.get("causes") or []} <= {"no_driver"}
    }
    for check in checks:
        if check["check"] not in DRIVER_BOUND or check["status"] != "fail":
            continue
        if check["check"] == "undefined_symbols":
            failing = (check.get("details") or {}).get("failing") or []
            if any(f["path"] not in only for f in failing):
                continue
        elif not any(n in check["reason"] for n in [DRIVER_LIB] + bases):
            continue  # it failed on something the driver does not explain
        example = next(
            (n for n, b in zip(names, bases) if b in check["reason"] or n in check["reason"]),
            names[0],
        )
        why = "needs the NVIDIA driver ({}, e.g. {} needs it), which this GPU-less host lacks"
        check["status"] = "warn"
        check["reason"] = "not checkable here: {}: {}".format(
            why.format(DRIVER_LIB, example), check["reason"]
        )
        check.setdefault("details", {})["needs_driver"] = names
