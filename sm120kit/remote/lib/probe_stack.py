"""The smoke probe's view of a serving stack: which of its packages an env holds, whether the
top-level package (sglang, vllm: the engine the env holds) imports, whether its pins hold, and the modules a released wheel
carries for other archs only (``module_archs``: the release catalogues' facts, read from the
wheels, matched to the installed version; a version no catalogue read is unknown).

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import os
import re
from typing import Any

from sm120kit.remote.lib.cuda_pieces import installed_pieces, judge_pieces
from sm120kit.remote.lib.cudaarch import cc_text, sass_runs_on
from sm120kit.remote.lib.jit_toolchain import check_jit
from sm120kit.remote.lib.names import dist_name
from sm120kit.remote.lib.probe_env import Context
from sm120kit.remote.lib.targets import IMPORT_TOP_SRC
from sm120kit.remote.lib.version_spec import any_contains

_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?\s*==\s*([^;,)\s]+)")


def _public(version: Any) -> str:
    return str(version or "").split("+", 1)[0]


def holds_for(fact: dict[str, Any], version: Any) -> bool:
    """Whether a fact holds for the installed `version`: one of its ranges (``"when"``, PEP 440
    specifier sets such as ``">=0.4.10,<0.5"``) contains it; a fact without ranges holds for
    the versions it lists (``==v`` each, a local label such as ``+cu130`` the same release)."""
    when = fact.get("when")
    if when is None:
        when = ["==" + _public(v) for v in fact.get("versions") or []]
    return any_contains(when, version)


def module_key(rel: str) -> tuple[str, str, str]:
    """(stem, dotted, rel) of a shared object's path inside its distribution."""
    stem = os.path.basename(rel).split(".")[0]
    dotted = rel.rsplit("/", 1)[0].replace("/", ".") + "." + stem if "/" in rel else stem
    return stem, dotted, rel


def matches(key: str, rel: str) -> bool:
    """Whether a module name (``flash_ops``, ``pkg.flash_ops``) or path names `rel`."""
    stem, dotted, full = module_key(rel)
    return key in (stem, dotted, full) or dotted.endswith("." + key)


def facts_not_for_arch(
    ctx: Context, exts: dict[str, dict[str, Any]], facts: dict[str, Any], version: str | None
) -> dict[str, str]:
    """{path: reason} of the modules the facts (of a range holding this release) say carry no
    code for the arch judged: ``module_archs`` entries whose module's SASS does not run on it."""
    if ctx.cc is None:
        return {}
    out: dict[str, str] = {}
    for fact in facts.get("module_archs") or []:
        if not holds_for(fact, version):
            continue
        for path, ext in exts.items():
            if not matches(str(fact["module"]), ext.get("rel") or ""):
                continue
            if any(sass_runs_on(t, ctx.cc) for t in ext["sass"]) or not (ext["sass"] or ext["ptx"]):
                continue  # it does run here (or holds no code): judged like any other file
            out[path] = str(fact["reason"])
    return out


def facts_source(facts: dict[str, Any], version: str | None) -> str:
    """Where the facts for this release came from: the catalogue file(s) read from the wheels
    (``release catalogue locks/sglang-0.5.23/catalogue.toml``), else the package descriptor."""
    found = sorted(
        {str(f["source"]) for f in facts.get("module_archs") or []
         if f.get("source") and holds_for(f, version)}
    )  # fmt: skip
    return "release catalogue " + ", ".join(found) if found else "package descriptor"


def pins(requires: list[str]) -> dict[str, str]:
    """``{"sglang-kernel": "0.4.10", ...}``: the exact (==) pins of a Requires-Dist list,
    extras' requirements left out."""
    out: dict[str, str] = {}
    for req in requires:
        if "extra ==" in req.replace('"', "").replace("'", ""):
            continue
        m = _PIN.match(req)
        if m:
            out[dist_name(m.group(1))] = m.group(2)
    return out


def import_top(ctx: Context, module: str) -> dict[str, Any]:
    """``import <module>`` in a fresh interpreter; without a GPU through the driver stub
    (torch.cuda faked as one GPU of the capability judged, in_target/import_top.py)."""
    stub = not ctx.torch.get("cuda_available") and ctx.cc is not None
    res, err = ctx.target(
        "import_top",
        IMPORT_TOP_SRC,
        {"module": module, "stub": stub, "cc": list(ctx.cc) if ctx.cc else None},
    )
    if res is None:
        return {"check": "import", "status": "fail", "reason": f"import {module}: probe failed: {err}",
                "details": {}}  # fmt: skip
    details = {k: res.get(k) for k in ("error", "first_line", "missing_module", "stub", "version")}
    if res.get("error"):
        return {"check": "import", "status": "fail",
                "reason": f"import {module} fails: {res['first_line']}", "details": details}  # fmt: skip
    where = f" ({res['stub']})" if res.get("stub") else ""
    return {"check": "import", "status": "pass", "reason": f"import {module} works{where}",
            "details": details}  # fmt: skip


def check_pins(
    top: str, info: dict[str, Any], installed: dict[str, dict[str, Any]], torch: str | None
) -> dict[str, Any]:
    """The top-level package's exact pins on the stack's packages (and torch) beside what is
    installed: sglang 0.5.23 with torch 2.13 names both versions."""
    wanted = pins(info.get("requires") or [])
    rows: list[dict[str, Any]] = []
    wrong: list[str] = []
    if torch and "torch" in wanted:
        ok = _public(torch) == _public(wanted["torch"])
        rows.append({"package": "torch", "pinned": wanted["torch"], "installed": torch, "ok": ok})
        if not ok:
            wrong.append(f"torch {torch} (pinned =={wanted['torch']})")
    for name, pkg in sorted(installed.items()):
        dist = dist_name(pkg.get("distribution") or name)
        if dist not in wanted or dist == dist_name(top):
            continue
        ok = _public(pkg.get("version")) == _public(wanted[dist])
        rows.append(
            {"package": dist, "pinned": wanted[dist], "installed": pkg.get("version"), "ok": ok}
        )
        if not ok:
            wrong.append(f"{dist} {pkg.get('version')} (pinned =={wanted[dist]})")
    if wrong:
        return {"check": "pins", "status": "fail",
                "reason": f"{top} {info.get('version')} pins differ: " + ", ".join(wrong),
                "details": {"pins": rows}}  # fmt: skip
    return {"check": "pins", "status": "pass" if rows else "skip",
            "reason": f"{len(rows)} of {top} {info.get('version')}'s pins installed as pinned",
            "details": {"pins": rows}}  # fmt: skip


def engine_of(
    env_info: dict[str, Any], args: dict[str, Any]
) -> tuple[str | None, str, dict[str, Any]]:
    """(top-level distribution, module to import, JIT rules) of the engine this env holds:
    the first of ``engines`` whose top is installed (its own JIT rules added to ``jit``),
    else ``top``."""
    jit = dict(args.get("jit") or {})
    for engine in args.get("engines") or []:
        if (env_info["packages"].get(engine["top"]) or {}).get("installed"):
            jit.update(engine.get("jit") or {})
            return engine["top"], engine.get("module") or engine["top"], jit
    top = args.get("top")
    return top, (top or "").replace("-", "_"), jit


def stack_section(
    ctx: Context, env_info: dict[str, Any], args: dict[str, Any]
) -> dict[str, Any] | None:
    """``{"top", "version", "packages", "checks", "jit"}`` for the serving stack the args name
    (``top``, ``discover``, ``jit``), or None when the env holds none of it."""
    top, module, jit_rules = engine_of(env_info, args)
    names = [top] if top else []
    names += list(args.get("discover") or []) + list(jit_rules)
    installed = {n: env_info["packages"][n] for n in dict.fromkeys(names)
                 if (env_info["packages"].get(n) or {}).get("installed")}  # fmt: skip
    if not installed:
        return None
    out: dict[str, Any] = {
        "top": top,
        "version": (installed.get(top) or {}).get("version") if top else None,
        "packages": {n: {"distribution": p.get("distribution"), "version": p.get("version"),
                         "location": p.get("location")} for n, p in installed.items()},
        "checks": [],
    }  # fmt: skip
    if top and top in installed:
        out["checks"].append(import_top(ctx, module))
        every = {n: p for n, p in env_info["packages"].items() if p.get("installed")}
        torch = ctx.torch.get("version") or env_info.get("torch_dist_version")
        out["checks"].append(check_pins(top, installed[top], every, torch))
    jit = {}
    for n, rule in jit_rules.items():
        if n in installed:
            spec = rule if isinstance(rule, dict) else {"rule": rule}
            jit[n] = dict(spec, version=installed[n].get("version"),
                          location=installed[n].get("location"))  # fmt: skip
    where = cc_text(ctx.cc) if ctx.cc else None
    # The lookups run here, in the environment the target interpreter sees (its .pth files
    # may set CUDA_HOME), not the probe's own.
    environ = {**os.environ, **(env_info.get("environ") or {})}
    out["jit"] = check_jit(
        jit, env_info.get("sys_path") or [], ctx.cc, ctx.torch.get("cuda"), env=environ
    )
    out["jit"]["arch"] = where
    out["checks"].append({"check": "jit_toolchain", "status": out["jit"]["status"],
                          "reason": out["jit"]["reason"], "details": {}})  # fmt: skip
    # Every CUDA piece the env holds, by distribution: a mix no JIT lookup reaches is said too.
    pieces = judge_pieces(installed_pieces(env_info.get("sys_path") or []),
                          ctx.torch.get("version"), ctx.torch.get("cuda"))  # fmt: skip
    homes = {(p.get("cuda_home"), p.get("nvcc_version"), p.get("headers_version"))
             for p in out["jit"]["packages"].values() if p.get("cuda_home")}  # fmt: skip
    pieces["details"]["cuda_homes"] = [
        {"path": h, "nvcc_version": n, "headers_version": v} for h, n, v in sorted(homes)
    ]
    out["checks"].append(pieces)
    return out
