"""What preflight says besides a verdict: whether the serving env holds a package (its own
listing of every distribution), the fix for a refused backend (the backends of the same option
that would not be refused, sglang's Requires-Dist line for a missing package), and the
sglang_resolution line cut to the backends that decided the verdict.

Pure functions over the preflight probe's JSON and sm120kit/preflight/rules.py's tables;
sm120kit/preflight/verdicts.py calls them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from .host import CC, Check
from .rules import Backend


def is_installed(probe: Mapping[str, Any], dist: str) -> bool:
    """Whether the serving env holds distribution `dist`: the env's own listing of every
    distribution (the probe's ``installed``) when it was read, else the probe's per-name
    answer. Never a fixed list of names: a locked package outside it is still installed."""
    listing = probe.get("installed")
    if listing:
        return canonicalize_name(dist) in listing
    return bool(((probe.get("dists") or {}).get(dist) or {}).get("installed"))


def missing_fix(probe: Mapping[str, Any], missing: Sequence[str], other: str) -> str:
    """The fix for a backend whose packages the env lacks: sglang's own Requires-Dist line when
    sglang names the package (the env misses a dependency of sglang's: reinstall those), else
    installing it; with `other`, the backends that need nothing missing."""
    sglang = (probe.get("dists") or {}).get("sglang") or {}
    wanted = {canonicalize_name(d) for d in missing}
    named = []
    for text in sglang.get("requires") or []:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        # An extra's requirement (`; extra == "dev"`) is not one sglang itself needs.
        if req.marker is not None and "extra" in str(req.marker):
            continue
        if canonicalize_name(req.name) in wanted:
            named.append(str(req))
    if named:
        fix = (
            f"sglang {sglang.get('version')} requires {', '.join(named)} (its Requires-Dist): "
            f"install sglang's dependencies into the env (pip install 'sglang=="
            f"{sglang.get('version')}')"
        )
    else:
        fix = f"pip install {missing[0]} into the env"
    return f"{fix}, or {other}" if other else fix


def alternatives(
    table: Mapping[str, Backend],
    probe: Mapping[str, Any],
    cc: CC | None,
    name: str,
    role: str,
) -> str:
    """The other backends of `table` that preflight would not refuse on `cc` for what they
    load (JIT or torch kernels whose packages the env holds), as a fix: "--flag a or b"."""
    named: list[str] = []
    bare: list[str] = []
    for key, entry in table.items():
        if key == name or entry.alias_of or key == "auto":
            continue
        dispatched = entry.sm12x is not None and cc is not None and cc[0] == 12
        if dispatched and entry.sm12x is not None:
            entry = entry.sm12x
        if entry.kind in ("jit", "torch") and all(is_installed(probe, d) for d in entry.needs):
            (named if entry.needs and not dispatched else bare).append(key)
    # First the backends that are JIT by their own entry and whose package the env was seen
    # to hold; one that names no package is only known to be JIT (the DSA table's triton is
    # refused by sglang off ROCm), one that dispatches by arch rests on that dispatch.
    ok = named or bare
    flag = ROLE_FLAGS.get(role, "--" + role.replace("_", "-") + "-backend")
    if role == "attention" and {"flashinfer", "triton"} & set(ok):
        # The two sglang itself defaults to on 12.x (DEFAULT_ATTENTION).
        ok = [k for k in ("flashinfer", "triton") if k in ok]
    if not ok:
        return f"another {flag}"
    return f"{flag} " + " or ".join(sorted(ok)[:3])


#: The launch flag of each backend role (checks named ``<role>_backend``).
ROLE_FLAGS = {
    "attention": "--attention-backend",
    "moe": "--moe-runner-backend",
    "moe_a2a": "--moe-a2a-backend",
    "fp8_gemm_runner": "--fp8-gemm-backend",
    "fp4_gemm_runner": "--fp4-gemm-backend",
}


#: The resolved fields judged under another check's name (the others are judged under their own).
_JUDGED_AS = {
    "prefill_attention_backend": "attention_backend",
    "decode_attention_backend": "attention_backend",
    "moe_runner_backend": "moe_backend",
}


def shorten_resolution(checks: list[Check], res: Mapping[str, Any]) -> None:
    """The sglang_resolution line names only the backends that decide the verdict: those a
    check judged (not skipped), and the attention phases; the rest of the ~25 fields sglang
    answered stay in its evidence (``--json``)."""
    judged = {c["check"] for c in checks if c["status"] != "skip"}
    target = next((c for c in checks if c["check"] == "sglang_resolution"), None)
    if target is None or target["status"] != "pass":
        return
    shown, rest = [], 0
    for field, value in sorted((res.get("backends") or {}).items()):
        if value in (None, "None"):
            continue
        if field in judged or _JUDGED_AS.get(field) in judged:
            shown.append(f"{field}={value}")
        else:
            rest += 1
    more = f" (+{rest} more fields in --json)" if rest else ""
    gpu = str(res.get("gpu") or "")
    if str(res.get("driver") or "").startswith("no driver"):
        gpu += "; no driver: the tool's libcuda.so.1 stub"
    if res.get("model_source"):
        gpu += f"; {res['model_source']}"
    head = f"resolved by: {res['by']}" + (f" ({gpu})" if gpu else "")
    target["reason"] = f"{head}: {', '.join(shown) or 'no backend field judged'}{more}"
