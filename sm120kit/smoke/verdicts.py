"""Smoke's verdicts from the probe's JSON, and the rows and summaries the output shows: pure
(no host), so the output layer reads them without the smoke play (`sm120kit/plays/smoke.py`
runs the probe and judges with these)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from . import report as probe

# The host's one-line error names the cause: the static checks diagnose (no cudart, another
# torch, no SASS), the import check only quotes the loader.
_CAUSE_FIRST = {
    "installed": 0,
    "undefined_symbols": 1,
    "arch_coverage": 2,
    "loader": 3,
    "import_order": 4,
    "gpu_op": 5,
}


def judge_packages(
    doc: Mapping[str, Any], names: Iterable[str], explicit: bool
) -> dict[str, dict[str, Any]]:
    """Per package: the worst status and its checks (an absent package is one check); the
    stack packages the probe found in the env (``discovered``) follow the ones asked for."""
    where = doc.get("python") or "the env"
    out: dict[str, dict[str, Any]] = {}
    for name in [*names, *(n for n in doc.get("discovered") or () if n not in names)]:
        raw = (doc.get("packages") or {}).get(name) or {"installed": False}
        if not raw.get("installed"):
            status = "fail" if explicit else "skip"
            why = "named with --package" if explicit else "not in this env"
            check = {
                "check": "installed",
                "status": status,
                "reason": f"not installed in {where} ({why})",
                "details": {},
            }
            out[name] = {"status": status, "installed": False, "version": None, "checks": [check]}
            continue
        checks = list(raw.get("checks") or [])
        out[name] = {
            "status": probe.worst_status(c.get("status", "fail") for c in checks),
            "installed": True,
            "distribution": raw.get("distribution"),
            "version": raw.get("version"),
            "checks": checks,
            "provenance": raw.get("provenance"),
            "built_for": raw.get("built_for"),
            "torch": raw.get("torch"),
        }
    return out


def judge_stack(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The serving stack's verdict: ``{"top", "version", "status", "checks", "jit",
    "packages"}`` from the probe's ``stack`` section (None when the env holds none of it)."""
    raw = doc.get("stack")
    if not isinstance(raw, Mapping):
        return None
    checks = list(raw.get("checks") or [])
    return {
        "top": raw.get("top"),
        "version": raw.get("version"),
        "status": probe.worst_status(c.get("status", "fail") for c in checks),
        "checks": checks,
        "jit": raw.get("jit"),
        "packages": raw.get("packages"),
    }


def stack_rows(stack: Mapping[str, Any] | None) -> list[tuple[str, str, str, str]]:
    """``(what, check, status, reason)`` rows of the stack's checks and each JIT package."""
    if not stack:
        return []
    top = str(stack.get("top") or "stack")
    out = [(top, c["check"], c["status"], c.get("reason", "")) for c in stack["checks"]
           if c["check"] != "jit_toolchain" or not (stack.get("jit") or {}).get("packages")]  # fmt: skip
    for name, pkg in ((stack.get("jit") or {}).get("packages") or {}).items():
        out.append((name, "jit_toolchain", pkg.get("status", "fail"), pkg.get("reason", "")))
    return out


def checked_summary(
    packages: Mapping[str, Mapping[str, Any]], stack: Mapping[str, Any] | None
) -> str:
    """What a run checked, in words: 'pkg (its distribution version), ...; import sglang;
    4 JIT toolchain(s)', or 'nothing'."""
    parts = []
    for name, pkg in packages.items():
        if not pkg.get("installed"):
            continue
        dist = pkg.get("distribution")
        label = (
            f"{name} ({dist} {pkg.get('version')})"
            if dist and dist != name
            else f"{name} {pkg.get('version')}"
        )
        parts.append(label)
    if stack:
        if any(c["check"] == "import" for c in stack["checks"]):
            parts.append(f"import {stack.get('top')}")
        jit = (stack.get("jit") or {}).get("packages") or {}
        if jit:
            parts.append(f"{len(jit)} JIT toolchain(s)")
    return ", ".join(parts) or "nothing"


def rows(packages: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str, str, str]]:
    """``(package, check, status, reason)``, one per check, in probe order."""
    return [
        (name, c["check"], c["status"], c.get("reason", ""))
        for name, pkg in packages.items()
        for c in pkg["checks"]
    ]


def failure(packages: Mapping[str, Mapping[str, Any]]) -> str | None:
    """``<pkg>: <reason>`` per failed package (the check that names the cause), or None."""
    parts = []
    for name, pkg in packages.items():
        if pkg["status"] != "fail":
            continue
        failed = [c for c in pkg["checks"] if c["status"] == "fail"]
        first = min(failed, key=lambda c: _CAUSE_FIRST.get(c["check"], len(_CAUSE_FIRST)))
        parts.append(f"{name}: {first.get('reason') or first['check']}")
    return "; ".join(parts) or None
