"""Preflight verdicts from sglang's own checks past argument resolution, and the launch's
overall verdict: pass, fail, or unknown (a pass that would rest on checks not run).

Pure functions over the probe's ``resolved`` document (remote/lib/in_target/server_args.py
``_after``: each step is one of sglang's own functions, run in the serving env until the first
GPU use) and the checks sm120kit/preflight/verdicts.py gathered.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .host import Check, check

#: What a launch needs that preflight cannot run without sglang's resolution (the model's
#: config.json is what sglang's per-model overrides read).
NOT_RUN_WITHOUT_RESOLUTION = (
    "sglang's argument resolution (its per-model overrides of the backends)",
    "sglang's checks past resolution (check_server_args, ModelConfig, the attention backend "
    "factories)",
    "the backends sglang would choose for this model (attention default, DSA phases, MoE runner)",
)

#: sglang's own words that name the fix (its refusals often end with one).
_FIX_IN_TEXT = re.compile(
    r"(?:[Pp]lease use|[Uu]se|[Ss]elect|[Pp]air it with)\s+(`[^`]+`|--[\w-]+(?: [\w.-]+)?)"
)


def fix_from(text: str) -> str | None:
    """The fix sglang's own refusal names (``Please use `--attention-backend flashinfer```), or
    None."""
    found = _FIX_IN_TEXT.search(text)
    return found.group(1).strip("`").rstrip(".") if found else None


def after_check(res: Mapping[str, Any]) -> Check | None:
    """sglang's checks past resolution as one check: fail quoting sglang's refusal, else pass
    naming the steps that ran and where (and why) they stopped. None: resolution did not run."""
    steps: Sequence[Mapping[str, Any]] = res.get("after") or []
    if res.get("backends") is None or res.get("error"):
        return None
    if not steps:
        return check(
            "sglang_checks",
            "skip",
            "sglang's checks past resolution were not run (this probe ran none)",
        )
    ran = [s["step"] for s in steps if s.get("status") == "ran"]
    stopped = [s for s in steps if s.get("status") == "stopped"]
    refused = [s for s in steps if s.get("status") == "refused"]
    evidence = {"steps": list(steps)}
    tail = ""
    if stopped:
        tail = "; not run past: " + "; ".join(f"{s['step']} ({s.get('detail')})" for s in stopped)
    if refused:
        first = refused[0]
        detail = str(first.get("detail") or "")
        words = "; ".join(f"{s['step']} ({s.get('by')}): {s.get('detail')}" for s in refused)
        return check(
            "sglang_checks",
            "fail",
            f"sglang {res.get('version') or ''} refuses the launch past argument resolution "
            f"(where the server would stop before serving): {words}",
            evidence,
            fix_from(detail) or f"change what sglang names in its message ({first['step']})",
        )
    return check(
        "sglang_checks",
        "pass",
        f"sglang's own checks past resolution passed: {', '.join(ran)}{tail}",
        evidence,
    )


def unresolved_checks(res: Mapping[str, Any], checks: list[Check]) -> list[Check]:
    """Without sglang's resolution (a hub id not in the HF cache, no config.json): the
    resolution check becomes unknown, listing what could not run and why, and a backend pass
    that rests on sglang's default (not computed) becomes unknown too."""
    if res.get("backends") is not None:
        return checks
    why = res.get("reason") or "it was not asked"
    out = []
    for c in checks:
        if c["check"] == "sglang_resolution":
            c = check(
                "sglang_resolution",
                "unknown",
                f"{c['reason']}; not run: " + "; ".join(NOT_RUN_WITHOUT_RESOLUTION),
                {"not_run": list(NOT_RUN_WITHOUT_RESOLUTION), "why": why},
                "--model-config PATH (the model's config.json, or a directory holding it), or "
                "put the model in the host's Hugging Face cache",
            )
        elif (
            c["check"] == "attention_backend"
            and c["status"] == "pass"
            and (c.get("evidence") or {}).get("chosen_by") == "sglang default"
        ):
            c = dict(
                c,
                status="unknown",
                reason=c["reason"] + f" (unknown: rests on sglang's default, not computed: {why})",
            )
        out.append(c)
    return out


def overall(checks: Sequence[Check], strict: bool) -> dict[str, Any]:
    """{"verdict", "failed", "unknown", "strict_failed"}: fail when a check fails (with
    `strict`, also when one is unknown), unknown when none fails but one is unknown, else pass.
    `strict_failed` names the unknown checks that `strict` failed, as data: the output reads
    it, never the wording of the `failed` lines."""
    failed = [c for c in checks if c["status"] == "fail"]
    unknown = [c for c in checks if c["status"] == "unknown"]
    lines = [f"{c['check']}: {c['reason']}" for c in failed]
    strict_failed = [c["check"] for c in unknown] if strict else []
    lines += [f"{c['check']}: unknown (--strict): {c['reason']}" for c in unknown if strict]
    verdict = "fail" if lines else ("unknown" if unknown else "pass")
    return {
        "verdict": verdict,
        "failed": lines,
        "unknown": [f"{c['check']}: {c['reason']}" for c in unknown],
        "strict_failed": strict_failed,
    }
